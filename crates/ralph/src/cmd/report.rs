//! `ralph report`: gathers a loop's figures (`ralph_report`), renders
//! the page, writes it and says where; `--open` hands it to the desktop's
//! opener without waiting.

use ralph_report::ReportScope;
use ralph_state::time::Timestamp;

use crate::exit::CmdResult;
use ralph_cli::ReportArgs;

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
        say!("{}", ralph_report::open::in_browser(&path));
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
