//! `ralph report --open`: the page handed to the desktop's opener (`xdg-open`, `open`,
//! `cmd /C start`), watched for a moment, and a sentence that says only what is known of it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use ralph_fs::process::program;

/// Hands `path` to the desktop's opener; the sentence for the user.
pub fn in_browser(path: &std::path::Path) -> String {
    opened_words(path, open(path))
}

/// How long ralph watches the opener before it leaves it running: long
/// enough to see `xdg-open` fail for want of a browser, short enough not to
/// hold the terminal.
const OPENER_WATCH: Duration = Duration::from_secs(1);

/// What became of the opener, as `open` saw it.
enum Opened {
    /// It ended well within the watch: the desktop took the page.
    Handed(&'static str),
    /// Still running at the end of the watch (a browser starting, or an opener that waits).
    Running(&'static str),
    /// It ended with an error status, or could not start.
    Failed(&'static str, String),
}

/// The sentence for the user: only what is known of the opener.
fn opened_words(path: &std::path::Path, opened: Opened) -> String {
    match opened {
        Opened::Handed(opener) => {
            format!("Handed it to `{opener}`, which opens it in your browser.")
        }
        Opened::Running(opener) => format!(
            "Handed it to `{opener}`, still starting; if no browser shows it, open {} yourself.",
            path.display()
        ),
        Opened::Failed(opener, why) => format!(
            "Could not open it: `{opener}` {why} (no browser or desktop here?). Open {} in a browser yourself.",
            path.display()
        ),
    }
}

/// Starts the desktop's opener on `path` and watches it for
/// [`OPENER_WATCH`]: its exit status then says whether it worked. Its
/// output goes nowhere; one still running is left to a thread that reaps it.
fn open(path: &std::path::Path) -> Opened {
    let (opener, found) = if cfg!(windows) {
        (
            "cmd /C start",
            program("cmd").map(|mut c| {
                c.args(["/C", "start", ""]);
                c
            }),
        )
    } else if cfg!(target_os = "macos") {
        ("open", program("open"))
    } else {
        ("xdg-open", program("xdg-open"))
    };
    let spawned = found.and_then(|mut command| {
        command
            .arg(path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
    });
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return Opened::Failed(opener, format!("could not start ({e})")),
    };
    let started = Instant::now();
    while started.elapsed() < OPENER_WATCH {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Opened::Handed(opener),
            Ok(Some(status)) => return Opened::Failed(opener, format!("failed ({status})")),
            Ok(None) => std::thread::sleep(Duration::from_millis(25)),
            Err(e) => return Opened::Failed(opener, format!("could not be watched ({e})")),
        }
    }
    std::thread::spawn(move || child.wait());
    Opened::Running(opener)
}
