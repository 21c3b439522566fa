//! One function per subcommand. Each returns a `Result`; `run` maps it to an
//! exit code (0 success, else the `Failure`'s code with its message on
//! stderr). Core errors become failures by `From`, their codes chosen in
//! one place (`exit_code`).

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
        $crate::cmd::emit(&ralph_core::display::block(&text));
    }};
}

/// `say!` for JSON output: the escapes keep it valid JSON.
macro_rules! say_json {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($arg)*);
        let _ = writeln!(std::io::stdout(), "{}", ralph_core::display::json(&text));
    }};
}

mod adopt;
mod capture;
mod hook;
mod init;
mod install;
mod loops;
mod parallel;
mod prompt;
mod receipt;
mod report;
mod run;
mod status;
mod statusline;

use std::path::PathBuf;
use std::process::ExitCode;

use ralph_core::loop_file::store::Project;

pub use capture::emit;

use crate::cli::{Cli, Command, HookCommand};

pub fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Hook(HookCommand::Stop(args)) => return hook::stop(args.host),
        Command::Hook(event) => return hook::session(event),
        Command::Start(args) => loops::start(*args),
        Command::Cancel(args) => loops::cancel(args),
        Command::Adopt(args) => adopt::adopt(args),
        Command::Pause(args) => loops::pause_or_resume(args, false),
        Command::Resume(args) => loops::pause_or_resume(args, true),
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
                    ralph_core::display::block(&failure.message)
                );
            }
            ExitCode::from(failure.code)
        }
    }
}

/// ralph's exit codes, all of them: 0 is success.
pub mod code {
    /// A failure, the message on stderr.
    pub const FAILURE: u8 = 1;
    /// A usage error, as clap's own.
    pub const USAGE: u8 = 2;
    /// `ralph run` / `ralph plan`: the loop ended otherwise than completed.
    pub const ENDED: u8 = 3;
    /// Interrupted by Ctrl-C (128 + SIGINT).
    pub const INTERRUPTED: u8 = 130;
}

/// Why a command did not succeed, and its exit code (see [`code`]).
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: code::USAGE,
        }
    }

    /// The loop ended otherwise than completed; what happened is already printed.
    pub fn ended() -> Self {
        Self {
            message: String::new(),
            code: code::ENDED,
        }
    }

    /// Ctrl-C; what happened is already printed.
    pub fn interrupted() -> Self {
        Self {
            message: String::new(),
            code: code::INTERRUPTED,
        }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Self {
            message,
            code: code::FAILURE,
        }
    }
}

