//! `ralph`: a Claude Code Stop hook and loop CLI. All logic lives in
//! `ralph-core`; this binary parses arguments, runs one command, and maps
//! its result to an exit code.
//!
//! No `println!`/`eprintln!` anywhere in it: they panic when the stream is
//! closed, and with `panic = "abort"` the hook would die by SIGABRT. Every
//! write goes through `say!` or a `let _ = writeln!(…)` that ignores failure.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod cmd;
mod env;
mod exit;

#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// Compiled into the binary so that the plugin's launcher can tell this
/// project's `ralph` from another program of that name on PATH by reading
/// the file's bytes (`grep -F`), without running it. Kept in
/// `plugin/bin/ralph` (split in two there, so that the launcher itself never
/// passes) and `npm/ralph/bin/ralph.js`; change all three together.
pub const BINARY_ID: &str = "ralph-loop-binary-id:3f7c1e92b04d";

fn main() -> std::process::ExitCode {
    // Referenced at run time, so neither the optimiser nor `strip` drops it.
    std::hint::black_box(BINARY_ID);
    // Started again as a gate's box (fs/gate_box.rs): that, and nothing else.
    if let Some(code) = ralph_fs::gate_box::serve_if_asked() {
        return std::process::ExitCode::from(code);
    }
    cmd::run(<ralph_cli::Cli as clap::Parser>::parse())
}
