//! The install path of the README, end to end, with the real Claude Code client and no Rust
//! toolchain: a local npm registry (verdaccio, pinned in tests/registry/package.json) serves the
//! npm packages built from this checkout by `scripts/pack-npm.sh`; in a fresh HOME, with no
//! `cargo` on PATH, the README's `claude plugin marketplace add ralph-loop/ralph` (GitHub,
//! redirected by `~/.gitconfig` to a local repository of this checkout) and `claude plugin
//! install ralph@ralph-marketplace` install the plugin (the client runs `npm ci` in its cache
//! copy, which brings this platform's binary), and the skills then run by the names users type.
//!
//! Needs the pinned client (`npm ci --prefix tests/client`) and verdaccio
//! (`npm ci --prefix tests/registry`). When either is missing cargo reports the test as
//! ignored, with those commands (crates/ralph/build.rs), except on CI (`CI` set) where it fails.

use crate::support::{client, mock_api};

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use mock_api::{MockApi, Reply};
use serde_json::Value;

/// Everything in the installed plugin except the binary must stay under this size.
const MAX_PLUGIN_BYTES_BESIDE_BINARY: u64 = 2 * 1024 * 1024;

/// This platform's npm package folder name, as scripts/npm.mjs names it.
fn platform_package() -> String {
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        "windows" => "win32",
        other => other,
    };
    let cpu = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("ralph-{os}-{cpu}")
}

/// PATH without any folder that holds `cargo` (or `rustc`): the user has no Rust toolchain.
fn path_without_rust() -> OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|d| !d.join("cargo").exists() && !d.join("rustc").exists())
        .collect();
    std::env::join_paths(kept).expect("join PATH")
}

