//! Reading the session transcript (JSONL), which the client appends to and
//! which can be hundreds of megabytes. Two readers, each reading only what it
//! needs:
//!
//! - [`last_reply`] (in `last_reply.rs`) reads backward from the end for the
//!   text of the last assistant reply, used only when the Stop event carries
//!   no reply text;
//! - [`scan_appended`] and [`scan_loop`] (in `appended.rs`) read forward from
//!   an offset, what was appended since the last stop: tokens, tool use,
//!   proven edits, whether this turn's reply has landed yet, and whether the
//!   user queued a message (`queue.rs`: the queue lines' rules).
//!
//! - [`last_context`] (in `last_context.rs`) reads backward for what the last
//!   request sent, when the forward scan read nothing.
//!
//! All open the file with `backward::open` and bound what they read; the
//! backward block reader they share is in `backward.rs`.

mod appended;
mod backward;
mod last_context;
mod last_reply;
mod lenient;
mod queue;

pub(crate) use appended::{Appended, scan_loop};
pub use appended::{Compaction, scan_appended};
pub(crate) use backward::{BackwardLines, MAX_SCAN};
pub use last_context::last_context;
pub use last_reply::last_reply;
