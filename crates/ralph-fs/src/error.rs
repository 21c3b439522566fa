//! How each error the core returns ends a CLI command: the class, decided
//! once per error type, next to nothing else; the binary turns a class into
//! its exit code in one match.

/// What kind of failure an error is, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitClass {
    /// What the user typed is wrong (as clap's own usage errors).
    Usage,
    /// Anything else that went wrong.
    Failure,
}

/// An error's [`ExitClass`]: a failure unless the error says otherwise.
pub trait Exit: std::error::Error {
    fn exit_class(&self) -> ExitClass {
        ExitClass::Failure
    }
}

impl Exit for std::io::Error {}
impl Exit for serde_json::Error {}
