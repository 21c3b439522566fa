//! `ralph init`: a template's PRD, progress log and prompt, written by
//! `ralph_control::init`; here what it did is printed.

use ralph_control::init;

use crate::exit::CmdResult;
use ralph_cli::InitArgs;

pub(super) fn init(args: InitArgs) -> CmdResult {
    let project = crate::env::project();
    let added = init::init(&project, &args.template, args.force, &mut |line| {
        say!("{line}");
    })?;
    if let Some(added) = added {
        say!(
            "added {added} to .git/info/exclude (loop state is per machine; your .gitignore is left alone)"
        );
    }
    say!(
        "\nNext: replace the example stories in ralph/prd.json with yours (a story's \"verify\" is the command that must pass before it counts), then arm the loop:\n  /ralph-loop --prd \"Follow ralph/PROMPT.md\" --max-iterations 30\n(or: ralph start --prd --max-iterations 30 < ralph/PROMPT.md)"
    );
    Ok(())
}

/// `/ralph-init ARGS`, answered by the UserPromptSubmit hook: `raw` as the event carries it.
pub(super) fn init_typed(raw: &str) -> CmdResult {
    let mut args = InitArgs {
        template: "software".to_owned(),
        force: false,
    };
    init::apply_typed(&mut args.template, &mut args.force, raw)?;
    init(args)
}
