//! How a loop ended: the word stored in its `outcome:` field and the
//! notice the user sees.

/// How a loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    MaxIterations,
    Aborted,
    TimeBudget,
    TokenBudget,
    Stuck,
    NoProgress,
    BlockCap,
    /// The verification gate failed `max_verify_failures` times.
    VerifyFailures,
    Cancelled,
    Corrupt,
    /// `ralph run`: the agent was refused the same permission again.
    Denied,
    /// `ralph run`: the agent could not run, on a loop this run armed.
    Failed,
}

impl Outcome {
    /// The icon and the words of the notice when a loop ends this way.
    pub fn headline(self) -> (&'static str, &'static str) {
        match self {
            Self::Completed => ("✅", "completed"),
            Self::MaxIterations => ("⏹", "stopped at its iteration limit"),
            Self::Aborted => ("🛑", "stopped: the agent is blocked"),
            Self::TimeBudget | Self::TokenBudget => ("⏹", "stopped: budget reached"),
            Self::Stuck => ("⚠", "stopped: stuck"),
            Self::NoProgress => ("⚠", "stopped: no progress"),
            Self::BlockCap => ("⚠", "stopped before Claude Code's block cap"),
            Self::VerifyFailures => ("⚠", "stopped: the check kept failing"),
            Self::Cancelled => ("⏹", "cancelled"),
            Self::Corrupt => ("⚠", "stopped: its state file is corrupt"),
            Self::Denied => ("🚫", "stopped: the agent was denied permission"),
            Self::Failed => ("⚠", "stopped: the agent could not run"),
        }
    }

    /// The word stored in the `outcome:` field and shown by `ralph status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::MaxIterations => "max_iterations",
            Self::Aborted => "aborted",
            Self::TimeBudget => "time_budget",
            Self::TokenBudget => "token_budget",
            Self::Stuck => "stuck",
            Self::NoProgress => "no_progress",
            Self::BlockCap => "block_cap",
            Self::VerifyFailures => "verify_failures",
            Self::Cancelled => "cancelled",
            Self::Corrupt => "corrupt",
            Self::Denied => "denied",
            Self::Failed => "failed",
        }
    }
}
