//! `ralph run --parallel N`, `ralph plan` and `ralph clean`: many loops at
//! once, driven by `ralph_core::run::fleet::driver`. Here are the terminal
//! (a live block of the running loops, or plain lines), Ctrl-C and the exit
//! code.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ralph_core::run::fleet::git::FleetError;
use ralph_core::run::fleet::{self, driver};
use ralph_core::time::format_duration;

use crate::cli::{ArmFlags, PlanArgs, RunArgs};
use crate::exit::{Failure, Outcome};

pub fn run(args: RunArgs, n: usize) -> Outcome {
    if args.hand_back_after.is_some() || args.force {
        return Err(FleetError::SingleLoopFlags.into());
    }
    // Each child resolves the preset itself; a flag it would refuse is refused here, once.
    ralph_core::run::presets::command_line(&args.agent, args.permission_mode.as_deref())?;
    let promise = driver::promise(args.arm.completion_promise.as_deref());
    let request = driver::Request {
        merge: &args.fanout.merge,
        prd: args.arm.prd.as_deref(),
        tasks: &args.prompt,
        only: &args.fanout.story,
        child_args: child_args(&args, &promise),
        promise,
        verify: args.arm.guards.0.get("verify"),
        verify_timeout: args.arm.guards.0.get("verify-timeout"),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    let mut screen = Screen {
        live: std::io::stdout().is_terminal(),
        drawn: 0,
    };
    let summary = driver::run(crate::env::project(), request, n, &stop, &mut |event| {
        screen.show(&event);
    })?;
    summary_of(&summary)
}

/// The summary table and the notes; the exit code says whether every
/// story came home.
fn summary_of(summary: &driver::Summary) -> Outcome {
    if summary.rows.is_empty() {
        say!("Nothing open to run: every story passes, or came home earlier.");
        return Ok(());
    }
    say!();
    say!("{}", fleet::table(&summary.rows));
    for note in &summary.notes {
        say!("{note}");
    }
    if summary.interrupted {
        say!("Run the same command again to resume what was left.");
        return Err(Failure::interrupted());
    }
    if fleet::all_home(&summary.rows) {
        Ok(())
    } else {
        Err(Failure::ended())
    }
}

/// The arguments every child `ralph run` gets: the agent and the loop's
/// settings, as given to this run (the task comes on stdin).
fn child_args(args: &RunArgs, promise: &str) -> Vec<String> {
    let mut out = vec!["--agent".to_owned(), args.agent.clone()];
    if let Some(mode) = &args.permission_mode {
        out.extend(["--permission-mode".to_owned(), mode.clone()]);
    }
    let ArmFlags {
        max_iterations,
        completion_promise: _,
        abort_promise,
        guards,
        fresh_context,
        // A story's loop gets its story as its task, not the whole PRD.
        prd: _,
        notify,
        notify_url,
    } = &args.arm;
    out.extend(["--completion-promise".to_owned(), promise.to_owned()]);
    let mut add = |flag: &str, value: Option<String>| {
        if let Some(v) = value {
            out.extend([flag.to_owned(), v]);
        }
    };
    add("--max-iterations", max_iterations.map(|v| v.to_string()));
    add("--abort-promise", abort_promise.clone());
    out.extend(guards.0.args());
    if *fresh_context {
        out.push("--fresh-context".to_owned());
    }
    // Each story's loop tells of its own end.
    if *notify {
        out.push("--notify".to_owned());
    }
    if let Some(url) = notify_url {
        out.extend(["--notify-url".to_owned(), url.clone()]);
    }
    out
}

/// The fleet's terminal: on a terminal, a live block of the running loops
/// under the lines that stay; otherwise every line, plain.
struct Screen {
    live: bool,
    /// Lines on screen in the live block, to redraw over.
    drawn: usize,
}

impl Screen {
    fn show(&mut self, event: &driver::Event) {
        match event {
            driver::Event::Said(line) => {
                if self.live {
                    self.clear();
                }
                say!("{line}");
            }
            driver::Event::Output { id, line } => {
                if !self.live {
                    say!("[{id}] {line}");
                }
            }
            driver::Event::Running(running) => self.redraw(running),
        }
    }

    fn clear(&mut self) {
        if self.drawn > 0 {
            let _ = write!(std::io::stdout(), "\x1b[{}A\x1b[J", self.drawn);
            self.drawn = 0;
        }
    }

    /// The live block: one line per running loop (terminal only).
    fn redraw(&mut self, running: &[driver::Running]) {
        if !self.live {
            return;
        }
        self.clear();
        let mut out = std::io::stdout();
        for slot in running {
            let last: String = slot.last.chars().take(60).collect();
            let _ = writeln!(
                out,
                "\x1b[2K⠿ {} · {} · {}",
                slot.id,
                format_duration(slot.seconds),
                ralph_core::display::line(&last)
            );
        }
        let _ = out.flush();
        self.drawn = running.len();
    }
}

/// `ralph plan [--matrix]`.
pub fn plan(args: PlanArgs) -> Outcome {
    let stories = driver::plan(&crate::env::project())?;
    if args.matrix {
        let open: Vec<fleet::Story> = stories.into_iter().map(|(s, _)| s).collect();
        say_json!("{}", fleet::matrix(&open));
        return Ok(());
    }
    if stories.is_empty() {
        say!("No open stories in {}.", fleet::PRD);
    }
    for (s, state) in &stories {
        say!("{}  {state}  {}", s.id, s.title);
    }
    Ok(())
}

/// `ralph clean`: removes every worktree `ralph run --parallel` kept.
pub fn clean() -> Outcome {
    driver::clean(&crate::env::project(), &mut |line| say!("{line}"))?;
    Ok(())
}
