//! ralph's integration tests: one test binary (`cargo test -p ralph-loop --test integration`), one
//! module per area, all driving the real `ralph` binary through the harness in `support/`.
//! Run one area with a filter: `cargo test -p ralph-loop --test integration hook::`.
//!
//! The end-to-end modules (`e2e*`, `hosts`, `install`, and one test in `parallel`) need the
//! pinned clients from `tests/client`, `tests/hosts` and `tests/registry`. Without them, and
//! with `CI` unset, cargo reports those tests as ignored, with the install command as the
//! reason (`crates/ralph/build.rs`); on CI a missing client fails them.

// Pedantic holds here too (Cargo.toml's [workspace.lints]), but for what test code does on
// purpose: literals copied from real payloads, casts of durations and counts the tests
// measured themselves, Debug output of paths and commands in failure messages.
#![allow(
    clippy::unreadable_literal,
    clippy::nonminimal_bool,
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::unnecessary_debug_formatting,
    clippy::unused_self
)]

mod support;

mod budget;
mod check;
mod cli;
mod context;
mod cost;
mod e2e;
mod e2e_budget;
mod e2e_check;
mod e2e_fresh;
mod e2e_run;
mod e2e_session;
mod first_hour;
mod gate_confine;
mod gate_policy;
mod gate_snapshot;
mod guards;
mod honesty;
mod hook;
mod hosts;
mod install;
mod meter;
mod notify;
mod parallel;
mod prd;
mod progress;
mod readme;
mod recover;
mod report;
mod robustness;
mod run;
mod sandbox;
mod sandbox_git;
mod say;
mod scaling;
mod security_approve;
// Process ancestry, pseudo-terminals and the sandbox: Unix only.
#[cfg(unix)]
mod security_bounds;
mod security_files;
// Processes, /proc, chown and sh scripts: Unix only.
#[cfg(unix)]
mod security_gate;
mod security_parse;
#[cfg(unix)]
mod security_path;
mod security_registry;
mod session;
mod stories;
mod tidy;
mod words;
