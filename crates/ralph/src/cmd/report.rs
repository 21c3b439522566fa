//! `ralph report`: gathers a loop's figures (`ralph_core::report`), renders
//! the page, writes it and says where; `--open` hands it to the desktop's
//! opener without waiting.

use std::process::Stdio;

use ralph_core::fs::process::program;

use ralph_core::report::{self, Selection};
use ralph_core::time::Timestamp;

use crate::cli::ReportArgs;
use crate::exit::CmdResult;

pub fn report(args: ReportArgs) -> CmdResult {
    let project = crate::env::project();
    let selection = match (args.all, args.name) {
        (true, _) => Selection::All,
        (false, Some(name)) => Selection::Name(name),
        (false, None) => Selection::Default {
            session: crate::env::session_from_env(),
        },
    };
    let data = report::gather(
        &project,
        crate::env::registry().as_ref(),
        &selection,
        Timestamp::now(),
    )?;
    let page = report::render(&data);
    let path = match args.output {
        Some(path) => path,
        None => report::default_path(&project, &selection, &data)?,
    };
    report::write(&path, &page)?;
    say!("Report written to {}", path.display());
    if args.open {
        match open(&path) {
            Ok(()) => say!("Opening it in your browser."),
            Err(e) => say!("Could not open it ({e}); open the file in a browser."),
        }
    }
    Ok(())
}

/// Starts the desktop's opener on `path` and returns at once: its output
/// goes nowhere and nobody waits for it (a thread reaps it if it ends
/// while ralph still runs).
fn open(path: &std::path::Path) -> std::io::Result<()> {
    let mut command = if cfg!(windows) {
        let mut c = program("cmd")?;
        c.args(["/C", "start", ""]);
        c
    } else if cfg!(target_os = "macos") {
        program("open")?
    } else {
        program("xdg-open")?
    };
    let mut child = command
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    std::thread::spawn(move || child.wait());
    Ok(())
}
