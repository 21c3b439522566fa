//! `ralph prd lint` and `ralph prd import`: the findings and the stories
//! come from `ralph_control::prd_file`; here they are printed.

use ralph_control::prd_file;
use ralph_state::fields::prd_lint::{self, Finding};

use crate::exit::{CmdResult, Failure};
use ralph_cli::{PrdImportArgs, PrdLintArgs};

/// Prints each finding; an error among them is a usage failure (exit 2).
fn report(file: &str, findings: &[Finding]) -> CmdResult {
    for finding in findings {
        say!("{}", finding.line());
    }
    let errors = findings
        .iter()
        .filter(|f| f.severity == prd_lint::Severity::Error)
        .count();
    let warnings = findings.len() - errors;
    let count = |n: usize, one: &str, many: &str| {
        ralph_state::plural::count(u64::try_from(n).unwrap_or(u64::MAX), one, many)
    };
    if errors > 0 {
        return Err(Failure::usage(format!(
            "{file}: {} and {}; arming a --prd loop and `ralph run --parallel` refuse it until the errors are fixed",
            count(errors, "error", "errors"),
            count(warnings, "warning", "warnings")
        )));
    }
    if warnings > 0 {
        say!(
            "{file}: {} (nothing refuses it)",
            count(warnings, "warning", "warnings")
        );
    } else {
        say!("{file}: no findings");
    }
    Ok(())
}

pub(super) fn lint(args: &PrdLintArgs) -> CmdResult {
    let findings = prd_file::lint(&crate::env::project(), &args.file)?;
    report(&ralph_fs::display::line(&args.file), &findings)
}

pub(super) fn import(args: &PrdImportArgs) -> CmdResult {
    let project = crate::env::project();
    let (stories, findings) = prd_file::import(&project, &args.file, &args.output, args.force)?;
    say!(
        "wrote {} to {}",
        ralph_state::plural::count(
            u64::try_from(stories).unwrap_or(u64::MAX),
            "story",
            "stories"
        ),
        ralph_fs::display::line(&args.output)
    );
    report(&ralph_fs::display::line(&args.output), &findings)
}
