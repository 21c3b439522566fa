//! `ralph report`: gathers a loop's figures (`ralph_report`), renders
//! the page, writes it and says where; `--open` hands it to the desktop's
//! opener without waiting.

use std::process::Stdio;

use ralph_fs::process::program;
use std::time::{Duration, Instant};

use ralph_report::ReportScope;
use ralph_state::time::Timestamp;

use crate::cli::ReportArgs;
use crate::exit::CmdResult;

pub(super) fn report(args: ReportArgs) -> CmdResult {
    let project = crate::env::project();
    let selection = match (args.all, args.name) {
        (true, _) => ReportScope::All,
        (false, Some(name)) => ReportScope::Name(name),
        (false, None) => ReportScope::Default {
            session: crate::env::session_from_env(),
        },
    };
    let path = write_report(&project, &selection, args.output)?;
    say!("Report written to {}", path.display());
    if args.open {
        say!("{}", opened_words(&path, open(&path)));
    }
    Ok(())
}

/// Gathers, renders and writes the report of `selection` (to `output`, else its default
/// place); where it went. `ralph report` and `ralph watch`'s `r`.
pub(super) fn write_report(
    project: &ralph_state::storage::store::Project,
    selection: &ReportScope,
    output: Option<std::path::PathBuf>,
) -> Result<std::path::PathBuf, crate::exit::Failure> {
    let data = ralph_report::gather(
        project,
        crate::env::registry().as_ref(),
        selection,
        Timestamp::now(),
    )?;
    let page = ralph_report::render(&data);
    let path = match output {
        Some(path) => path,
        None => ralph_report::default_path(project, selection, &data)?,
    };
    ralph_report::write(&path, &page)?;
    Ok(path)
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