/// The exit code of each error the core returns, in one place: what the
/// user typed wrong is a usage error; everything else a failure.
fn exit_code(error: &(dyn std::error::Error + 'static)) -> u8 {
    use ralph_core::control::LoopError;
    if error.is::<ralph_core::control::arguments::ArgumentsError>()
        || error.is::<ralph_core::run::presets::PermissionModeError>()
    {
        return code::USAGE;
    }
    match error.downcast_ref::<LoopError>() {
        Some(
            LoopError::BadName(_)
            | LoopError::EmptyPrompt
            | LoopError::NotifyUrl(_)
            | LoopError::PromiseWithTags { .. },
        ) => code::USAGE,
        _ => code::FAILURE,
    }
}

macro_rules! failure_from {
    ($($error:ty),* $(,)?) => {$(
        impl From<$error> for Failure {
            fn from(error: $error) -> Self {
                Self {
                    code: exit_code(&error),
                    message: error.to_string(),
                }
            }
        }
    )*};
}

failure_from!(
    ralph_core::control::arguments::ArgumentsError,
    ralph_core::decide::engine::StepError,
    ralph_core::loop_file::state::StateError,
    ralph_core::hook::typed::TypedError,
    ralph_core::loop_file::rewrite::RewriteError,
    ralph_core::loop_file::registry::RegistryError,
    ralph_core::loop_file::store::StoreError,
    ralph_core::fs::safe_fs::FsError,
    ralph_core::loop_file::lifecycle::LoadError,
    ralph_core::loop_file::lifecycle::WriteError,
    ralph_core::run::JudgeError,
    ralph_core::run::fleet::PrdError,
    ralph_core::run::presets::PermissionModeError,
    ralph_core::run::fleet::git::FleetError,
    ralph_core::report::ReportError,
    ralph_core::loop_file::receipt::ReceiptError,
    serde_json::Error,
    std::io::Error,
);

/// A loop error, with the CLI flags that get past it.
impl From<ralph_core::control::LoopError> for Failure {
    fn from(error: ralph_core::control::LoopError) -> Self {
        use ralph_core::control::LoopError;
        let hint = match &error {
            LoopError::NameTaken { name, .. } => format!(
                ". To run a second loop next to it, give it another name: --name <other>; to end it: `ralph cancel --name {name}`; to replace it: --force"
            ),
            LoopError::SessionBusy { name } => format!(
                ". End it first (/ralph-cancel, or `ralph cancel --name {name}`), or add --force to replace it"
            ),
            LoopError::Ambiguous(_) => "; name one with --name, or use --all".to_owned(),
            LoopError::ChangedMeanwhile { name, .. } => {
                format!(". Run `ralph adopt --name {name}` again")
            }
            _ => String::new(),
        };
        Self {
            code: exit_code(&error),
            message: format!("{error}{hint}"),
        }
    }
}

/// `ralph run`'s driver errors: all failures (whatever they wrap, as when
/// they were strings), but a missing loop to take over is a usage error,
/// told with how to arm one.
impl From<ralph_core::run::RunError> for Failure {
    fn from(error: ralph_core::run::RunError) -> Self {
        use ralph_core::run::RunError;
        match error {
            RunError::NoLoopToResume(name) => Self::usage(format!(
                "{}; give a task to arm one: ralph run --name {name} \"<task>\"",
                RunError::NoLoopToResume(name.clone())
            )),
            // A loop error keeps its hint; all of them are failures here.
            RunError::Loop(error) => Failure::from(error).message.into(),
            other => other.to_string().into(),
        }
    }
}

pub type Outcome = Result<(), Failure>;

/// The project the CLI works on, by the hook's own rule (so `ralph start`
/// arms exactly where the hook will look), falling back to the git root or
/// the current folder when no `.claude/` exists yet.
pub fn project() -> Project {
    let ctx = ralph_core::hook::HookContext::from_env();
    if let Some(p) = ctx.locate(None) {
        return p;
    }
    let cwd = ctx
        .process_cwd
        .clone()
        .unwrap_or_else(|| PathBuf::from("."));
    let git_root = ralph_core::loop_file::store::git_root(&cwd, ctx.home.as_deref());
    Project {
        root: git_root.unwrap_or(cwd),
    }
}

/// The git root `ralph install --project` writes into: the nearest folder
/// with `.git` at or above the current folder, found by the walk that finds
/// the project (never at or above the home folder or a folder the user does
/// not own).
pub fn git_root() -> Result<PathBuf, Failure> {
    let ctx = ralph_core::hook::HookContext::from_env();
    let cwd = ctx
        .process_cwd
        .clone()
        .unwrap_or_else(|| PathBuf::from("."));
    ralph_core::loop_file::store::git_root(&cwd, ctx.home.as_deref()).ok_or_else(|| {
        Failure::from(format!(
            "{} is not inside a git repository of yours (no .git at or above it, below your home folder, in folders you own); run `ralph install --project` in the repository",
            cwd.display()
        ))
    })
}

/// The per-user record of armed loops (`$XDG_STATE_HOME/ralph`), by the hook's own rule.
pub fn registry() -> Option<ralph_core::loop_file::registry::Registry> {
    ralph_core::hook::HookContext::from_env().registry()
}

/// The registry, for commands that arm or adopt a loop and so must record it.
pub fn require_registry() -> Result<ralph_core::loop_file::registry::Registry, Failure> {
    registry().ok_or_else(|| ralph_core::loop_file::registry::RegistryError::NoHome.into())
}

/// The session of the agent that runs this command: the first session
/// variable a host sets for its shell commands (Claude Code, Codex, Gemini).
pub fn session_from_env() -> Option<String> {
    ralph_core::hook::host::Host::ALL
        .iter()
        .filter_map(|h| h.session_variable())
        .find_map(|var| std::env::var(var).ok().filter(|s| !s.trim().is_empty()))
}

pub fn display(project: &Project, path: &std::path::Path) -> String {
    path.strip_prefix(&project.root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Make sure `.claude/` exists, so the hook (which looks for it) finds the project.
pub fn ensure_claude_dir(project: &Project) -> Result<(), Failure> {
    project.ensure_dir(".claude")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_core::control::LoopError;
    use ralph_core::control::arguments::ArgumentsError;
    use ralph_core::loop_file::registry::RegistryError;

    #[test]
    fn each_core_error_has_its_exit_code() {
        let usage = [
            Failure::from(ArgumentsError::MissingValue("name".into())),
            Failure::from(LoopError::EmptyPrompt),
            Failure::from(LoopError::BadName("a b".into())),
        ];
        for f in usage {
            assert_eq!(f.code, code::USAGE, "{}", f.message);
        }
        let failure = Failure::from(RegistryError::NoHome);
        assert_eq!(failure.code, code::FAILURE);
        assert_eq!(failure.message, RegistryError::NoHome.to_string());
        assert_eq!(Failure::ended().code, 3);
        assert_eq!(Failure::interrupted().code, 130);
    }

    #[test]
    fn loop_errors_get_their_cli_hints_in_the_binary() {
        let busy = Failure::from(LoopError::SessionBusy { name: "x".into() });
        assert_eq!(
            busy.message,
            "this session already drives the loop `x`; one session runs one loop at a time. End it first (/ralph-cancel, or `ralph cancel --name x`), or add --force to replace it"
        );
        let several = Failure::from(LoopError::Ambiguous("a, b".into()));
        assert_eq!(
            several.message,
            "several loops are active (a, b); name one with --name, or use --all"
        );
        let changed = Failure::from(LoopError::ChangedMeanwhile {
            path: "p".into(),
            name: "x".into(),
        });
        assert_eq!(
            changed.message,
            "p changed while you read it; nothing was adopted. Run `ralph adopt --name x` again"
        );
        let taken = Failure::from(LoopError::NameTaken {
            name: "x".into(),
            path: "p".into(),
            owner: None,
        });
        assert!(
            taken.message.ends_with("give it another name: --name <other>; to end it: `ralph cancel --name x`; to replace it: --force"),
            "{}",
            taken.message
        );
        assert_eq!(busy.code, code::FAILURE);
    }
}
