//! The Stop hook: what a stop runs. Internal to ralph: its API is the
//! `ralph` command and the plugin, not this crate; `pub` here names only
//! what another of ralph's crates uses.
//!
//! A loop and its file live in `ralph-state` (below); the CLI's commands and
//! the other hooks in `ralph-control` (above); files, processes and git come
//! from `ralph-fs`. `ralph run` (`ralph-run`), the HTML report
//! (`ralph-report`), the other hosts' installers (`ralph-install`) and the
//! courier of notifications (`ralph-notify`) are crates of their own: a
//! stop that ends a loop returns its last word in the turn's effects, and
//! the binary sends it.
//!
//! The folders read as the architecture, lowest first; a module imports only
//! from its own folder and the ones listed before it (`tests/tidy.rs` checks):
//! - `reply`: what the agent said: the Stop payload, the transcript, the promise,
//!   a queued message.
//! - `decide`: the pure decision, pricing, and the one turn that applies it (`engine`).
//! - `hook`: the Stop hook and its hosts' answers.

pub mod decide;
pub mod hook;
pub mod reply;
