//! ralph's logic: the loop state, the promise, the Stop-hook decision and
//! the files they live in. The `ralph` binary is a thin shell over this.
//!
//! The folders read as the architecture, lowest first; a module imports only
//! from its own folder and the ones listed before it (`tests/tidy.rs` checks):
//! - leaves: `time`, `display`, `fingerprint`, `money`, `json_edit`, `failure`,
//!   `error`, `globs`: timestamps and durations; escaping what is printed; stable hashes;
//!   exact dollars; span-exact JSON edits; a check's failure fingerprint and
//!   count; the exit class of every error; `--protect`/`--scope` globs.
//! - `fs`: the safe file layer, child processes, git, and the gates' runner.
//! - `reply`: what the agent said: the Stop payload, the transcript, the promise,
//!   a queued message.
//! - `loop_file`: the loop and its file: fields, guards, the arming record,
//!   the lock, stories, and `lifecycle`, the one place that writes a loop file.
//! - `decide`: the pure decision, pricing, and the one turn that applies it (`engine`).
//! - `control`, `hook`, `run`, `report`: the fronts: what the CLI's commands do
//!   to loops; the hooks and their hosts; `ralph run` and its fleet; the HTML report.

pub mod control;
pub mod decide;
pub mod display;
pub mod error;
pub mod failure;
pub mod fingerprint;
pub mod fs;
pub mod globs;
pub mod hook;
pub mod json_edit;
pub mod loop_file;
pub mod money;
pub mod reply;
pub mod report;
pub mod run;
pub mod time;
