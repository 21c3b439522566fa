//! What a turn leaves to be done once it is written and the loop's lock is
//! let go: `engine::step` decides and writes under the lock and returns
//! these as data; its caller (the Stop hook, `ralph run`'s driver) performs
//! them after, so no other ralph process waits on them.
//!
//! Two effects: the loop's last word when the turn ended it (its webhook or
//! desktop notification, sent through the courier the caller names: the
//! libraries below the binary hold none), and the checkpoint. When the
//! no-progress check needs
//! the tree, the work tree is staged under the lock (the staged tree is the
//! fingerprint the decision compares), and what is left after it is one
//! line appended to the per-user record; when it does not, the staging
//! itself happens here, after the lock.

use ralph_state::fields::notice::Courier;
use ralph_state::lifecycle::Tell;
use ralph_state::storage::checkpoints::Keep;

/// A turn's effects, performed by [`Effects::perform`] after the lock.
#[derive(Debug, Default)]
#[must_use = "a turn's effects are performed by its caller, after the lock"]
pub struct Effects {
    /// The iteration's checkpoint, when the loop keeps one at this stop.
    pub checkpoint: Option<Keep>,
    /// The loop's last word, when the turn ended a loop that asks for one.
    pub tell: Option<Tell>,
}

impl Effects {
    /// Performs every effect, best effort (each says nothing when it fails:
    /// the turn is written either way).
    /// `courier`: who sends the loop's last word (`None`: logged as not sent).
    pub fn perform(self, courier: Option<Courier>) {
        if let Some(checkpoint) = self.checkpoint {
            checkpoint.perform();
        }
        if let Some(tell) = self.tell {
            tell.send(courier);
        }
    }
}
