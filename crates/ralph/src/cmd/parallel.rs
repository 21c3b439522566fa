//! `ralph run --parallel N`, `ralph plan` and `ralph clean`: many loops at
//! once, driven by `ralph_run::fleet::driver` and worded by
//! `fleet::screen`. Here: the children's flags taken from the command
//! line, Ctrl-C, writing to the terminal, and the exit code.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ralph_run::fleet::child::ChildFlags;
use ralph_run::fleet::git::FleetError;
use ralph_run::fleet::screen::{self, FleetScreen, Paint};
use ralph_run::fleet::{self, driver};

use crate::exit::CmdResult;
use ralph_cli::{ArmFlags, PlanArgs, RunArgs};

pub(super) fn run(args: RunArgs, n: usize) -> CmdResult {
    if args.hand_back_after.is_some() || args.force {
        return Err(FleetError::SingleLoopFlags.into());
    }
    // Each child resolves the preset itself; a flag it would refuse is refused here, once.
    ralph_run::presets::command_line(&args.agent, args.permission_mode.as_deref())?;
    // Likewise a sandbox that cannot be had: refused before any worktree is made.
    args.refuse_unconfined_gate()?;
    if let Some(confinement) = args.confinement() {
        ralph_run::sandbox::choose_tool(&confinement)?;
    }
    let promise = driver::promise(args.arm.completion_promise.as_deref());
    let approved = approve_on_terminal(&args)?;
    let request = driver::FleetRequest {
        merge: &args.fanout.merge,
        prd: args.arm.prd.as_deref(),
        tasks: &args.prompt,
        only: &args.fanout.story,
        child: child_flags(&args),
        promise,
        guards: fleet_guards(&args)?,
        approve_commands: approved.as_deref(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    let mut screen = FleetScreen::new(std::io::stdout().is_terminal());
    let summary = driver::run(crate::env::project(), request, n, &stop, &mut |event| {
        for paint in screen.show(&event) {
            match paint {
                Paint::Line(line) => say!("{line}"),
                Paint::Raw(raw) => {
                    let _ = write!(std::io::stdout(), "{raw}");
                    let _ = std::io::stdout().flush();
                }
            }
        }
    })?;
    let (lines, exit) = screen::summary(&summary);
    for line in &lines {
        say!("{line}");
    }
    crate::exit::run_exit(exit)
}

/// The `--approve-commands` code the fleet runs with. On a terminal, the PRD's story
/// commands the user has not approved are shown and asked about once for the whole
/// fleet; a yes approves exactly the list shown (the driver checks the code again against
/// the PRD it reads). Without a terminal nothing is asked: the driver refuses with the
/// list and the flag, and a code given is refused (`loops::approving_users_own`). Tasks
/// on the command line have no story commands.
fn approve_on_terminal(args: &RunArgs) -> Result<Option<String>, crate::exit::Failure> {
    let given = args.arm.approve_commands.clone();
    // A code given is the user's own step, as with `ralph start --approve-commands`:
    // refused below a `ralph run` and without a terminal, and the list asked about.
    if given.is_some() {
        super::loops::approving_users_own()?;
    }
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    if !terminal || !args.prompt.is_empty() {
        return Ok(given);
    }
    // A PRD that cannot be read is the driver's error to tell, in its words.
    let Ok(list) = driver::story_commands(&crate::env::project().root) else {
        return Ok(given);
    };
    // No story command: nothing to ask about.
    if list.approved_by(None) {
        return Ok(given);
    }
    if !super::loops::ask(&list.fleet_question())? {
        return Err(crate::exit::EdgeError::NotApproved.into());
    }
    // A code given stays the one checked: the driver refuses it for another list.
    Ok(given.or(Some(list.code)))
}

/// The guards the fleet's own gate runs with, read once from the command
/// line as a loop file's are (the 14-minute cap on `--verify-timeout`
/// included).
fn fleet_guards(
    args: &RunArgs,
) -> Result<ralph_state::fields::guards::Guards, crate::exit::Failure> {
    Ok(args.arm.guards.0.guards()?)
}

/// What every child `ralph run` is given again. Every flag is named, so a
/// new one cannot be forgotten here: the loop's name comes from its story,
/// the task on stdin, the PRD's story is the task, `--hand-back-after` and
/// `--force` are refused above, and `--parallel`, `--story`, `--merge` are
/// the fleet's own.
fn child_flags(args: &RunArgs) -> ChildFlags {
    let RunArgs {
        name: _,
        agent,
        permission_mode,
        arm,
        hand_back_after: _,
        force: _,
        wait_for_reset,
        sandbox: _,
        sandbox_network: _,
        sandbox_image: _,
        cancel_on_interrupt: _,
        fanout: _,
        prompt: _,
    } = args;
    let ArmFlags {
        max_iterations,
        // Given as the fleet's resolved promise (`driver::promise`).
        completion_promise: _,
        abort_promise,
        guards,
        fresh_context,
        // A fleet's children are `ralph run` agents, fresh at every iteration.
        fresh_at: _,
        fresh_via: _,
        prd: _,
        notify,
        notify_url,
        // The fleet's children are given no PRD (their story is their task): the fleet
        // checks the approval once (`driver::FleetRequest`), and each child is given its
        // story's approved command itself, as its `--verify` gate.
        approve_commands: _,
        protect,
        scope,
        unprotect,
        no_default_protect,
    } = arm;
    ChildFlags {
        agent: agent.clone(),
        permission_mode: permission_mode.clone(),
        max_iterations: *max_iterations,
        abort_promise: abort_promise.clone(),
        guards: guards.0.clone(),
        fresh_context: *fresh_context,
        notify: *notify,
        notify_url: notify_url.clone(),
        wait_for_reset: *wait_for_reset,
        sandbox: args.confinement(),
        protect: protect.clone(),
        scope: scope.clone(),
        unprotect: unprotect.clone(),
        no_default_protect: *no_default_protect,
    }
}

/// `ralph plan [--matrix]`.
pub(super) fn plan(args: PlanArgs) -> CmdResult {
    let plan = driver::plan(&crate::env::project())?;
    if args.matrix {
        // The fleet's workflow runs one wave at a time: the stories that can start now.
        let first: Vec<fleet::Story> = plan
            .waves
            .into_iter()
            .next()
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.story)
            .collect();
        say_json!("{}", fleet::matrix(&first));
        return Ok(());
    }
    for line in screen::plan(&plan) {
        say!("{line}");
    }
    let project = crate::env::project();
    for line in driver::story_commands(&project.root)?.plan_lines() {
        say!("{line}");
    }
    Ok(())
}

/// `ralph clean`: removes every worktree `ralph run --parallel` kept.
pub(super) fn clean() -> CmdResult {
    driver::clean(&crate::env::project(), &mut |line| say!("{line}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;
    use ralph_run::fleet::child::StoryGate;

    use super::*;
    use ralph_cli::{Cli, Command};

    fn run_args(words: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from([&["ralph", "run", "--parallel", "2"], words].concat())
            .expect("the command line parses");
        match cli.command {
            Command::Run(args) => *args,
            _ => unreachable!("a run"),
        }
    }

    #[test]
    fn the_fleets_own_gate_has_the_time_limit_every_loop_has() {
        let guards = fleet_guards(&run_args(&["--verify", "make test"])).unwrap();
        assert_eq!(guards.verify.as_deref(), Some("make test"));
        assert_eq!(guards.verify_timeout_secs, 300);
        let long = fleet_guards(&run_args(&["--verify", "t", "--verify-timeout", "20m"])).unwrap();
        assert_eq!(long.verify_timeout_secs, 14 * 60, "held at the cap");
    }

    #[test]
    fn a_story_childs_gate_has_the_time_limit_every_loop_has() {
        let args = run_args(&[
            "--agent",
            "true",
            "--verify",
            "t",
            "--verify-timeout",
            "20m",
        ]);
        let story = fleet::Story {
            verify: Some("make check".into()),
            ..fleet::Story::default()
        };
        let given = child_flags(&args).args("DONE", StoryGate::from(&story));
        let words: Vec<&str> = given.iter().map(String::as_str).collect();
        let cli = Cli::try_parse_from([&["ralph", "run"][..], &words].concat())
            .expect("the child's command line parses");
        let Command::Run(child) = cli.command else {
            unreachable!("a run")
        };
        let guards = child.arm.guards.0.guards().unwrap();
        assert_eq!(guards.verify.as_deref(), Some("( make check\n) && ( t\n)"));
        assert_eq!(guards.verify_timeout_secs, 14 * 60, "held at the cap");
    }

    #[test]
    fn a_child_waits_for_the_reset_when_the_fleet_was_told_to() {
        let args = run_args(&["--wait-for-reset", "--agent", "true"]);
        assert!(
            child_flags(&args)
                .args("DONE", StoryGate::default())
                .contains(&"--wait-for-reset".to_owned())
        );
        let without = run_args(&["--agent", "true"]);
        assert!(
            !child_flags(&without)
                .args("DONE", StoryGate::default())
                .contains(&"--wait-for-reset".to_owned())
        );
    }

    #[test]
    fn a_child_gets_the_loop_settings_but_not_the_fleet_s_own_flags() {
        let args = run_args(&[
            "--agent",
            "true",
            "--permission-mode",
            "acceptEdits",
            "--max-iterations",
            "4",
            "--abort-promise",
            "STUCK",
            "--fresh-context",
            "--notify",
            "--story",
            "US-1",
            "--merge",
            "none",
            "--name",
            "mine",
            "--prd",
        ]);
        let given = child_flags(&args).args("DONE", StoryGate::default());
        for flag in [
            "--permission-mode",
            "--max-iterations",
            "--abort-promise",
            "--fresh-context",
            "--notify",
        ] {
            assert!(given.contains(&flag.to_owned()), "{flag}: {given:?}");
        }
        for flag in ["--story", "--merge", "--name", "--prd", "--parallel"] {
            assert!(
                !given.iter().any(|a| a.starts_with(flag)),
                "{flag}: {given:?}"
            );
        }
    }
}
