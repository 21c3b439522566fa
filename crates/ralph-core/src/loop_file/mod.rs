//! A loop and its file: the frontmatter and its typed fields (`state`,
//! `guards`, `outcome`), proven rewrites, the project's files and lock
//! (`store`), the per-user arming record (`registry`), who drives a loop
//! (`ownership`, `run_owner`), the one classification of a project's loop
//! files as armed, paused, foreign or unreadable (`scan`), the words around
//! it (`messages`), a loop's work-tree checkpoints (`checkpoints`), a breaker's
//! hand-over (`handover`), and
//! `lifecycle`, the one place that writes a loop file, with `error`, the
//! one error of reading, rewriting and adopting a loop file.

pub(crate) mod binding;
pub(crate) mod checkpoints;
pub mod confinement;
pub mod environment;
pub mod error;
pub(crate) mod fields;
pub mod frontmatter;
pub mod guards;
pub(crate) mod handover;
pub mod lifecycle;
pub mod limit;
pub mod messages;
pub mod notice;
pub(crate) mod options;
pub mod outcome;
pub(crate) mod ownership;
pub mod receipt;
pub mod registry;
pub mod rewrite;
pub mod run_owner;
pub mod scan;
pub mod state;
pub mod store;
pub mod stories;
pub mod window;
