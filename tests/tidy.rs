//! What a test can check of ARCHITECTURE.md: every file it names exists, every module file is
//! named in it, the floors of the layering rule hold, and the invariants a search can confirm
//! are still absences. The code is read as text: production code is a file without its
//! `#[cfg(test)] mod … { … }` blocks and without its `//` comment lines.

use std::path::{Path, PathBuf};

use crate::support::repo_root;

const CORE: &str = "crates/ralph-core/src";
const STATE: &str = "crates/ralph-state/src";
const BINARY: &str = "crates/ralph/src";

/// The library crates, lowest first (each depends only on crates before it), and each one's
/// floors: its top-level modules, lowest first. A module imports only from its own folder
/// and the floors below it; the first floor's modules (the leaves) may also use each other.
const CRATES: [(&str, &[&[&str]]); 10] = [
    (
        "crates/ralph-fs/src",
        &[
            &["display", "error", "fingerprint", "failure"],
            &["safe_fs", "process"],
            &["git_runner", "git_config", "gate_box", "gate_jail"],
            &["git", "gate", "index_tree", "object_check"],
            &["same_second"],
            &["own_staging"],
            &["status_staging"],
            &["tree_diff"],
            &["checkpoint", "gate_tree"],
            &["one_staging"],
        ],
    ),
    (
        STATE,
        &[
            &["time", "money", "json_edit", "globs", "plural", "context"],
            &["protect_defaults"],
            &["fields"],
            &["storage"],
            &["error", "gate_sandbox"],
            &["rewrite", "messages", "handover"],
            &["lifecycle"],
            &["scan", "ownership"],
        ],
    ),
    ("crates/ralph-notify/src", &[]),
    (CORE, &[&["reply"], &["decide"], &["hook"]]),
    (
        "crates/ralph-control/src",
        &[
            &["templates", "arguments", "approval"],
            &["commands"],
            &[
                "arming",
                "guidance",
                "prd_file",
                "tamper",
                "rollback",
                "receipt_text",
            ],
            &["listing", "adoption", "cancel_pause", "init", "revive"],
            &["status_text"],
            &["typed", "statusline"],
            &["session"],
        ],
    ),
    ("crates/ralph-install/src", &[&["additions"]]),
    (
        "crates/ralph-report/src",
        &[&["text", "open"], &["model", "charts"], &["html"]],
    ),
    (
        "crates/ralph-watch/src",
        &[&["board"], &["draw", "records", "keys"]],
    ),
    (
        "crates/ralph-run/src",
        &[
            &["presets", "reset_wait", "sandbox", "meter"],
            &["agent"],
            &["moves"],
            &["driver"],
            &["screen"],
            &["fleet"],
        ],
    ),
    ("crates/ralph-cli/src", &[]),
];

/// Every source folder: the library crates', then the binary's.
fn source_dirs() -> Vec<&'static str> {
    CRATES.iter().map(|(dir, _)| *dir).chain([BINARY]).collect()
}

/// Files that are unit tests as a whole (`#[cfg(test)] mod words;`): no floor of their own.
const TEST_FILES: [&str; 1] = ["crates/ralph-run/src/words.rs"];