fn find_on(path: &OsString, program: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// A verdaccio registry on 127.0.0.1, with its storage in a temp folder; stopped on drop.
struct Registry {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start(verdaccio: &Path) -> Registry {
        let dir = tempfile::Builder::new()
            .prefix("ralph-registry-")
            .tempdir()
            .expect("registry dir");
        // Only our scope is served, and it may be published anonymously; nothing is proxied.
        std::fs::write(
            dir.path().join("config.yaml"),
            "storage: ./storage\nmax_body_size: 500mb\nuplinks: {}\n\
             auth:\n  htpasswd:\n    file: ./htpasswd\n    max_users: -1\n\
             packages:\n  '@ralph-loop/*':\n    access: $all\n    publish: $anonymous\n\
             log: { type: stdout, format: pretty, level: warn }\n",
        )
        .expect("registry config");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let log = std::fs::File::create(dir.path().join("verdaccio.log")).expect("log");
        let child = Command::new(verdaccio)
            .arg("--config")
            .arg(dir.path().join("config.yaml"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start verdaccio");
        let registry = Registry {
            child,
            url: format!("http://127.0.0.1:{port}/"),
            _dir: dir,
        };
        let started = Instant::now();
        while !ping(port) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "verdaccio did not answer on port {port} within 60 s: {}",
                std::fs::read_to_string(registry._dir.path().join("verdaccio.log"))
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        registry
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = "GET /-/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let mut answer = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
}

/// Runs a program with the user's environment as this test sets it up: fresh HOME, PATH
/// without Rust, npm pointed at the local registry by `~/.npmrc`.
struct User {
    home: PathBuf,
    path: OsString,
}

impl User {
    fn command(&self, program: impl AsRef<std::ffi::OsStr>, cwd: &Path) -> Command {
        let mut cmd = client::client_command(program, &self.home);
        cmd.env("PATH", &self.path)
            .env("npm_config_prefix", self.home.join(".npm-global"))
            .env("npm_config_update_notifier", "false")
            .env("npm_config_fund", "false")
            .env("npm_config_audit", "false")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .current_dir(cwd)
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str], cwd: &Path) -> Output {
        let program = program.as_ref().to_owned();
        let out = self
            .command(&program, cwd)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {program:?}: {e}"));
        assert!(
            out.status.success(),
            "{program:?} {args:?} failed: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

/// The repository as GitHub would serve it: a git repository holding every file git would
/// commit under `.claude-plugin/` and `plugin/`, as they are in the working tree (so the test
/// checks this checkout, not the last commit).
fn publish_repository(into: &Path) {
    let repo = client::repo_root();
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
            ".claude-plugin",
            "plugin",
        ])
        .current_dir(&repo)
        .output()
        .expect("git ls-files");
    assert!(listed.status.success(), "git ls-files: {listed:?}");
    let mut copied = 0;
    for rel in listed.stdout.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let rel = Path::new(std::str::from_utf8(rel).expect("UTF-8 path"));
        let from = repo.join(rel);
        if !from.exists() {
            continue; // deleted in the working tree
        }
        let to = into.join(rel);
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&from, &to).expect("copy");
        copied += 1;
    }
    assert!(copied > 5, "the repository copy is nearly empty");
    for args in [
        &["init", "--quiet"][..],
        &["add", "--all"],
        &[
            "-c",
            "user.name=ralph test",
            "-c",
            "user.email=test@invalid",
            "commit",
            "--quiet",
            "-m",
            "this checkout",
        ],
    ] {
        let out = Command::new("git")
            .args(args)
            .current_dir(into)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }
}

/// Bytes of every regular file under `dir`, and the relative paths of its folders.
fn walk(dir: &Path, base: &Path, files: &mut Vec<(PathBuf, u64)>, dirs: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        let rel = path.strip_prefix(base).expect("under base").to_owned();
        if meta.is_dir() {
            dirs.push(rel);
            walk(&path, base, files, dirs);
        } else {
            files.push((rel, meta.len()));
        }
    }
}

fn loop_named(status: &Value, name: &str) -> Value {
    status["loops"]
        .as_array()
        .and_then(|loops| loops.iter().find(|l| l["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no loop named {name:?} in ralph status --json: {status}"))
}

#[test]
#[cfg_attr(
    any(no_claude_client, no_registry),
    ignore = "Claude Code client or verdaccio not installed: npm ci --prefix tests/client; npm ci --prefix tests/registry"
)]
fn installs_as_the_readme_says_and_runs_by_the_typed_names() {
    const TEST: &str = "installs_as_the_readme_says_and_runs_by_the_typed_names";
    let Some(claude) = client::claude_bin(TEST) else {
        return;
    };
    let verdaccio = client::repo_root().join("tests/registry/node_modules/.bin/verdaccio");
    if !verdaccio.is_file() {
        return client::skip_or_fail(
            TEST,
            &format!(
                "verdaccio is not installed at {}; run `npm ci --prefix tests/registry`",
                verdaccio.display()
            ),
        )
        .unwrap_or(());
    }
    let path = path_without_rust();
    for program in ["node", "npm", "git"] {
        if find_on(&path, program).is_none() {
            return client::skip_or_fail(TEST, &format!("`{program}` is not on PATH"))
                .unwrap_or(());
        }
    }
    assert!(find_on(&path, "cargo").is_none(), "cargo must be absent");

    let work = tempfile::Builder::new()
        .prefix("ralph-install-")
        .tempdir()
        .expect("work dir");
    let user = User {
        home: work.path().join("home"),
        path,
    };
    std::fs::create_dir_all(&user.home).expect("home");
    let registry = Registry::start(&verdaccio);

    // The packages of this checkout, built the way the release builds them, published.
    let packs = work.path().join("npm");
    user.run(
        "sh",
        &[
            "scripts/pack-npm.sh",
            "--binary",
            client::RALPH,
            "--out",
            packs.to_str().expect("UTF-8"),
        ],
        &client::repo_root(),
    );
    let auth = work.path().join("publish.npmrc");
    let host = registry.url.trim_start_matches("http:");
    std::fs::write(&auth, format!("{host}:_authToken=test\n")).expect("npmrc");
    for entry in std::fs::read_dir(&packs).expect("packs").flatten() {
        let tarball = entry.path();
        if tarball.extension().is_some_and(|e| e == "tgz") {
            user.run(
                "npm",
                &[
                    "publish",
                    "--registry",
                    &registry.url,
                    "--userconfig",
                    auth.to_str().expect("UTF-8"),
                    tarball.to_str().expect("UTF-8"),
                ],
                work.path(),
            );
        }
    }
    std::fs::write(
        user.home.join(".npmrc"),
        format!("registry={}\n", registry.url),
    )
    .expect("~/.npmrc");

    // The README's install section, word for word. The client clones the marketplace from
    // GitHub with git; the fresh HOME's ~/.gitconfig sends that clone to a local repository
    // holding this checkout, so nothing leaves the machine.
    let github = work.path().join("github/ralph-loop/ralph");
    publish_repository(&github);
    let local = format!("file://{}", github.display());
    std::fs::write(
        user.home.join(".gitconfig"),
        format!(
            "[url \"{local}\"]\n\tinsteadOf = https://github.com/ralph-loop/ralph.git\n\
             \tinsteadOf = https://github.com/ralph-loop/ralph\n\
             \tinsteadOf = git@github.com:ralph-loop/ralph.git\n"
        ),
    )
    .expect("~/.gitconfig");
    user.run(
        &claude,
        &["plugin", "marketplace", "add", "ralph-loop/ralph"],
        work.path(),
    );
    user.run(
        &claude,
        &["plugin", "install", "ralph@ralph-marketplace"],
        work.path(),
    );
    user.run("npm", &["install", "-g", "@ralph-loop/ralph"], work.path());
    let ralph_on_path = user.home.join(".npm-global/bin/ralph");

    // What the install put in the plugin cache: the plugin, one binary, nothing else.
    let versions = user
        .home
        .join(".claude/plugins/cache/ralph-marketplace/ralph");
    let installed = std::fs::read_dir(&versions)
        .unwrap_or_else(|e| panic!("no plugin cache at {}: {e}", versions.display()))
        .flatten()
        .map(|e| e.path())
        .next()
        .expect("one installed version");
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    walk(&installed, &installed, &mut files, &mut dirs);
    let binary = PathBuf::from(format!(
        "node_modules/@ralph-loop/{}/bin/ralph",
        platform_package()
    ));
    assert!(
        files.iter().any(|(f, _)| *f == binary),
        "no {} in the installed plugin: {files:?}",
        binary.display()
    );
    let platform_dirs: Vec<_> = std::fs::read_dir(installed.join("node_modules/@ralph-loop"))
        .expect("@ralph-loop")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ralph-"))
        .collect();
    assert_eq!(platform_dirs, [platform_package()], "exactly one binary");
    for unwanted in ["target", "tests", "crates", "node_modules/@anthropic-ai"] {
        assert!(
            !dirs.iter().any(|d| d.starts_with(unwanted)),
            "the installed plugin holds {unwanted}/: {dirs:?}"
        );
    }
    let beside: u64 = files
        .iter()
        .filter(|(f, _)| *f != binary)
        .map(|(_, n)| n)
        .sum();
    assert!(
        beside < MAX_PLUGIN_BYTES_BESIDE_BINARY,
        "the installed plugin holds {beside} bytes beside the binary: {files:?}"
    );

    // The skills, typed without the plugin prefix, with no RALPH_BIN: the installed binary runs.
    let project = work.path().join("project");
    std::fs::create_dir_all(project.join(".claude")).expect("project");
    let path_env = [("PATH", user.path.as_os_str())];
    let api = MockApi::start(vec![
        Reply::text("Working on the parser."),
        Reply::text("Parser fixed.\n<promise>DONE</promise>"),
    ]);
    let run = client::run_claude(
        &claude,
        "/ralph-loop Make the parser test pass --completion-promise DONE --max-iterations 5",
        &[],
        &project,
        &user.home,
        &api,
        &path_env,
    );
    assert!(run.status.success(), "{}", run.describe());
    assert_eq!(
        api.turns().len(),
        2,
        "{}\n{}",
        api.describe(),
        run.describe()
    );
    let status_json = |user: &User| -> Value {
        let out = user.run(&ralph_on_path, &["status", "--json"], &project);
        serde_json::from_slice(&out.stdout).expect("ralph status --json")
    };
    let first = loop_named(&status_json(&user), "ralph");
    assert_eq!(
        (first["outcome"].as_str(), first["iteration"].as_u64()),
        (Some("completed"), Some(2)),
        "{first}"
    );

    // A second loop, armed from the user's shell with the npm-installed `ralph` for another
    // session, so that it never blocks the sessions below.
    user.run(
        &ralph_on_path,
        &[
            "start",
            "--session-id",
            "00000000-0000-4000-8000-000000000002",
            "--name",
            "second",
            "--max-iterations",
            "9",
            "Write the changelog",
        ],
        &project,
    );

    let api = MockApi::start(vec![Reply::text("Two loops: one completed, one active.")]);
    let run = client::run_claude(
        &claude,
        "/ralph-status",
        &[],
        &project,
        &user.home,
        &api,
        &path_env,
    );
    assert!(run.status.success(), "{}", run.describe());
    // The prompt hook answers it: the user reads the status, and no model turn is made.
    assert!(
        api.turns().is_empty(),
        "{}\n{}",
        api.describe(),
        run.describe()
    );
    let shown: String = run
        .events()
        .iter()
        .filter(|e| e["prompt_submit_outcome"]["kind"] == "blocked_by_hook")
        .filter_map(|e| e["content"].as_str().map(str::to_owned))
        .collect();
    assert!(
        shown.contains("second") && shown.contains("completed"),
        "the status was not shown: {}",
        run.describe()
    );

    let api = MockApi::start(vec![Reply::text("Cancelled.")]);
    let run = client::run_claude(
        &claude,
        "/ralph-cancel second",
        &[],
        &project,
        &user.home,
        &api,
        &path_env,
    );
    assert!(run.status.success(), "{}", run.describe());
    let second = loop_named(&status_json(&user), "second");
    assert_eq!(second["outcome"], "cancelled", "{second}");
}

