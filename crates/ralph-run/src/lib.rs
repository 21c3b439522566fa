//! `ralph run`, the fresh-context driver: [`Driver`] (in `driver.rs`) runs
//! the iteration loop and returns each step as an [`Event`]; the functions
//! in `moves.rs` are its moves: whether the run may go on with its loop, taking it
//! over and handing it back, how an agent's reply becomes a turn of
//! [`engine::step`], and the ways a run ends a loop; `screen.rs` words what
//! the terminal shows of each event. The terminal itself (the clock, the
//! spinner's ticks, printing, the exit code) stays in the binary; loop
//! files are touched only through [`ralph_state::lifecycle`].
//!
//! Internal to ralph: its API is the `ralph` command and the plugin, not this
//! crate; `pub` here names only what another of ralph's crates uses.

pub mod agent;
pub mod fleet;
pub mod meter;
pub mod presets;
pub mod reset_wait;
pub mod sandbox;
pub mod screen;

mod driver;
mod moves;
#[cfg(test)]
mod words;

pub use driver::{Agent, Call, Driver, Event, Iteration, ResetWait, RunEnd, Setup};
pub use moves::*;
