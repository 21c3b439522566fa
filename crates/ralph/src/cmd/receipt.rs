//! `ralph receipt`: what the gate proved when a loop completed, and with
//! `--recheck`, whether it still holds (`control::receipt_text` words it).

use std::time::Duration;

use ralph_control::{listing, receipt_text};
use ralph_state::fields::guards::DEFAULT_VERIFY_TIMEOUT;
use ralph_state::storage::receipt::{self, ReceiptError};
use ralph_state::time::Timestamp;

use crate::exit::CmdResult;
use ralph_cli::ReceiptArgs;

pub(super) fn receipt(args: ReceiptArgs) -> CmdResult {
    let project = crate::env::project();
    let name = match args.name {
        Some(name) => name,
        None => {
            let session = crate::env::session_from_env();
            listing::most_recent(&project, session.as_deref(), Timestamp::now())?
                .ok_or(ReceiptError::NoLoops)?
        }
    };
    let registry = ralph_state::storage::registry::from_env().ok_or(ReceiptError::NoHome)?;
    let root = ralph_state::storage::registry::canonical_root(&project)?;
    let r = receipt::load(&registry, &root, &name)?;
    let timeout = Duration::from_secs(args.timeout.unwrap_or(DEFAULT_VERIFY_TIMEOUT));
    let checked = args.recheck.then(|| {
        ralph_core::decide::gate_place::recheck(Some(&registry), &project.root, &r, timeout)
    });
    if args.json {
        let value = serde_json::json!({ "receipt": r, "recheck": checked });
        say_json!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        let rechecked = checked.as_ref().map(|c| receipt_text::recheck(&r, c));
        for line in receipt_text::receipt(&r)
            .iter()
            .chain(rechecked.iter().flatten())
        {
            say!("{line}");
        }
    }
    match checked {
        Some(c) if !c.holds => Err(ReceiptError::NoLongerHolds {
            command: r.command,
            status: c.status,
            name,
        }
        .into()),
        _ => Ok(()),
    }
}
