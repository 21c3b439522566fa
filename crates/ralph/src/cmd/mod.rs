//! One module per subcommand, each parse → call the core → print. Each
//! returns a `Result`; `run` maps it to an exit code (0 success, else the
//! `Failure`'s code with its message on stderr; see `crate::exit`).

/// `println!` that ignores a closed stdout (e.g. `ralph status | head`)
/// instead of panicking on a broken pipe. It never exits: `ralph run … |
/// true` must go on driving its loop and record how it ended. What it
/// prints may hold text from a loop file, a log or a reply, so control
/// characters and bidirectional marks are shown escaped (newlines and tabs
/// stay): nothing printed can steer the terminal.
macro_rules! say {
    () => { say!("") };
    ($($arg:tt)*) => {{
        let text = format!($($arg)*);
        $crate::cmd::emit(&ralph_fs::display::block(&text));
    }};
}

/// `say!` for JSON output: the escapes keep it valid JSON.
macro_rules! say_json {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($arg)*);
        let _ = writeln!(std::io::stdout(), "{}", ralph_fs::display::json(&text));
    }};
}

mod adopt;
mod capture;
mod fleet_budget;
mod hook;
mod init;
mod install;
mod loops;
mod parallel;
mod prd;
mod prompt;
mod receipt;
mod report;
mod run;
mod say;
mod status;
mod statusline;
mod watch;

use std::process::ExitCode;

pub(crate) use capture::emit;

use ralph_cli::{Cli, Command, HookCommand, PrdCommand};

/// The Stop hook, its arguments read without clap (`main.rs`).
pub(crate) fn stop_hook(host: Option<ralph_core::hook::host::Host>) -> ExitCode {
    hook::stop(host)
}

pub(crate) fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Hook(HookCommand::Stop(args)) => return hook::stop(args.host),
        Command::Hook(event) => return hook::session(event),
        Command::Start(args) => loops::start(*args),
        Command::Cancel(args) => loops::cancel(args),
        Command::Adopt(args) => adopt::adopt(args),
        Command::Pause(args) => loops::pause_or_resume(args, false),
        Command::Resume(args) => loops::resume(args),
        Command::Rollback(args) => loops::rollback(&args),
        Command::Say(args) => say::say(&args),
        Command::Watch(args) => watch::watch(args),
        Command::Run(args) => match args.fanout.parallel {
            Some(n) => parallel::run(*args, usize::from(n)),
            None => run::run(*args),
        },
        Command::Statusline => statusline::statusline(),
        Command::Status(args) => status::status(args),
        Command::Log(args) => status::log(args),
        Command::Report(args) => report::report(args),
        Command::Receipt(args) => receipt::receipt(args),
        Command::Plan(args) => parallel::plan(args),
        Command::Prd(PrdCommand::Lint(args)) => prd::lint(&args),
        Command::Prd(PrdCommand::Import(args)) => prd::import(&args),
        Command::FleetBudget(command) => fleet_budget::fleet_budget(command),
        Command::Clean => parallel::clean(),
        Command::Init(args) => init::init(args),
        Command::Install(args) => install::install(args),
        Command::Uninstall(args) => install::uninstall(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if !failure.message.is_empty() {
                // Never `eprintln!`: a closed stderr would panic, and the
                // exit code is what matters then.
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "ralph: {}",
                    ralph_fs::display::block(&failure.message)
                );
            }
            ExitCode::from(failure.code)
        }
    }
}
