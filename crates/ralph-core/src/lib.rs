//! What a stop needs: the loop and its file, its arming, the decision, and
//! the hooks with their hosts' answers; the CLI's commands on loops
//! (`control`) ride on the same rooms. Files, processes and git come from
//! `ralph-fs`; `ralph run` (`ralph-run`), the HTML report (`ralph-report`),
//! the other hosts' installers (`ralph-install`) and the courier of
//! notifications (`ralph-notify`) are crates of their own, so the Stop
//! hook's crate holds nothing a stop does not run.
//!
//! The folders read as the architecture, lowest first; a module imports only
//! from its own folder and the ones listed before it (`tests/tidy.rs` checks):
//! - leaves: `time`, `money`, `json_edit`, `globs`, `plural`: timestamps and
//!   durations; exact dollars; span-exact JSON edits; `--protect`/`--scope`
//!   globs; counts in words.
//! - `protect_defaults`: what a loop with a gate protects by default, per
//!   ecosystem, and a manifest compared without its dependency lists.
//! - `reply`: what the agent said: the Stop payload, the transcript, the promise,
//!   a queued message.
//! - `loop_file`: the loop and its file: fields, guards, the arming record,
//!   the lock, stories, and `lifecycle`, the one place that writes a loop file.
//! - `decide`: the pure decision, pricing, and the one turn that applies it (`engine`).
//! - `control`, `hook`: the fronts: what the CLI's commands do to loops; the
//!   hooks and their hosts.

pub mod control;
pub mod decide;
pub mod globs;
pub mod hook;
pub mod json_edit;
pub mod loop_file;
pub mod money;
pub mod plural;
pub mod protect_defaults;
pub mod reply;
pub mod time;
