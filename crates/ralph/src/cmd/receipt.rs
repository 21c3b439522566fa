//! `ralph receipt`: what the gate proved when a loop completed, and with
//! `--recheck`, whether it still holds.

use std::time::Duration;

use ralph_core::control;
use ralph_core::loop_file::guards::DEFAULT_VERIFY_TIMEOUT;
use ralph_core::loop_file::outcome::LoopStatus;
use ralph_core::loop_file::receipt::{self, Receipt};
use ralph_core::time::Timestamp;

use crate::cli::ReceiptArgs;
use crate::exit::{Failure, Outcome};

pub fn receipt(args: ReceiptArgs) -> Outcome {
    let project = crate::env::project();
    let name = match args.name {
        Some(name) => name,
        None => most_recent(&project)?,
    };
    let registry = ralph_core::loop_file::registry::from_env()
        .ok_or_else(|| Failure::from(receipt::ReceiptError::NoHome))?;
    let root = ralph_core::loop_file::registry::canonical_root(&project)?;
    let r = receipt::load(&registry, &root, &name)?;
    let timeout = Duration::from_secs(args.timeout.unwrap_or(DEFAULT_VERIFY_TIMEOUT));
    let checked = args
        .recheck
        .then(|| receipt::recheck(&r, &project.root, timeout));
    if args.json {
        let value = serde_json::json!({ "receipt": r, "recheck": checked });
        say_json!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        show(&r);
        if let Some(c) = &checked {
            show_recheck(&r, c);
        }
    }
    match checked {
        Some(c) if !c.holds => Err(Failure::from(format!(
            "`{}` no longer passes ({}): the loop `{name}` is not done any more",
            r.command, c.status
        ))),
        _ => Ok(()),
    }
}

/// This session's loop, else the most recently ended one.
fn most_recent(project: &ralph_core::loop_file::store::Project) -> Result<String, Failure> {
    let session = crate::env::session_from_env();
    let reports = control::report(project, None, usize::MAX, 0, Timestamp::now())?;
    reports
        .iter()
        .find(|r| session.is_some() && r.session_id == session)
        .or_else(|| reports.iter().find(|r| r.state == LoopStatus::Ended))
        .map(|r| r.name.clone())
        .ok_or_else(|| Failure::from("no loops in this project yet, so no receipt".to_owned()))
}

fn show(r: &Receipt) {
    say!(
        "Loop `{}` completed at iteration {} ({})",
        r.name,
        r.iteration,
        r.passed_at
    );
    say!("  gate:     `{}`", r.command);
    say!(
        "  exit:     {} in {}",
        r.exit_code,
        receipt::seconds(r.duration_ms)
    );
    say!(
        "  output:   sha256 {} ({} bytes)",
        r.output_sha256,
        r.output_bytes
    );
    if let Some(file) = &r.output_file {
        say!("            kept in {file}");
    }
    match (&r.commit, r.clean) {
        (Some(c), Some(clean)) => say!(
            "  commit:   {c} ({})",
            if clean {
                "clean tree"
            } else {
                "uncommitted changes"
            }
        ),
        (None, Some(_)) => say!("  commit:   none yet"),
        _ => say!("  commit:   not a git repository (or git did not answer)"),
    }
    say!("  record:   {}", r.record);
}

fn show_recheck(r: &Receipt, c: &receipt::Recheck) {
    say!();
    if c.holds {
        say!(
            "Recheck: `{}` passes again ({} in {}): done still holds.",
            r.command,
            c.status,
            receipt::seconds(c.duration_ms)
        );
    } else {
        say!(
            "Recheck: `{}` fails now ({}): done no longer holds.",
            r.command,
            c.status
        );
        if !c.output_tail.is_empty() {
            say!("{}", c.output_tail);
        }
    }
    say!(
        "  output {} · commit {}",
        if c.same_output {
            "identical"
        } else {
            "differs"
        },
        if c.same_commit {
            "unchanged"
        } else {
            "changed since"
        }
    );
}
