//! `ralph say`: guidance for a loop's next iteration, or for a `--parallel`
//! story's (`--story`), or every one (`--all`); the core queues it
//! (`control::guidance`).

use ralph_control::guidance::{self, Say};
use ralph_state::storage::fleet;
use ralph_state::storage::store::Project;
use ralph_state::time::Timestamp;

use crate::exit::{CmdResult, Failure};
use ralph_cli::SayArgs;

pub(super) fn say(args: &SayArgs) -> CmdResult {
    let project = crate::env::project();
    let session = crate::env::session_from_env();
    let said = say_as(&project, args, "ralph say", session.as_deref())?;
    for line in said {
        say!("{line}");
    }
    Ok(())
}

/// `ralph say`'s work, for the CLI, `/ralph-say` and `ralph watch`: the lines to print.
pub(crate) fn say_as(
    project: &Project,
    args: &SayArgs,
    by: &str,
    session: Option<&str>,
) -> Result<Vec<String>, Failure> {
    let registry = crate::env::registry();
    fn request<'a>(
        args: &'a SayArgs,
        name: Option<&'a str>,
        all: bool,
        by: &'a str,
        session: Option<&'a str>,
    ) -> Say<'a> {
        Say {
            text: &args.text,
            name,
            all,
            gate: args.gate,
            by,
            session,
        }
    }
    let now = Timestamp::now();
    if let Some(id) = &args.story {
        let Some((story, name)) = fleet::story_loop(&project.root, id) else {
            return Err(Failure::usage(format!(
                "no story `{}` of `ralph run --parallel` here (its worktree {}/{} is missing); nothing was queued",
                ralph_fs::display::line(id),
                fleet::WORKTREES,
                ralph_fs::display::line(id)
            )));
        };
        let said = guidance::say(
            &story,
            registry.as_ref(),
            request(args, Some(&name), false, by, session),
            now,
        )?;
        return Ok(said.lines);
    }
    if !args.all {
        let said = guidance::say(
            project,
            registry.as_ref(),
            request(args, args.name.as_deref(), false, by, session),
            now,
        )?;
        return Ok(said.lines);
    }
    // `--all`: this project's loops, then every story's.
    let mut lines = Vec::new();
    let mut first_error = None;
    let stories = fleet::story_ids(&project.root)
        .into_iter()
        .filter_map(|id| fleet::story_loop(&project.root, &id));
    let targets =
        std::iter::once((project.clone(), None)).chain(stories.map(|(p, n)| (p, Some(n))));
    for (target, name) in targets {
        match guidance::say(
            &target,
            registry.as_ref(),
            request(args, name.as_deref(), name.is_none(), by, session),
            now,
        ) {
            Ok(said) => lines.extend(said.lines),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match (lines.is_empty(), first_error) {
        (true, Some(e)) => Err(e.into()),
        _ => Ok(lines),
    }
}
