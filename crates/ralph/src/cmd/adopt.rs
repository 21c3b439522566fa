//! `ralph adopt`: take over, deliberately, a loop file that was not armed on
//! this machine. It shows what the loop would do (every setting the record
//! binds, each command and the webhook in plain words, the prompt, escaped),
//! asks on a terminal (`--yes` skips the question there; never without one), then records it.

use std::io::IsTerminal;

use ralph_control as control;
use ralph_control::adoption::{self, Choice};
use ralph_state::lifecycle::Loop;
use ralph_state::storage::registry::Registry;
use ralph_state::storage::store::Project;
use ralph_state::time::Timestamp;

use crate::exit::{CmdResult, EdgeError};
use ralph_cli::AdoptArgs;

/// Everything adopt shows from the file is shown on one line per value: a
/// newline in a name, a path or a command is `\n`, so it cannot fake a line.
fn escape_controls(text: &str) -> String {
    ralph_fs::display::line(text).into_owned()
}

pub(super) fn adopt(args: AdoptArgs) -> CmdResult {
    super::loops::not_below_a_run("ralph adopt")?;
    let project = crate::env::project();
    let registry = crate::env::require_registry()?;
    let (live, status) = match adoption::choose(&project, &registry, args.name.as_deref())? {
        Choice::Nothing => {
            say!("Nothing to adopt: every loop here is armed on this machine.");
            return Ok(());
        }
        Choice::AlreadyArmed(name) => {
            say!(
                "The loop `{}` is already armed on this machine.",
                escape_controls(&name)
            );
            return Ok(());
        }
        Choice::Candidate { live, arming } => (live, arming),
    };
    let shown = crate::env::display(&project, &live.file.path);
    for line in adoption::describe(&project, &shown, &live, &status) {
        say!("{line}");
    }
    // The user's own step (issue 46), `--yes` or not: never below a `ralph run`, never
    // without a terminal (the agent's shell has none).
    if !std::io::stdin().is_terminal() {
        return Err(EdgeError::NoTerminal(escape_controls(&live.file.name)).into());
    }
    super::loops::users_terminal(
        &format!("Adopt the loop `{}`", escape_controls(&live.file.name)),
        "adopt a loop: run `ralph adopt` in a terminal of yours",
        || None,
    )?;
    if !args.yes && !super::loops::ask("Adopt it, so that ralph drives it from now on? [y/N] ")? {
        return Err(EdgeError::Declined.into());
    }
    record(&project, &registry, &live)
}

fn record(project: &Project, registry: &Registry, live: &Loop) -> CmdResult {
    let name = &live.file.name;
    control::adopt(project, registry, name, &live.text, Timestamp::now())?;
    let owner = live.state.session_id.as_deref().map_or_else(
        || "the first session that stops in this project claims it".to_owned(),
        |s| format!("owner: session {}", escape_controls(s)),
    );
    say!(
        "✓ Adopted loop `{}`: it is armed on this machine and runs like a loop you armed ({owner}).",
        escape_controls(name)
    );
    Ok(())
}
