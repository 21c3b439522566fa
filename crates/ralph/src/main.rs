//! `ralph`: a Claude Code Stop hook and loop CLI. All logic lives in
//! `ralph-core`; this binary parses arguments, runs one command, and maps
//! its result to an exit code.

mod cli;
mod cmd;

#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> std::process::ExitCode {
    cmd::run(<cli::Cli as clap::Parser>::parse())
}