/// Issue 26, item 7: the README's first route, from a clone, works today in two commands:
/// `cargo install --locked --path crates/ralph` (here: this build's binary copied into a
/// folder on PATH, as cargo puts it in ~/.cargo/bin) and the plugin from the clone's own
/// marketplace. npm cannot fetch the binary (the packages are not published), the plugin has
/// no build beside it, so the launcher takes the marked `ralph` from PATH: the session starts
/// without a warning and a loop armed with it runs to its promise in the real client.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn installs_from_a_clone_in_two_commands() {
    const TEST: &str = "installs_from_a_clone_in_two_commands";
    let Some(claude) = client::claude_bin(TEST) else {
        return;
    };
    let work = tempfile::Builder::new()
        .prefix("ralph-clone-install-")
        .tempdir()
        .expect("work dir");
    // The clone: its marketplace and its plugin, and no target/ beside them.
    let clone = work.path().join("ralph");
    std::fs::create_dir_all(&clone).expect("clone");
    for part in [".claude-plugin", "plugin"] {
        let copied = Command::new("cp")
            .arg("-R")
            .arg(client::repo_root().join(part))
            .arg(clone.join(part))
            .status()
            .expect("cp");
        assert!(copied.success());
    }
    let _ = std::fs::remove_dir_all(clone.join("plugin/node_modules"));
    let bin = work.path().join("cargo-bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::copy(crate::support::BIN, bin.join("ralph")).expect("the installed ralph");
    let home = work.path().join("home");
    let project = work.path().join("project");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&project).expect("project");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let run = |program: &Path, args: &[&str], cwd: &Path| -> Output {
        let mut cmd = client::client_command(program, &home);
        cmd.args(args).current_dir(cwd);
        cmd.env("PATH", &path)
            // npm has nothing to fetch: the packages are not published yet.
            .env("npm_config_registry", "http://127.0.0.1:9")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        let out = cmd.output().expect("run");
        assert!(out.status.success(), "{program:?} {args:?}: {out:?}");
        out
    };
    let clone_arg = clone.to_str().expect("UTF-8");
    run(
        &claude,
        &["plugin", "marketplace", "add", clone_arg],
        &clone,
    );
    run(
        &claude,
        &["plugin", "install", "ralph@ralph-marketplace"],
        &clone,
    );

    // A loop armed with the installed `ralph`, then a session in that project.
    run(
        &bin.join("ralph"),
        &[
            "start",
            "--completion-promise",
            "DONE",
            "--max-iterations",
            "5",
            "Write it",
        ],
        &project,
    );
    let api = MockApi::start(vec![
        Reply::text("Working on it."),
        Reply::text("<promise>DONE</promise>"),
    ]);
    let session = client::run_claude(
        &claude,
        "Write it",
        &[],
        &project,
        &home,
        &api,
        &[("PATH", path.as_ref())],
    );
    let started: Vec<String> = session
        .events()
        .iter()
        .filter(|e| e["subtype"] == "hook_response" && e["hook_event"] == "SessionStart")
        .map(|e| e["stdout"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        !started.is_empty(),
        "the plugin's hooks did not run\n{}",
        session.describe()
    );
    assert!(
        started.iter().all(|s| !s.contains("not found")),
        "{started:?}"
    );
    let status = run(&bin.join("ralph"), &["status", "--json"], &project);
    let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let ended = loop_named(&status, "ralph");
    assert_eq!(
        ended["outcome"],
        "completed",
        "{status:#}\n{}",
        session.describe()
    );
}
