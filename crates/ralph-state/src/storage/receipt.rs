//! A receipt for every completion that passed a `--verify` gate: which
//! command, its exit code and duration, the SHA-256 of its whole output
//! (the output itself kept beside the loop's history record), the commit it
//! passed on and whether the tree was clean.
//!
//! The receipt is kept in the per-user state folder (beside the record of
//! armed loops), not in the project: `ralph receipt --recheck` runs its
//! command again, and a receipt planted in a cloned repository must not
//! choose what runs. A copy of the output goes into the project's history,
//! created exclusively through `safe_fs`.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::storage::registry::Registry;
use ralph_fs::gate::Verification;

/// How long the receipt waits for `git status` (HEAD and cleanliness).
const GIT_LIMIT: Duration = Duration::from_secs(10);

/// What a completion's gate proved, as `ralph receipt --json` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub version: u32,
    /// The loop's name.
    pub name: String,
    /// The project's canonical folder.
    pub project: String,
    pub command: String,
    pub exit_code: i32,
    pub duration_ms: u64,
    /// SHA-256 of the gate's whole output, hex.
    pub output_sha256: String,
    /// Bytes of output; the history keeps the last `gate::KEPT_BYTES` of them.
    pub output_bytes: u64,
    /// Whether the output was longer than what the history keeps: the
    /// kept file is its end (the digest still covers all of it).
    #[serde(default)]
    pub output_cut: bool,
    /// The commit HEAD named when the gate passed (`None`: no git, or no commit yet).
    pub commit: Option<String>,
    /// Whether the working tree was clean then (`None`: not a git tree, or git did not answer).
    pub clean: Option<bool>,
    pub passed_at: String,
    pub iteration: u64,
    /// The loop's history record.
    pub record: String,
    /// The kept output in the history, if it could be written.
    pub output_file: Option<String>,
    /// `--protect`/`--scope`: what held when the gate passed (older receipts have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<PathsHeld>,
    /// How the gate ran: `sandboxed (bubblewrap), no network`, `not
    /// sandboxed (--gate-sandbox off)` (older receipts have none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gate_sandbox: String,
    /// Where and how the gate ran (older receipts have none: in the project).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateRan>,
}

/// How a gate ran: in a snapshot (its tree id) or in the project itself,
/// the setup step and whether it ran, the held-out set (how it was
/// confined is the receipt's `gate_sandbox`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GateRan {
    /// The tree the gate's snapshot held (`None`: it ran in the project
    /// folder itself, which is not a git work tree).
    pub tree: Option<String>,
    /// Protected paths the snapshot held as they were at arming.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restored: Vec<String>,
    /// `--gate-setup`: the step, and whether it ran before this gate
    /// (`false`: the snapshot had not changed since it last passed).
    pub setup: Option<String>,
    #[serde(default)]
    pub setup_ran: bool,
    /// `--holdout`: the folder and the SHA-256 of the set copied in.
    pub held_out: Option<String>,
    pub held_out_sha256: Option<String>,
}

/// `--protect` and `--scope` at the completion: the globs, the tree the
/// work was compared with, every path changed since, and that both held
/// (a completion is refused otherwise, so a receipt says `true`; the
/// fields say what was checked).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathsHeld {
    pub protect: Vec<String>,
    pub scope: Vec<String>,
    pub armed_tree: String,
    pub changed: Vec<String>,
    /// No protected path differed from the tree at arming.
    pub protect_held: bool,
    /// Every changed path matched the scope (or none was set).
    pub scope_held: bool,
}

/// Why a receipt could not be kept or read.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    #[error(
        "no receipt for loop `{name}` in this project: a receipt is written when a loop completes through its --verify gate"
    )]
    None { name: String },
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is {what}; remove it so ralph can keep its receipts there", path.display())]
    Unsafe { path: PathBuf, what: &'static str },
    #[error("the receipt {} does not parse ({detail}); delete it", path.display())]
    Corrupt { path: PathBuf, detail: String },
    #[error("no per-user state folder (HOME and XDG_STATE_HOME are unset)")]
    NoHome,
    /// `ralph receipt` without a name, in a project without loops.
    #[error("no loops in this project yet, so no receipt")]
    NoLoops,
    /// `ralph receipt --recheck`: the gate fails now (`status`).
    #[error("`{command}` no longer passes ({status}): the loop `{name}` is not done any more")]
    NoLongerHolds {
        command: String,
        status: String,
        name: String,
    },
}

impl ralph_fs::error::Exit for ReceiptError {}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ReceiptError {
    let path = path.to_owned();
    move |source| ReceiptError::Io {
        action,
        path,
        source,
    }
}

/// What `engine` hands over when a gate completed a loop.
pub struct Passed<'a> {
    pub name: &'a str,
    pub root: &'a Path,
    pub command: &'a str,
    pub verdict: &'a Verification,
    /// The end of the output ralph kept (`gate::KEPT_BYTES` at most).
    pub output: Option<Vec<u8>>,
    pub iteration: u64,
    pub record: &'a Path,
    pub now: String,
    pub paths: Option<PathsHeld>,
    pub gate: Option<GateRan>,
}

