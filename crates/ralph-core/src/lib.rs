//! ralph's logic: the loop state, the promise, the Stop-hook decision and
//! the files they live in. The `ralph` binary is a thin shell over this.
//!
//! The folders read as the architecture, lowest first; a module imports only
//! from its own folder and the ones listed before it:
//! - `time`, `display`, `fingerprint`, `failure`, `error`: timestamps and durations;
//!   escaping what is printed; stable hashes of text; what a failing check said;
//!   the exit class of every error.
//! - `fs`: the safe file layer, child processes, git, and the gates' runner.
//! - `reply`: what the agent said: the Stop payload, the transcript, the promise.
//! - `loop_file`: the loop and its file: fields, guards, the arming record,
//!   the lock, and `lifecycle`, the one place that writes a loop file.
//! - `decide`: the pure decision and the one turn that applies it (`engine`).
//! - `hook`, `control`, `run`: the fronts: the hooks and their hosts; what the
//!   CLI's commands do to loops; `ralph run` and its fleet.
//! - `report`: `ralph report`'s page of loops and a fleet's stories, over
//!   what `control` and `run` read.

pub mod control;
pub mod decide;
pub mod display;
pub mod error;
pub mod failure;
pub mod fingerprint;
pub mod fs;
pub mod hook;
pub mod json_edit;
pub mod loop_file;
pub mod money;
pub mod reply;
pub mod report;
pub mod run;
pub mod time;
