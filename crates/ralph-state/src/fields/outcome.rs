//! How a loop ended (the word stored in its `outcome:` field and the
//! notice the user sees), and what state `ralph status` reports it in.

use crate::fields::guards::Tripped;

/// How a loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    MaxIterations,
    Aborted,
    /// One of the guards ended it; each guard names its own outcome
    /// (`guards::Tripped`), so a new guard adds nothing here.
    Guard(Tripped),
    BlockCap,
    Cancelled,
    Corrupt,
    /// `ralph run`: the agent was refused the same permission again.
    Denied,
    /// `ralph run`: the agent could not run, on a loop this run armed.
    Failed,
    /// `--prd`: only blocked stories are left; a person must act.
    Blocked,
    /// `ralph run`: the loop file was deleted or edited while the agent
    /// ran, by no ralph command (the agent's doing, or a process it left).
    Tampered,
}

impl Outcome {
    /// The icon and the words of the notice when a loop ends this way.
    pub fn headline(self) -> (&'static str, &'static str) {
        match self {
            Self::Completed => ("✅", "completed"),
            Self::MaxIterations => ("⏹", "stopped at its iteration limit"),
            Self::Aborted => ("🛑", "stopped: the agent is blocked"),
            Self::Guard(tripped) => tripped.headline(),
            Self::BlockCap => ("⚠", "stopped before Claude Code's block cap"),
            Self::Cancelled => ("⏹", "cancelled"),
            Self::Corrupt => ("⚠", "stopped: its state file is corrupt"),
            Self::Denied => ("🚫", "stopped: the agent was denied permission"),
            Self::Failed => ("⚠", "stopped: the agent could not run"),
            Self::Blocked => ("🛑", "stopped: only blocked stories are left"),
            Self::Tampered => ("⚠", "stopped: its loop file was tampered with"),
        }
    }

    /// The word stored in the `outcome:` field and shown by `ralph status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::MaxIterations => "max_iterations",
            Self::Aborted => "aborted",
            Self::Guard(tripped) => tripped.as_str(),
            Self::BlockCap => "block_cap",
            Self::Cancelled => "cancelled",
            Self::Corrupt => "corrupt",
            Self::Denied => "denied",
            Self::Failed => "failed",
            Self::Blocked => "blocked",
            Self::Tampered => "tampered",
        }
    }

    /// Every outcome: the loop's own, then the guards'.
    pub fn all() -> impl Iterator<Item = Outcome> {
        [
            Self::Completed,
            Self::MaxIterations,
            Self::Aborted,
            Self::BlockCap,
            Self::Cancelled,
            Self::Corrupt,
            Self::Denied,
            Self::Failed,
            Self::Blocked,
            Self::Tampered,
        ]
        .into_iter()
        .chain(Tripped::ALL.into_iter().map(Self::Guard))
    }

    /// The outcome whose word is `word`, if ralph writes that word.
    pub fn from_word(word: &str) -> Option<Self> {
        Self::all().find(|o| o.as_str() == word)
    }
}

/// The `outcome:` field as a loop file holds it. Any word marks the loop as
/// ended; one ralph does not write (a newer ralph's, a hand edit) is kept
/// and shown as it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordedOutcome {
    Known(Outcome),
    Unknown(String),
}

impl RecordedOutcome {
    pub fn parse(word: String) -> Self {
        Outcome::from_word(&word).map_or(Self::Unknown(word), Self::Known)
    }

    /// The word as written in the file.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Known(o) => o.as_str(),
            Self::Unknown(word) => word,
        }
    }

    /// The outcome, when ralph knows its word.
    pub fn known(&self) -> Option<Outcome> {
        match self {
            Self::Known(o) => Some(*o),
            Self::Unknown(_) => None,
        }
    }
}

/// Reads as its word, so `state.outcome.as_deref()` is the word written.
impl std::ops::Deref for RecordedOutcome {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

/// A loop's state as `ralph status` reports it; serialised as the word
/// shown (`active`, `paused`, …), as before it was a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LoopStatus {
    Active,
    Paused,
    Ended,
    /// Its file does not parse.
    Corrupt,
    /// Its file could not be read (not a regular file, too large, …).
    Unreadable,
}

impl LoopStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Paused => "paused",
            Self::Ended => "ended",
            Self::Corrupt => "corrupt",
            Self::Unreadable => "unreadable",
        }
    }
}

impl std::fmt::Display for LoopStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_word_reads_back_and_an_unknown_word_is_kept() {
        let words: Vec<&str> = Outcome::all().map(Outcome::as_str).collect();
        let mut unique = words.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            words.len(),
            "two outcomes share a word: {words:?}"
        );
        for o in Outcome::all() {
            assert_eq!(
                RecordedOutcome::parse(o.as_str().to_owned()),
                RecordedOutcome::Known(o)
            );
        }
        let odd = RecordedOutcome::parse("merged_elsewhere".to_owned());
        assert_eq!(odd, RecordedOutcome::Unknown("merged_elsewhere".to_owned()));
        assert_eq!(odd.as_str(), "merged_elsewhere");
        assert_eq!(odd.known(), None);
    }

    #[test]
    fn a_status_serialises_as_the_word_it_shows() {
        use LoopStatus::*;
        for s in [Active, Paused, Ended, Corrupt, Unreadable] {
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::json!(s.as_str())
            );
        }
    }
}