/// The receipt of a gate that passed: HEAD and cleanliness read now, the
/// output copied beside the history record (`<record>.gate-output.txt`).
pub fn build(passed: Passed<'_>) -> Receipt {
    let (commit, clean) = match ralph_fs::git::head_and_clean(passed.root, GIT_LIMIT) {
        Some((commit, clean)) => (commit, Some(clean)),
        None => (None, None),
    };
    let output_file = keep_output(passed.output.as_deref(), passed.record);
    let root = fs::canonicalize(passed.root).unwrap_or_else(|_| passed.root.to_owned());
    Receipt {
        version: 1,
        name: passed.name.to_owned(),
        project: root.to_string_lossy().into_owned(),
        command: passed.command.to_owned(),
        exit_code: passed.verdict.exit_code.unwrap_or(0),
        duration_ms: passed.verdict.duration_ms,
        output_sha256: passed.verdict.output_sha256.clone(),
        output_bytes: passed.verdict.output_bytes,
        gate_sandbox: passed.verdict.sandbox.clone(),
        output_cut: passed.verdict.output_cut(),
        commit,
        clean,
        passed_at: passed.now,
        iteration: passed.iteration,
        record: passed.record.to_string_lossy().into_owned(),
        output_file,
        paths: passed.paths,
        gate: passed.gate,
    }
}

/// Writes the kept end of the output to a new file beside the record;
/// returns the file's path.
fn keep_output(output: Option<&[u8]>, record: &Path) -> Option<String> {
    let bytes = output?;
    let mut path = record.as_os_str().to_owned();
    path.push(".gate-output.txt");
    let path = PathBuf::from(path);
    ralph_fs::safe_fs::create_new(&path, bytes)
        .ok()
        .map(|()| path.to_string_lossy().into_owned())
}

/// The per-user folder of receipts: `$XDG_STATE_HOME/ralph/receipts`.
fn dir(registry: &Registry) -> PathBuf {
    registry.dir().join("receipts")
}

