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
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(host) = stop_hook_host(&args) {
        return cmd::stop_hook(host);
    }
    cmd::run(<ralph_cli::Cli as clap::Parser>::parse_from(args))
}

/// `ralph hook stop [--host H]`, read without clap. The Stop hook runs at every stop of every
/// session, and building clap's command tree (every subcommand, every flag and its help) cost
/// a stop without a loop about 80 of its 200 page faults, and every stop about 0.1 MiB of peak
/// RSS (docs/performance.md, "Peak RSS at a 200 MB transcript"). Only these exact spellings take
/// this path; anything else (`--help`, a host clap must refuse, another flag) goes through clap.
fn stop_hook_host(args: &[std::ffi::OsString]) -> Option<Option<ralph_core::hook::host::Host>> {
    use ralph_core::hook::host::Host;
    let words: Vec<&str> = args
        .iter()
        .skip(1)
        .map(|a| a.to_str())
        .collect::<Option<_>>()?;
    match words.as_slice() {
        ["hook", "stop"] => Some(None),
        ["hook", "stop", "--host", name] => Host::from_name(name).map(Some),
        ["hook", "stop", flag] => flag
            .strip_prefix("--host=")
            .and_then(Host::from_name)
            .map(Some),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::stop_hook_host;
    use ralph_core::hook::host::Host;

    fn read(words: &[&str]) -> Option<Option<Host>> {
        let args: Vec<std::ffi::OsString> = std::iter::once("ralph")
            .chain(words.iter().copied())
            .map(Into::into)
            .collect();
        stop_hook_host(&args)
    }

    #[test]
    fn the_stop_hook_is_read_without_clap_only_in_its_exact_spellings() {
        assert_eq!(read(&["hook", "stop"]), Some(None));
        assert_eq!(
            read(&["hook", "stop", "--host", "codex"]),
            Some(Some(Host::Codex))
        );
        assert_eq!(
            read(&["hook", "stop", "--host=gemini"]),
            Some(Some(Host::Gemini))
        );
        // clap's to answer: its help, its errors, every other command.
        for other in [
            &["hook", "stop", "--help"][..],
            &["hook", "stop", "--host", "nope"],
            &["hook", "stop", "--host="],
            &["hook", "stop", "--host"],
            &["hook", "stop", "extra", "words"],
            &["hook", "prompt"],
            &["status"],
            &[],
        ] {
            assert_eq!(read(other), None, "{other:?}");
        }
    }
}
