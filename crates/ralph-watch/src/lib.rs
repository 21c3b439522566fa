//! `ralph watch`: the board (what is shown), built from ralph's own records (`records`),
//! drawn as a pure function of it (`draw`, on ratatui), and what each key does to it
//! (`keys`, pure), for the binary to wire to a terminal.
//!
//! Internal to ralph: its API is the `ralph` command and the plugin, not this
//! crate; `pub` here names only what another of ralph's crates uses.

pub mod board;
pub mod draw;
pub mod keys;
pub mod records;
