//! Why a command did not succeed and its exit code: every code ralph
//! exits with, and each core error's code chosen by its class.

use ralph_fs::error::{Exit as _, ExitClass};

/// ralph's exit codes, all of them: 0 is success.
pub(crate) mod code {
    /// A failure, the message on stderr.
    pub(crate) const FAILURE: u8 = 1;
    /// A usage error, as clap's own.
    pub(crate) const USAGE: u8 = 2;
    /// `ralph run` / `ralph plan`: the loop ended otherwise than completed.
    pub(crate) const ENDED: u8 = 3;
    /// `ralph run`: the agent stopped on a rate or usage limit; the loop
    /// waits, uncounted, for a run after the reset.
    pub(crate) const LIMITED: u8 = 4;
    /// `ralph run`: the loop file was deleted or edited during the agent's
    /// turn by no ralph command; the loop was ended as `tampered`.
    pub(crate) const TAMPERED: u8 = 5;
    /// Interrupted by Ctrl-C (128 + SIGINT).
    pub(crate) const INTERRUPTED: u8 = 130;
}

/// Why a command did not succeed, and its exit code (see [`code`]).
#[derive(Debug)]
pub(crate) struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: code::USAGE,
        }
    }

    /// The loop ended otherwise than completed; what happened is already printed.
    pub(crate) fn ended() -> Self {
        Self {
            message: String::new(),
            code: code::ENDED,
        }
    }

    /// Ctrl-C; what happened is already printed.
    pub(crate) fn interrupted() -> Self {
        Self {
            message: String::new(),
            code: code::INTERRUPTED,
        }
    }
}

/// What the binary itself can fail at, at the edge: reading stdin or the
/// terminal, and an adoption the user did not accept.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EdgeError {
    #[error("could not read stdin: {0}")]
    Stdin(std::io::Error),
    #[error("could not read the answer: {0}")]
    Answer(std::io::Error),
    /// `ralph watch`: the terminal could not be set up, drawn on or read.
    #[error("ralph watch: the terminal refused: {0}")]
    Terminal(std::io::Error),
    /// The loop's name, escaped to one line.
    #[error(
        "not adopted: there is no terminal to ask on, and adopting is your own step. Read the loop above, then run `ralph adopt --name {0}` in a terminal of yours"
    )]
    NoTerminal(String),
    #[error("not adopted.")]
    Declined,
    /// A PRD's story commands, shown on the terminal, were not approved.
    #[error("nothing was armed: the story commands were not approved.")]
    NotApproved,
    /// A step only the user may take, asked where the user is not: what was refused and why.
    #[error("{0}")]
    NotTheUser(String),
}

impl ralph_fs::error::Exit for EdgeError {}

/// The exit code of each class of error the core returns, in one place:
/// each error type says its class (`ralph_fs::error::Exit`).
fn exit_code(class: ExitClass) -> u8 {
    match class {
        ExitClass::Usage => code::USAGE,
        ExitClass::Failure => code::FAILURE,
    }
}

macro_rules! failure_from {
    ($($error:ty),* $(,)?) => {$(
        impl From<$error> for Failure {
            fn from(error: $error) -> Self {
                Self {
                    code: exit_code(error.exit_class()),
                    message: error.to_string(),
                }
            }
        }
    )*};
}

failure_from!(
    EdgeError,
    ralph_control::arguments::ArgumentsError,
    ralph_state::fields::state::StateError,
    ralph_state::storage::registry::RegistryError,
    ralph_state::storage::store::StoreError,
    ralph_fs::safe_fs::FsError,
    ralph_state::error::LoopFileError,
    ralph_run::fleet::PrdError,
    ralph_run::presets::PermissionModeError,
    ralph_run::sandbox::SandboxError,
    ralph_run::fleet::git::FleetError,
    ralph_install::InstallError,
    ralph_control::init::InitError,
    ralph_report::ReportError,
    ralph_state::storage::receipt::ReceiptError,
    serde_json::Error,
    std::io::Error,
);

