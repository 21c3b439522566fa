//! A loop and its file, in three layers, each using only the ones above it:
//!
//! - [`fields`]: what a loop file says. Its text split into frontmatter and
//!   body, each field read into a typed value (limits, guards, outcome,
//!   owner, sandbox, notifications, PRD stories), and [`fields::state`], the
//!   whole file as one typed `LoopState`.
//! - [`storage`]: where loops and their records live. The project's loop
//!   files and their lock (`store`), the per-user arming record
//!   (`registry`), receipts, checkpoints, the usage window, and the
//!   environment a command runs in.
//! - this folder: a loop's life. Its proven rewrites (`rewrite`), the one
//!   place that writes a loop file (`lifecycle`), the one classification of a
//!   project's loop files as armed, paused, foreign or unreadable (`scan`),
//!   which loop a session drives (`ownership`), a breaker's hand-over
//!   (`handover`), the words around it (`messages`), and `error`, the one
//!   error of reading, rewriting and adopting a loop file.

pub mod error;
pub mod fields;
pub mod gate_sandbox;
pub(crate) mod handover;
pub mod lifecycle;
pub mod messages;
pub(crate) mod ownership;
pub mod rewrite;
pub mod scan;
pub mod storage;
