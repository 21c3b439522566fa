//! What the shell observed at a stop (the reply, the clock, the guard
//! figures, the verification gate's result), and the fingerprints it
//! compares turns by (`ralph_fs::fingerprint`). Plain data with no rule in it:
//! the low-level modules that fill it in (`fs::gate`, `fs::git`) own their
//! parts of it and need nothing from `decide`.

pub use ralph_fs::fingerprint::{fingerprint, fingerprint_words};
pub use ralph_fs::gate::Verification;
use ralph_state::time::Timestamp;

/// What the shell observed for this Stop.
// Plain facts, each its own yes or no: a state machine would say less.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// The text of the reply that just finished (`None`: no text, e.g. a tool call).
    pub reply: Option<String>,
    pub now: Option<Timestamp>,
    /// Tokens used since the loop began, when counted.
    pub tokens_used: Option<u64>,
    /// A fingerprint of the working tree and HEAD, when the project is a git repository.
    pub tree_fingerprint: Option<String>,
    /// The fingerprint waits for the work tree, which `engine::step` reads
    /// under the lock: staged into the loop's kept index when it keeps
    /// checkpoints (that tree is the checkpoint too), else `git status`.
    pub tree_pending: bool,
    /// Whether the turn that just ended ran any tool, when known.
    pub ran_tool: Option<bool>,
    /// The transcript proves the turn ran no tool and holds its reply (the
    /// hook's strict reading, as the no-progress check trusts it): the work
    /// tree is as the last stop left it, so its checkpoint is the last one.
    pub tree_unchanged: bool,
    /// Claude Code's consecutive-block cap (0: disabled).
    pub block_cap: u64,
    /// The Stop event's `stop_hook_active`: `Some(false)` is the first stop
    /// of a turn, where Claude Code's block count starts over.
    pub stop_hook_active: Option<bool>,
    /// The transcript does not hold the reply that ended this turn yet, so
    /// `tokens_used` lacks it (the hook's view; `ralph run` is exact).
    pub reply_missing: bool,
    /// The largest single assistant message counted for this stop (tokens).
    pub largest_reply_tokens: u64,
    /// Replies that ended a turn in the part of the transcript read at this
    /// stop (`None`: not read). With the stops counted, it tells how many
    /// replies a lagging transcript lacks.
    pub turn_ends: Option<u64>,
    /// The result of the verification command, once it has run.
    pub verification: Option<Verification>,
    /// Where and how that gate ran (its snapshot, setup, held-out set).
    pub gate_ran: Option<ralph_state::storage::receipt::GateRan>,
    /// `--prd`: the stories as they stand after this stop's checks.
    pub prd: Option<PrdSeen>,
    /// The result of the `--check` command, once it has run.
    pub check: Option<Verification>,
    /// The user has a message waiting in the client's queue (typed while the agent
    /// worked): the turn should end so that it runs (`reply/transcript/queue.rs`).
    pub queued_message: bool,
    /// What the loop spent so far, when counted (the agent's reported cost
    /// in `ralph run`; the transcript's tokens priced in the hook).
    pub cost_usd: Option<ralph_state::money::Money>,
    /// Work in flight or scheduled that will wake the session (Claude
    /// Code's `background_tasks` / `session_crons`), in words.
    pub pending_work: Option<String>,
    /// The plan's 5-hour window as `ralph statusline` last saw it: percent
    /// used now, and when it resets (in words), for `--max-window`.
    pub window: Option<(u64, String)>,
    /// Whether `/goal` drives the session, as far as the transcript read at
    /// this stop says (`None`: it says nothing new).
    pub goal_active: Option<bool>,
    /// The dearest single message priced at this stop (the hook's estimate
    /// for a reply the transcript lacks).
    pub largest_reply_cost: ralph_state::money::Money,
    /// `--protect`/`--scope`: the paths changed since the loop was armed.
    pub changed_paths: ChangedPaths,
    /// Changed manifests (`package.json`, `pyproject.toml`, `Cargo.toml`)
    /// whose only change is in their dependency lists: no protected change.
    pub dependency_only: Vec<String>,
    /// `ralph say --gate`: the gate guidance delivered since the last
    /// promise, from the loop's mailbox (`loop_file/storage/guidance.rs`).
    pub gate_guidance: Vec<String>,
    /// How full the context was at the last request the transcript holds
    /// (`None`: it tells no usage), against the session's window when the
    /// status line reported it (`reply/context.rs`).
    pub context: Option<ralph_state::context::Fill>,
}

/// The paths that differ from the work tree at arming (`fs/tree_diff.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ChangedPaths {
    /// Not compared: the loop has no `--protect` or `--scope`.
    #[default]
    NotAsked,
    /// git could not compare (no tree recorded, the object gone, a timeout).
    Unknown,
    /// The paths, relative to the project root.
    Known(Vec<String>),
}

pub use ralph_state::fields::stories::{PrdSeen, StoryRefusal};
