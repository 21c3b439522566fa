//! `ralph`: a Claude Code Stop hook and loop CLI. All logic lives in
//! `ralph-core`; this binary parses arguments, runs one command, and maps
//! its result to an exit code.
//!
//! No `println!`/`eprintln!` anywhere in it: they panic when the stream is
//! closed, and with `panic = "abort"` the hook would die by SIGABRT. Every
//! write goes through `say!` or a `let _ = writeln!(…)` that ignores failure.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod cli;
mod cmd;

#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> std::process::ExitCode {
    cmd::run(<cli::Cli as clap::Parser>::parse())
}
