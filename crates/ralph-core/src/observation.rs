//! What the shell observed at a stop (the reply, the clock, the guard
//! figures, the verification gate's result), and the fingerprints it
//! compares turns by. Plain data with no rule in it: the low-level modules
//! that fill it in (`verify`, `worktree`) need nothing from `decide`.

use crate::time::Timestamp;

/// What the shell observed for this Stop.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// The text of the reply that just finished (`None`: no text, e.g. a tool call).
    pub reply: Option<String>,
    pub now: Option<Timestamp>,
    /// Tokens used since the loop began, when counted.
    pub tokens_used: Option<u64>,
    /// A fingerprint of the working tree and HEAD, when the project is a git repository.
    pub tree_fingerprint: Option<String>,
    /// Whether the turn that just ended ran any tool, when known.
    pub ran_tool: Option<bool>,
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
    /// `--prd`: the stories as they stand after this stop's checks.
    pub prd: Option<PrdSeen>,
}

/// A loop's PRD at a stop, after each story that turned to passing was
/// checked (and set back when its check failed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrdSeen {
    /// The PRD's path as the loop names it.
    pub file: String,
    pub stories: Vec<crate::stories::Story>,
    /// Stories set back to `passes: false` at this stop, and why.
    pub refused: Vec<StoryRefusal>,
}

/// A story that turned to passing but was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoryRefusal {
    /// Its command (or the loop's `--verify`) failed.
    Failed {
        id: String,
        command: String,
        verification: Verification,
    },
    /// Its command is not the one recorded at arming, so it did not run.
    Unrecorded { id: String, command: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    pub passed: bool,
    /// `exit 3`, `timed out after 300s`, `could not start: …`
    pub status: String,
    /// The last lines of its output.
    pub output_tail: String,
}

/// The fingerprint of the reply with its whitespace collapsed (the same
/// value as `fingerprint(&promise::normalise(text))`), without the copy.
pub fn fingerprint_words(text: &str) -> String {
    let mut hash = Fnv::default();
    for (i, word) in text.split_whitespace().enumerate() {
        if i > 0 {
            hash.write(b" ");
        }
        hash.write(word.as_bytes());
    }
    format!("{:016x}", hash.0)
}

struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// FNV-1a 64: stable across runs and versions, unlike std's hasher.
pub fn fingerprint(text: &str) -> String {
    let mut hash = Fnv::default();
    hash.write(text.as_bytes());
    format!("{:016x}", hash.0)
}
