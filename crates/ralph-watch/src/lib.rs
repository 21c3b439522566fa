//! `ralph watch`: the board (what is shown), built from ralph's own records (`records`)
//! and drawn as a pure function of it (`draw`, on ratatui), for the binary to wire to a
//! terminal.

pub mod board;
pub mod draw;
pub mod records;