/// A loop error, with the CLI flags that get past it.
impl From<ralph_control::CommandError> for Failure {
    fn from(error: ralph_control::CommandError) -> Self {
        use ralph_control::CommandError;
        let hint = match &error {
            CommandError::NameTaken { name, .. } => format!(
                ". To run a second loop next to it, give it another name: --name <other>; to end it: `ralph cancel --name {name}`; to replace it: --force"
            ),
            CommandError::SessionBusy { name } => format!(
                ". End it first (/ralph-cancel, or `ralph cancel --name {name}`), or add --force to replace it"
            ),
            CommandError::Ambiguous(_) => "; name one with --name, or use --all".to_owned(),
            CommandError::ChangedMeanwhile { name, .. } => {
                format!(". Run `ralph adopt --name {name}` again")
            }
            _ => String::new(),
        };
        Self {
            code: exit_code(error.exit_class()),
            message: format!("{error}{hint}"),
        }
    }
}

/// `ralph run`'s driver errors: failures (whatever they wrap, as when they
/// were strings) unless the error's class says usage; a missing loop to
/// take over is a usage error, told with how to arm one.
impl From<ralph_run::RunError> for Failure {
    fn from(error: ralph_run::RunError) -> Self {
        use ralph_run::RunError;
        match error {
            RunError::NoLoopToResume(name) => Self::usage(format!(
                "{}; give a task to arm one: ralph run --name {name} \"<task>\"",
                RunError::NoLoopToResume(name.clone())
            )),
            other => Self {
                code: exit_code(other.exit_class()),
                message: other.to_string(),
            },
        }
    }
}

pub(crate) type CmdResult = Result<(), Failure>;

/// How a `ralph run` (or `--parallel`) ended, as its exit code; what
/// happened is already printed.
pub(crate) fn run_exit(exit: ralph_run::screen::RunExit) -> CmdResult {
    use ralph_run::screen::RunExit;
    Err(match exit {
        RunExit::Success => return Ok(()),
        RunExit::Ended => Failure::ended(),
        RunExit::Limited => Failure {
            message: String::new(),
            code: code::LIMITED,
        },
        RunExit::Interrupted => Failure::interrupted(),
        RunExit::Tampered => Failure {
            message: String::new(),
            code: code::TAMPERED,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_control::CommandError;
    use ralph_control::arguments::ArgumentsError;
    use ralph_state::storage::registry::RegistryError;

    #[test]
    fn each_core_error_has_its_exit_code() {
        let usage = [
            Failure::from(ArgumentsError::MissingValue("name".into())),
            Failure::from(CommandError::EmptyPrompt),
            Failure::from(CommandError::BadName("a b".into())),
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
        let busy = Failure::from(CommandError::SessionBusy { name: "x".into() });
        assert_eq!(
            busy.message,
            "this session already drives the loop `x`; one session runs one loop at a time. End it first (/ralph-cancel, or `ralph cancel --name x`), or add --force to replace it"
        );
        let several = Failure::from(CommandError::Ambiguous("a, b".into()));
        assert_eq!(
            several.message,
            "several loops are active (a, b); name one with --name, or use --all"
        );
        let changed = Failure::from(CommandError::ChangedMeanwhile {
            path: "p".into(),
            name: "x".into(),
        });
        assert_eq!(
            changed.message,
            "p changed while you read it; nothing was adopted. Run `ralph adopt --name x` again"
        );
        let taken = Failure::from(CommandError::NameTaken {
            name: "x".into(),
            path: "p".into(),
            owner: None,
            paused: false,
        });
        assert!(
            taken.message.ends_with("give it another name: --name <other>; to end it: `ralph cancel --name x`; to replace it: --force"),
            "{}",
            taken.message
        );
        assert_eq!(busy.code, code::FAILURE);
    }
}