fn architecture() -> String {
    std::fs::read_to_string(repo_root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

/// Every `.rs` file under `dir`, as paths relative to it (`control/arguments.rs`).
fn rust_files(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).expect("under root");
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The text between backticks, each span once per occurrence.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// A span that names a repository path: plain path characters only (no placeholder such as
/// `<name>`, no `$VAR`, no `~`).
fn is_plain_path(span: &str) -> bool {
    !span.is_empty()
        && span.contains('/')
        && span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
}

/// The lines of a file that are production code, numbered from 1.
fn production_lines(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut in_tests = false;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if in_tests {
            in_tests = line != "}";
        } else if [
            "#[cfg(test)]",
            "#[cfg(any(test, feature = \"test-support\"))]",
        ]
        .contains(&line.trim())
            && lines.get(i + 1).is_some_and(|next| {
                next.contains("mod ") && next.trim_end().ends_with('{') && !next.starts_with(' ')
            })
        {
            in_tests = true;
            i += 1;
        } else if !line.trim_start().starts_with("//") {
            out.push((i + 1, line));
        }
        i += 1;
    }
    out
}

/// Every production line of every source file of every crate, with the file's path from
/// the repository root.
fn production_code() -> Vec<(String, usize, String)> {
    let root = repo_root();
    let mut out = Vec::new();
    for dir in source_dirs() {
        for rel in rust_files(&root.join(dir)) {
            let path = format!("{dir}/{rel}");
            if TEST_FILES.contains(&path.as_str()) {
                continue;
            }
            let text = std::fs::read_to_string(root.join(&path)).expect("source file");
            for (n, line) in production_lines(&text) {
                out.push((path.clone(), n, line.to_owned()));
            }
        }
    }
    out
}

/// `needle` in `line` as a call of its own: not the tail of a longer name
/// (`fs::read(` is not `safe_fs::read(`).
fn calls(line: &str, needle: &str) -> bool {
    line.match_indices(needle).any(|(at, _)| {
        !line[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The lines where any of `needles` is called, outside the files `allowed` (paths from the
/// repository root), as `file:line: text` for the failure message.
fn offenders(needles: &[&str], allowed: &[&str]) -> Vec<String> {
    production_code()
        .into_iter()
        .filter(|(path, _, _)| !allowed.contains(&path.as_str()))
        .filter(|(_, _, line)| needles.iter().any(|n| calls(line, n)))
        .map(|(path, n, line)| format!("{path}:{n}: {}", line.trim()))
        .collect()
}

/// The files a span of ARCHITECTURE.md names: a `.rs` path is written from the repository
/// root or from one crate's `src/` (`fields/state.rs`); any other file from the root.
fn named_files(span: &str) -> Vec<PathBuf> {
    let root = repo_root();
    if span.ends_with(".rs") {
        std::iter::once(root.join(span))
            .chain(
                source_dirs()
                    .into_iter()
                    .map(|dir| root.join(dir).join(span)),
            )
            .filter(|p| p.exists())
            .collect()
    } else {
        vec![root.join(span)]
    }
}

#[test]
fn every_file_architecture_names_exists() {
    let root = repo_root();
    let text = architecture();
    let mut missing = Vec::new();
    for span in code_spans(&text).into_iter().filter(|s| is_plain_path(s)) {
        // Only files under a folder of the repository are checked (`hooks/hooks.json` is a
        // path inside `plugin/`, named in its row).
        let top_is_a_folder = span
            .split('/')
            .next()
            .is_some_and(|top| !top.is_empty() && root.join(top).is_dir());
        if !span.ends_with(".rs") && !top_is_a_folder {
            continue;
        }
        if !named_files(span).iter().any(|c| c.exists()) {
            missing.push(span.to_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names files that do not exist: {missing:?}"
    );
}

/// A short `.rs` span names one file only: `lib.rs` under every crate is written whole.
#[test]
fn every_short_path_architecture_names_is_one_file() {
    let ambiguous: Vec<_> = code_spans(&architecture())
        .into_iter()
        .filter(|s| is_plain_path(s) && s.ends_with(".rs") && !s.starts_with("crates/"))
        .filter(|s| named_files(s).len() > 1)
        .map(str::to_owned)
        .collect();
    assert!(
        ambiguous.is_empty(),
        "ARCHITECTURE.md names files two crates have; write them from the root: {ambiguous:?}"
    );
}

/// ARCHITECTURE.md names every crate and every crate's top-level modules (a file or folder
/// under its `src/`), and stays short enough to read in ten minutes.
#[test]
fn architecture_names_every_crate_and_its_top_level_modules_and_stays_short() {
    let root = repo_root();
    let text = architecture();
    let spans = code_spans(&text);
    let mut unnamed = Vec::new();
    for dir in source_dirs() {
        let krate = dir.trim_end_matches("/src");
        if !spans.contains(&krate) {
            unnamed.push(krate.to_owned());
        }
        for entry in std::fs::read_dir(root.join(dir))
            .expect("read_dir")
            .flatten()
        {
            let file = entry.file_name().to_string_lossy().into_owned();
            let module = file.trim_end_matches(".rs");
            if ["lib", "main", "words"].contains(&module) {
                continue;
            }
            let named = spans
                .iter()
                .any(|s| *s == module || *s == file || s.starts_with(&format!("{module}/")));
            if !named {
                unnamed.push(format!("{dir}/{file}"));
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "ARCHITECTURE.md does not name: {unnamed:?}"
    );
    let words = text.split_whitespace().count();
    assert!(
        words <= MAX_ARCHITECTURE_WORDS,
        "ARCHITECTURE.md has {words} words, more than a ten-minute read ({MAX_ARCHITECTURE_WORDS})"
    );
}

/// About ten minutes of reading at 250 words a minute.
const MAX_ARCHITECTURE_WORDS: usize = 2_500;

/// A module's floor in its crate (`CRATES`), lowest first; the leaves share floor 0.
fn floor(floors: &[&[&str]], module: &str) -> Option<usize> {
    floors.iter().position(|f| f.contains(&module))
}

#[test]
fn modules_import_only_from_their_folder_and_the_floors_below() {
    let mut wrong = Vec::new();
    let code = production_code();
    for (dir, floors) in CRATES {
        for (path, n, line) in &code {
            let Some(rel) = path.strip_prefix(&format!("{dir}/")) else {
                continue;
            };
            let own = rel.split('/').next().unwrap_or(rel).trim_end_matches(".rs");
            if own == "lib" {
                continue;
            }
            let own_floor =
                floor(floors, own).unwrap_or_else(|| panic!("{path}: a module with no floor"));
            for (at, _) in line.match_indices("crate::") {
                let target: String = line[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if target == own || target.is_empty() {
                    continue;
                }
                let Some(target_floor) = floor(floors, &target) else {
                    wrong.push(format!("{path}:{n}: `crate::{target}` has no floor"));
                    continue;
                };
                // Leaves may use each other; every other module only what lies below it.
                let below = target_floor < own_floor || (own_floor == 0 && target_floor == 0);
                if !below {
                    wrong.push(format!("{path}:{n}: {own} imports {target}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run up or sideways: {wrong:#?}"
    );
}

/// The most lines the binary may hold, its unit tests included (not blank, not a comment):
/// it parses (through `ralph-cli`), calls the crates and prints (issue 47).
const MAX_BINARY_LINES: usize = 2_500;

#[test]
fn the_binary_stays_thin() {
    let root = repo_root();
    let lines: usize = rust_files(&root.join(BINARY))
        .iter()
        .map(|rel| {
            let text = std::fs::read_to_string(root.join(BINARY).join(rel)).expect("source");
            text.lines()
                .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//"))
                .count()
        })
        .sum();
    assert!(
        lines < MAX_BINARY_LINES,
        "the binary has {lines} lines with its tests, {MAX_BINARY_LINES} or more: move what is not parsing, calling or printing into a library"
    );
}

/// The most production lines (not blank, not a comment, not a test module) the Stop hook's
/// crate may hold (issue 47: it was 17,900 with the commands and the other hooks inside).
const MAX_STOP_CRATE_LINES: usize = 8_000;

/// The names of the crates a crate's manifest depends on, its own workspace's only.
fn workspace_dependencies(manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .filter_map(|l| l.split_once(".workspace = true").map(|(name, _)| name))
        .chain(
            manifest
                .lines()
                .filter_map(|l| l.split_once(" = { workspace = true").map(|(name, _)| name)),
        )
        .filter(|name| name.starts_with("ralph-loop-"))
        .map(str::to_owned)
        .collect()
}

/// A crate uses only the crates before it in `CRATES` (Cargo refuses a cycle; this keeps the
/// order ARCHITECTURE.md draws), and the Stop hook's crate holds nothing a stop does not run.
#[test]
fn crates_depend_only_on_crates_below_and_the_stop_crate_stays_small() {
    let root = repo_root();
    let package = |dir: &str| {
        let manifest = std::fs::read_to_string(root.join(dir).join("../Cargo.toml")).unwrap();
        let name = manifest
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap()
            .to_owned();
        (name, manifest)
    };
    // The report and the board read a fleet's records from ralph-state (`storage::fleet`),
    // never from the crate that runs the fleet (issue 47): no section of their manifests,
    // not even a test's, names it.
    for dir in ["crates/ralph-report/src", "crates/ralph-watch/src"] {
        let (name, manifest) = package(dir);
        assert!(
            !workspace_dependencies(&manifest).contains(&"ralph-loop-run".to_owned()),
            "{name} depends on ralph-loop-run; what it reads of a fleet lives in ralph-state's \
             storage/fleet.rs"
        );
    }
    let order: Vec<String> = CRATES.iter().map(|(dir, _)| package(dir).0).collect();
    for (i, (dir, _)) in CRATES.iter().enumerate() {
        let (name, manifest) = package(dir);
        for dependency in workspace_dependencies(&manifest) {
            let at = order.iter().position(|o| *o == dependency);
            assert!(
                at.is_some_and(|at| at < i) || dependency == name,
                "{name} depends on {dependency}, which is not below it"
            );
        }
    }
    let (_, core) = package(CORE);
    for far in [
        "ralph-loop-control",
        "ralph-loop-run",
        "ralph-loop-report",
        "ralph-loop-watch",
        "ratatui",
        "ralph-loop-install",
        "ralph-loop-notify",
        "ureq",
    ] {
        assert!(
            !core.contains(far),
            "the Stop hook's crate depends on {far}"
        );
    }
    for rel in rust_files(&root.join(CORE)) {
        for room in [
            "run",
            "fleet",
            "report",
            "install",
            "notify",
            "sandbox",
            "control",
            "session",
            "statusline",
            "loop_file",
        ] {
            assert!(
                !rel.trim_end_matches(".rs")
                    .split('/')
                    .any(|part| part == room),
                "{CORE}/{rel}: the Stop hook's crate holds a {room} module"
            );
        }
    }
    let lines: usize = production_code()
        .iter()
        .filter(|(path, _, line)| path.starts_with(CORE) && !line.trim().is_empty())
        .count();
    assert!(
        lines <= MAX_STOP_CRATE_LINES,
        "the Stop hook's crate has {lines} production lines, more than {MAX_STOP_CRATE_LINES}: \
         move what a stop does not run out of it (ARCHITECTURE.md, \"The crates\")"
    );
}

#[test]
fn git_runs_only_through_the_git_runner() {
    let found = offenders(
        &["Command::new(\"git\")"],
        &["crates/ralph-fs/src/git_runner.rs"],
    );
    assert!(
        found.is_empty(),
        "git started outside git_runner.rs: {found:#?}"
    );
}

/// Every program ralph starts is named through `process.rs` (ralph-fs) (`program`, `shell`,
/// `this_program`), which finds it in an absolute folder of PATH only: a relative entry
/// (`.`, `node_modules/.bin`) would run the repository's `git` or `sh` (issue 36, item 4).
#[test]
fn programs_are_started_only_through_the_absolute_path_lookup() {
    let found = offenders(&["Command::new("], &["crates/ralph-fs/src/process.rs"]);
    assert!(
        found.is_empty(),
        "a program started without process.rs (`program`): {found:#?}"
    );
}

#[test]
fn loop_files_are_written_only_in_lifecycle() {
    let found = offenders(
        &[
            "store::write_atomic(",
            "store::write_turn(",
            "write_atomic(",
            "write_turn(",
            ".archive(",
        ],
        &[
            "crates/ralph-state/src/storage/store.rs",
            "crates/ralph-state/src/lifecycle.rs",
            // Its own `write_atomic`, for a host's settings file: not the store's.
            "crates/ralph-install/src/lib.rs",
        ],
    );
    // `live.write_turn(…)` is lifecycle's `Loop::write_turn`, which is the point.
    let found: Vec<_> = found
        .into_iter()
        .filter(|l| !l.contains(".write_turn(") || l.contains("store::write_turn("))
        .collect();
    assert!(
        found.is_empty(),
        "a loop file written outside lifecycle.rs (ralph-state): {found:#?}"
    );
}

#[test]
fn std_file_calls_stay_in_the_files_architecture_lists() {
    let allowed = [
        "crates/ralph-fs/src/safe_fs.rs",
        "crates/ralph-state/src/storage/store.rs",
        "crates/ralph-run/src/fleet/archive.rs",
        "crates/ralph-state/src/storage/registry.rs",
        "crates/ralph-state/src/storage/receipt.rs",
        "crates/ralph-state/src/storage/window.rs",
        "crates/ralph-state/src/storage/guidance.rs",
        "crates/ralph-fs/src/git_config.rs",
        "crates/ralph-fs/src/process.rs",
        "crates/ralph-state/src/fields/run_owner.rs",
        "crates/ralph-install/src/lib.rs",
    ];
    let found = offenders(
        &[
            "OpenOptions",
            "File::open(",
            "File::create(",
            "DirBuilder",
            "fs::read(",
            "fs::read_to_string(",
            "fs::write(",
            "fs::rename(",
            "fs::copy(",
            "fs::remove_file(",
            "fs::create_dir(",
            "fs::create_dir_all(",
        ],
        &allowed,
    );
    assert!(
        found.is_empty(),
        "a file opened, written or moved without safe_fs.rs: {found:#?}"
    );
    let text = architecture();
    for path in allowed {
        let short = source_dirs()
            .into_iter()
            .find_map(|dir| path.strip_prefix(&format!("{dir}/")))
            .filter(|short| *short != "lib.rs")
            .unwrap_or(path);
        assert!(
            text.contains(&format!("`{short}`")) || text.contains(&format!("`{path}`")),
            "ARCHITECTURE.md's invariant does not list {short}"
        );
    }
}

#[test]
fn the_binary_never_uses_the_panicking_print_macros() {
    let found: Vec<_> = offenders(&["println!", "eprintln!", "print!", "eprint!"], &[])
        .into_iter()
        .filter(|l| l.starts_with(BINARY))
        .collect();
    assert!(found.is_empty(), "print macros in the binary: {found:#?}");
}

/// The optional features of a turn (`--prd` stories, `--protect`/`--scope`, checkpoints,
/// receipts, the hand-over) are reached from the engine only through their seam,
/// `decide/features/`, which does nothing for a feature the loop does not have: the engine
/// names none of their modules, so a plain loop's stop cannot walk one by a call of its own.
#[test]
fn the_engine_reaches_the_optional_features_only_through_their_seam() {
    let engine = "decide/engine.rs";
    let source = std::fs::read_to_string(repo_root().join(CORE).join(engine)).expect("engine");
    // Each feature's modules, in ralph-core and the crates below (the stories' words in
    // `messages::stories` are the prompt's, not the feature's).
    let internals = [
        "checkpoints",
        "checkpoint",
        "receipt",
        "prd_turn",
        "fields::stories",
        "handover",
        "tree_diff",
        "protect_defaults",
        "globs",
        "pricing",
    ];
    let mut named = Vec::new();
    for (n, line) in production_lines(&source) {
        let path = |module: &str| {
            line.contains(&format!("{module}::"))
                || line.contains(&format!("::{module};"))
                || line.contains(&format!("::{module},"))
                || line.contains(&format!("::{module}}}"))
        };
        if internals.iter().any(|module| path(module)) {
            named.push(format!("{engine}:{n}: {}", line.trim()));
        }
    }
    assert!(
        named.is_empty(),
        "the engine names an optional feature's module; call it through `features::Extras`: {named:#?}"
    );
    let words = architecture()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        words.contains("a plain loop's stop walks none of the optional features"),
        "ARCHITECTURE.md no longer states the seam's rule"
    );
}

#[test]
fn the_pure_modules_touch_no_file_clock_process_or_environment() {
    let pure = [
        "decide/mod.rs",
        "ownership.rs",
        "reply/promise.rs",
        "arguments.rs",
        "fields/frontmatter.rs",
        "session/rules.rs",
        "failure.rs",
        "fleet/mod.rs",
        "model.rs",
        "keys.rs",
    ];
    let text = architecture();
    let root = repo_root();
    for rel in pure {
        assert!(
            text.contains(&format!("`{rel}`")),
            "ARCHITECTURE.md no longer calls {rel} pure"
        );
        let file = source_dirs()
            .into_iter()
            .map(|dir| root.join(dir).join(rel))
            .find(|p| p.exists())
            .expect("pure module");
        let source = std::fs::read_to_string(file).expect("pure module");
        for (n, line) in production_lines(&source) {
            for touch in [
                "std::fs",
                "std::env",
                "std::process",
                "std::net",
                "SystemTime",
                "Instant::now",
                "ralph_fs::safe_fs",
                "ralph_fs::process",
            ] {
                assert!(
                    !line.contains(touch),
                    "{rel}:{n} is called pure but uses {touch}: {}",
                    line.trim()
                );
            }
        }
    }
}

/// The most error enums the library crates may hold (ARCHITECTURE.md, "Errors"): one per front and
/// layer, plus the value-parse leaves. A new error goes into its layer's or front's type.
const MAX_CORE_ERRORS: usize = 19;

/// The fronts' errors: nothing holds one (a front wraps only layer errors and leaves).
const FRONT_ERRORS: [&str; 8] = [
    "CommandError",
    "RunError",
    "FleetError",
    "HookError",
    "InstallError",
    "InitError",
    "ReportError",
    "ReceiptError",
];

#[test]
fn core_errors_stay_few_and_flat() {
    let mut enums = Vec::new();
    let mut wrapped = Vec::new();
    let mut inside: Option<String> = None;
    for (path, n, line) in production_code() {
        if path.starts_with(BINARY) {
            continue;
        }
        if let Some(name) = line
            .strip_prefix("pub enum ")
            .or_else(|| line.strip_prefix("pub(crate) enum "))
            .and_then(|rest| rest.strip_suffix(" {"))
            .filter(|name| name.ends_with("Error"))
        {
            enums.push(format!("{path}: {name}"));
            inside = Some(name.to_owned());
        } else if line == "}" {
            inside = None;
        } else if let Some(owner) = &inside {
            // A variant's words (the message) are not its fields.
            let code = line.trim_start();
            if code.starts_with('"') || code.starts_with("#[error(\"") {
                continue;
            }
            let words = code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
            for word in words.filter(|w| FRONT_ERRORS.contains(w)) {
                wrapped.push(format!("{path}:{n}: {owner} holds {word}"));
            }
        }
    }
    assert!(
        enums.len() <= MAX_CORE_ERRORS,
        "{} error enums in the libraries, more than {MAX_CORE_ERRORS}: fold the new one into its layer's or front's error\n{}",
        enums.len(),
        enums.join("\n")
    );
    assert!(
        wrapped.is_empty(),
        "a front's error inside another error; give the outer one the variants it needs:\n{}",
        wrapped.join("\n")
    );
}

/// The relative targets of the markdown links in `text` (`[a](docs/x.md#y)` → `docs/x.md`).
fn link_targets(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            let target = &rest[..rest.find(')')?];
            let path = target.split('#').next().unwrap_or_default();
            (!path.is_empty() && !path.contains("://")).then_some(path)
        })
        .collect()
}

#[test]
fn the_readme_links_every_doc_and_every_doc_link_resolves() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let targets = link_targets(&readme);
    for doc in [
        "docs/guide.md",
        "docs/security.md",
        "docs/performance.md",
        "docs/cost.md",
        "docs/checks.md",
        "docs/prd.md",
        "docs/report.md",
        "docs/fleet.md",
        "docs/hosts.md",
        "ARCHITECTURE.md",
    ] {
        assert!(targets.contains(&doc), "README.md does not link {doc}");
    }
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    for entry in std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
    {
        if entry.path().extension().is_some_and(|e| e == "md") {
            pages.push(entry.path());
        }
    }
    let mut broken = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("a page");
        let dir = page.parent().expect("a folder");
        for target in link_targets(&text) {
            if !dir.join(target).exists() {
                broken.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing: {broken:#?}");
}

/// The checks above must be able to fail: each finds what it looks for in a made-up line.
#[test]
fn the_checks_see_what_they_look_for() {
    assert!(calls("let t = std::fs::read(path);", "fs::read("));
    assert!(!calls("let t = safe_fs::read(path);", "fs::read("));
    let code = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn b() { println!() }\n}\nfn c() {}\n";
    let kept: Vec<_> = production_lines(code).into_iter().map(|(_, l)| l).collect();
    assert_eq!(kept, ["fn a() {}", "fn c() {}"]);
    assert!(is_plain_path("fields/state.rs"));
    assert!(!is_plain_path("tests/<area>.rs"));
    let core = CRATES[3].1;
    assert_eq!(floor(core, "hook"), Some(2));
    assert_eq!(public_item("    pub fn f(x: u8) {"), Some(("fn", "f")));
    assert_eq!(public_item("pub(crate) struct S;"), None);
    assert_eq!(public_item("    pub name: String,"), None);
    assert_eq!(
        link_targets("[a](docs/x.md#y), [b](https://e.org), [c](#here)"),
        ["docs/x.md"]
    );
    assert!(floor(core, "reply") < floor(core, "decide"));
    assert_eq!(
        workspace_dependencies("ralph-loop-fs.workspace = true\nserde.workspace = true\n"),
        ["ralph-loop-fs"]
    );
}

/// The library crates (every one but the binary).
fn library_dirs() -> Vec<&'static str> {
    CRATES.iter().map(|(dir, _)| *dir).collect()
}

/// `pub` items of a line of production code: (kind, name), for `pub fn`, `pub struct`, …
/// (`pub(crate)` and fields are not items of the public surface).
fn public_item(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim_start().strip_prefix("pub ")?;
    let rest = rest.strip_prefix("async ").unwrap_or(rest);
    let (kind, rest) = rest.split_once(' ')?;
    if ![
        "fn", "struct", "enum", "trait", "const", "static", "type", "mod", "use",
    ]
    .contains(&kind)
    {
        return None;
    }
    let name_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    Some((kind, &rest[..name_end]))
}

/// The most `pub` items the libraries may hold (issue 47: about 1,260 before `pub` meant API,
/// 1,109 after, the clap tree of `ralph-cli` included).
/// A new one is fine when another crate needs it; raise this deliberately, not by habit.
const MAX_PUBLIC_ITEMS: usize = 1_150;

/// The identifiers each source folder writes (the crates', the integration tests', the fuzz
/// targets'), each folder's once.
fn words_by_folder() -> Vec<(&'static str, std::collections::HashSet<String>)> {
    let root = repo_root();
    let mut out = Vec::new();
    for dir in source_dirs()
        .into_iter()
        .chain(["tests", "fuzz/fuzz_targets"])
    {
        let mut words = std::collections::HashSet::new();
        for rel in rust_files(&root.join(dir)) {
            let text = std::fs::read_to_string(root.join(dir).join(rel)).expect("source");
            for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if !word.is_empty() && !words.contains(word) {
                    words.insert(word.to_owned());
                }
            }
        }
        out.push((dir, words));
    }
    out
}

/// `pub` means API: every public function and constant of a library is named by another crate
/// (else it says `pub(crate)`), and the public surface stays under its cap.
#[test]
fn a_librarys_public_functions_and_constants_are_used_by_another_crate() {
    let code = production_code();
    let mut unused = Vec::new();
    let mut count = 0;
    let folders = words_by_folder();
    for dir in library_dirs() {
        let used_outside = |name: &str| {
            folders
                .iter()
                .any(|(other, words)| *other != dir && words.contains(name))
        };
        for (path, n, line) in code.iter().filter(|(p, _, _)| p.starts_with(dir)) {
            let Some((kind, name)) = public_item(line) else {
                continue;
            };
            count += 1;
            if ["fn", "const", "static"].contains(&kind) && !used_outside(name) {
                unused.push(format!("{path}:{n}: {kind} {name}"));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "public items no other crate uses; make them pub(crate): {unused:#?}"
    );
    assert!(
        count <= MAX_PUBLIC_ITEMS,
        "{count} pub items in the libraries, more than {MAX_PUBLIC_ITEMS}"
    );
}

/// One name per concept: no two public types of the libraries share a name.
#[test]
fn no_two_public_types_share_a_name() {
    let mut seen: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut twice = Vec::new();
    for (path, n, line) in production_code() {
        if !library_dirs().iter().any(|d| path.starts_with(d)) {
            continue;
        }
        let Some((kind, name)) = public_item(&line) else {
            continue;
        };
        if !["struct", "enum", "trait", "type"].contains(&kind) {
            continue;
        }
        let here = format!("{path}:{n}");
        if let Some(first) = seen.insert(name.to_owned(), here.clone()) {
            twice.push(format!("{name}: {first} and {here}"));
        }
    }
    assert!(twice.is_empty(), "public types sharing a name: {twice:#?}");
}

/// Every library says at its top that it is internal, and what `pub` means in it.
#[test]
fn every_library_says_it_is_internal() {
    for dir in library_dirs() {
        let lib = std::fs::read_to_string(repo_root().join(dir).join("lib.rs")).expect("lib.rs");
        let top: String = lib
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .map(|l| l.trim_start_matches("//!").trim())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            top.contains("Internal to ralph") && top.contains("names only what another"),
            "{dir}/lib.rs does not say it is internal and what `pub` means there"
        );
    }
}
