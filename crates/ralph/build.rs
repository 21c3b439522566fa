//! Tells the integration tests (tests/main.rs) which pinned clients are installed, so that
//! `cargo test` reports an end-to-end test whose client is missing as "ignored, <install
//! command>" instead of as a pass that ran nothing. On CI (`CI` set) nothing is ignored: a
//! missing client fails its tests there (tests/support/client.rs). The binary itself does not
//! use these flags.

use std::path::{Path, PathBuf};

/// Each flag, set when the file beside it (under the repository root) is missing.
const CLIENTS: &[(&str, &[&str])] = &[
    ("no_codex_client", &["tests/hosts/node_modules/.bin/codex"]),
    (
        "no_gemini_client",
        &["tests/hosts/node_modules/.bin/gemini"],
    ),
    (
        "no_copilot_client",
        &["tests/hosts/node_modules/.bin/copilot"],
    ),
    (
        "no_registry",
        &["tests/registry/node_modules/.bin/verdaccio"],
    ),
];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=RALPH_CLAUDE_BIN");
    println!("cargo::rustc-check-cfg=cfg(no_claude_client)");
    println!("cargo::rustc-check-cfg=cfg(no_strace)");
    println!("cargo::rustc-check-cfg=cfg(no_chromium)");
    for (flag, _) in CLIENTS {
        println!("cargo::rustc-check-cfg=cfg({flag})");
    }

    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.join("../..");
    // A packaged crate has no tests/ folder beside it, and no integration tests to tell.
    if !root.join("tests/main.rs").is_file() {
        return;
    }
    let on_ci = std::env::var_os("CI").is_some();

    let claude = match std::env::var_os("RALPH_CLAUDE_BIN") {
        Some(bin) if !bin.is_empty() => vec![PathBuf::from(bin)],
        _ => claude_candidates(&root),
    };
    flag_unless_installed(&root, "no_claude_client", &claude, on_ci);
    for (flag, paths) in CLIENTS {
        let paths: Vec<PathBuf> = paths.iter().map(|p| root.join(p)).collect();
        flag_unless_installed(&root, flag, &paths, on_ci);
    }
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        flag_unless_strace(on_ci);
        flag_unless_chromium(on_ci);
    }
}

/// Sets `no_chromium` when no `chromium` is on PATH (and CI is unset): `tests/report.rs`
/// renders its pages in headless Chromium. Like strace, watched in `/usr/bin`.
fn flag_unless_chromium(on_ci: bool) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(found) = std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
    {
        println!("cargo::rerun-if-changed={}", found.display());
        return;
    }
    if Path::new("/usr/bin").is_dir() {
        println!("cargo::rerun-if-changed=/usr/bin");
    }
    if !on_ci {
        println!("cargo::rustc-cfg=no_chromium");
    }
}

/// Sets `no_strace` when no `strace` is on PATH (and CI is unset): the test that kills the
/// hook between its write and its rename needs it. While it is missing, a change of
/// `/usr/bin` (where `apt-get install strace` puts it) runs this script again.
fn flag_unless_strace(on_ci: bool) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(found) = std::env::split_paths(&path)
        .map(|dir| dir.join("strace"))
        .find(|p| p.is_file())
    {
        println!("cargo::rerun-if-changed={}", found.display());
        return;
    }
    if Path::new("/usr/bin").is_dir() {
        println!("cargo::rerun-if-changed=/usr/bin");
    }
    if !on_ci {
        println!("cargo::rustc-cfg=no_strace");
    }
}

/// Where `npm ci --prefix tests/client` puts the `claude` binary, as tests/support/client.rs
/// looks for it.
fn claude_candidates(root: &Path) -> Vec<PathBuf> {
    let os = match std::env::var("CARGO_CFG_TARGET_OS").as_deref() {
        Ok("macos") => "darwin".to_owned(),
        Ok(other) => other.to_owned(),
        Err(_) => String::new(),
    };
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x64".to_owned(),
        Ok("aarch64") => "arm64".to_owned(),
        Ok(other) => other.to_owned(),
        Err(_) => String::new(),
    };
    let modules = root.join("tests/client/node_modules/@anthropic-ai");
    vec![
        modules.join("claude-code-linux-x64/claude"),
        modules.join(format!("claude-code-{os}-{arch}/claude")),
        modules.join(format!("claude-code-{os}-{arch}-musl/claude")),
    ]
}

/// Sets `flag` when none of `paths` is a file (and CI is unset), and asks cargo to run this
/// script again when that may change: on a change of the installed file, or, while it is
/// missing, of anything in its npm folder (`tests/client`, small until `npm ci` fills it).
fn flag_unless_installed(root: &Path, flag: &str, paths: &[PathBuf], on_ci: bool) {
    if let Some(found) = paths.iter().find(|p| p.is_file()) {
        println!("cargo::rerun-if-changed={}", found.display());
        return;
    }
    for path in paths {
        if let Some(watched) = npm_folder(root, path) {
            println!("cargo::rerun-if-changed={}", watched.display());
        }
    }
    if !on_ci {
        println!("cargo::rustc-cfg={flag}");
    }
}

/// The npm folder (`tests/<name>`, the one holding `package.json`) that `path` lies in, if it
/// lies in one under `root`.
fn npm_folder(root: &Path, path: &Path) -> Option<PathBuf> {
    let tests = root.join("tests");
    let name = path.strip_prefix(&tests).ok()?.components().next()?;
    let folder = tests.join(name);
    folder.join("package.json").is_file().then_some(folder)
}