/// The receipt's file for a project and loop name (a hash: no name from a
/// file becomes a path).
fn path(registry: &Registry, root: &Path, name: &str) -> PathBuf {
    let mut h = Sha256::new();
    h.update(b"receipt\0");
    h.update(root.to_string_lossy().as_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    dir(registry).join(format!("{key}.json"))
}

/// Refuses a folder that is a link or not a folder.
fn check_dir(path: &Path) -> Result<(), ReceiptError> {
    let meta = fs::symlink_metadata(path).map_err(io("inspect", path))?;
    if meta.file_type().is_symlink() {
        return Err(ReceiptError::Unsafe {
            path: path.to_owned(),
            what: "a symbolic link",
        });
    }
    if !meta.is_dir() {
        return Err(ReceiptError::Unsafe {
            path: path.to_owned(),
            what: "not a folder",
        });
    }
    Ok(())
}

/// Keeps the receipt (replacing the loop's previous one): a private temp
/// file created exclusively under a random name, renamed into place.
pub fn save(registry: &Registry, receipt: &Receipt) -> Result<PathBuf, ReceiptError> {
    let folder = dir(registry);
    let mut builder = DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    if fs::symlink_metadata(&folder).is_err() {
        builder.create(&folder).map_err(io("create", &folder))?;
    }
    check_dir(&folder)?;
    let target = path(registry, Path::new(&receipt.project), &receipt.name);
    let nonce = crate::storage::registry::new_nonce().map_err(|e| ReceiptError::Io {
        action: "name a temp file in",
        path: folder.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let temp = folder.join(format!(".{nonce}.tmp"));
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let text = serde_json::to_string_pretty(receipt).unwrap_or_default() + "\n";
    let written = (|| {
        let mut file = options.open(&temp).map_err(io("create", &temp))?;
        file.write_all(text.as_bytes())
            .map_err(io("write", &temp))?;
        file.sync_all().map_err(io("sync", &temp))?;
        fs::rename(&temp, &target).map_err(io("write", &target))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written.map(|()| target)
}

/// The last receipt of loop `name` in the project at `root` (canonical).
pub fn load(registry: &Registry, root: &Path, name: &str) -> Result<Receipt, ReceiptError> {
    let folder = dir(registry);
    if fs::symlink_metadata(&folder).is_err() {
        return Err(ReceiptError::None { name: name.into() });
    }
    check_dir(&folder)?;
    let file = path(registry, root, name);
    let bytes = match ralph_fs::safe_fs::read_capped(&file, 1024 * 1024) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Err(ReceiptError::None { name: name.into() }),
        Err(e) => {
            return Err(ReceiptError::Io {
                action: "read",
                path: file,
                source: std::io::Error::other(e.to_string()),
            });
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| ReceiptError::Corrupt {
        path: file,
        detail: e.to_string(),
    })
}

/// The receipt in one line, for `ralph status` and `ralph run`'s summary:
/// `receipt: `cargo test` exit 0 in 12.3s on 3fa9c2b (clean), output sha256 1a2b…`.
pub fn one_line(r: &Receipt) -> String {
    let line = ralph_fs::display::line;
    let on = match (&r.commit, r.clean) {
        (Some(c), Some(true)) => format!(" on {} (clean)", line(&c[..c.len().min(12)])),
        (Some(c), _) => format!(" on {} (uncommitted changes)", line(&c[..c.len().min(12)])),
        (None, Some(_)) => " before the first commit".to_owned(),
        (None, None) => " (no git)".to_owned(),
    };
    let cut = if r.output_cut {
        format!(
            " (of {} bytes; the history keeps only the last {})",
            r.output_bytes,
            ralph_fs::gate::KEPT_BYTES
        )
    } else {
        String::new()
    };
    let held = r.paths.as_ref().map_or(String::new(), |p| {
        format!(
            ", {} with --protect {} and --scope {}",
            crate::plural::count(p.changed.len() as u64, "changed path", "changed paths"),
            if p.protect_held { "held" } else { "broken" },
            if p.scope_held { "held" } else { "broken" }
        )
    });
    let sandbox = if r.gate_sandbox.is_empty() {
        String::new()
    } else {
        format!(", {}", line(&r.gate_sandbox))
    };
    let place = r.gate.as_ref().map_or(String::new(), |g| match &g.tree {
        Some(tree) => format!(", in snapshot {}", line(&tree[..tree.len().min(12)])),
        None => ", in the project folder".to_owned(),
    });
    format!(
        "receipt: `{}` exit {} in {}{on}, output sha256 {}{cut}{held}{place}{sandbox}",
        line(&r.command),
        r.exit_code,
        seconds(r.duration_ms),
        line(&r.output_sha256[..r.output_sha256.len().min(16)]),
    )
}

/// `12.3s`.
pub fn seconds(ms: u64) -> String {
    format!("{}.{}s", ms / 1000, (ms % 1000) / 100)
}

/// What a recheck found: does "done" still hold?
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recheck {
    pub holds: bool,
    pub status: String,
    pub duration_ms: u64,
    pub output_sha256: String,
    /// The same output, byte for byte, as when it passed.
    pub same_output: bool,
    pub commit: Option<String>,
    /// HEAD is still the commit the receipt names.
    pub same_commit: bool,
    pub output_tail: String,
}

/// Runs the receipt's gate again in `root` (its time limit `timeout`),
/// confined as `confinement` says.
pub fn recheck(
    r: &Receipt,
    root: &Path,
    timeout: Duration,
    confinement: &ralph_fs::gate_jail::GateConfinement,
) -> Recheck {
    recheck_with(r, root, |command| {
        ralph_fs::gate::run(command, root, timeout, confinement)
    })
}

/// The receipt's gate run again by `run` (in the gate's snapshot, say),
/// HEAD read in `root`.
pub fn recheck_with(r: &Receipt, root: &Path, run: impl FnOnce(&str) -> Verification) -> Recheck {
    let v = run(&r.command);
    let commit = ralph_fs::git::head_and_clean(root, GIT_LIMIT).and_then(|(c, _)| c);
    Recheck {
        holds: v.passed,
        same_output: v.output_sha256 == r.output_sha256,
        same_commit: commit == r.commit,
        status: v.status,
        duration_ms: v.duration_ms,
        output_sha256: v.output_sha256,
        commit,
        output_tail: v.output_tail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Receipt {
        Receipt {
            version: 1,
            name: "ralph".into(),
            project: "/p".into(),
            command: "cargo test".into(),
            exit_code: 0,
            duration_ms: 12_345,
            output_sha256: "ab".repeat(32),
            output_bytes: 10,
            output_cut: false,
            commit: Some("3fa9c2b1d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9".into()),
            clean: Some(true),
            passed_at: "2026-01-01T00:00:00Z".into(),
            iteration: 3,
            record: "/p/.claude/ralph/history/x.md".into(),
            output_file: None,
            paths: None,
            gate_sandbox: String::new(),
            gate: None,
        }
    }

    #[test]
    fn a_saved_receipt_loads_back_and_reads_in_one_line() {
        let home = tempfile::tempdir().unwrap();
        let registry = crate::storage::registry::locate(Some(home.path()), None).unwrap();
        let r = sample();
        let err = load(&registry, Path::new("/p"), "ralph").unwrap_err();
        assert!(matches!(err, ReceiptError::None { .. }), "{err}");
        save(&registry, &r).unwrap();
        assert_eq!(load(&registry, Path::new("/p"), "ralph").unwrap(), r);
        assert!(load(&registry, Path::new("/q"), "ralph").is_err());
        assert_eq!(
            one_line(&r),
            "receipt: `cargo test` exit 0 in 12.3s on 3fa9c2b1d4e5 (clean), output sha256 abababababababab"
        );
    }
}
