//! The per-user record of armed loops: which loop files this user armed on
//! this machine, so that a loop file that arrived with a repository (or was
//! changed since) is never driven.
//!
//! It lives outside every project, in `$XDG_STATE_HOME/ralph/` (by default
//! `~/.local/state/ralph/`), because both sides must find the same folder:
//! `ralph start` runs from a slash command's `!` block or a terminal, the
//! hook from Claude Code's hook runner. `CLAUDE_PLUGIN_DATA` is set only for
//! hooks, so it cannot be that place.
//!
//! Layout (the folders are 0700, the files 0600, all owned by the user):
//!   loops/<key>.json      one record per armed loop, `key` = hash of (project, name)
//!   notices/<hash>        "this session was already told about this file"
//!
//! A record binds the project's canonical path, the loop's name and file, a
//! random nonce that is also written into the loop file (`ralph_nonce`), and
//! a SHA-256 digest of what the loop will do: its prompt and every setting
//! the user chose. "Every setting" is every field ralph reads except the
//! short list of bookkeeping fields ralph itself rewrites ([`BOOKKEEPING`]),
//! so a field added to the loop file later is bound without a change here.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::fields::state::LoopState;
use crate::storage::store::{LOOP_SUFFIX, Project};
use crate::time::Timestamp;

/// The frontmatter field that carries a loop's nonce.
pub use crate::fields::binding::NONCE_FIELD;
pub use crate::fields::binding::{BOOKKEEPING, is_bound};

/// A record is a few hundred bytes; anything much larger is not ours.
const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// The version of records written now: 2 binds every setting; a record of
/// version 1 bound only prompt, promises and verify, and binds nothing now.
const RECORD_VERSION: u32 = 2;

/// Notice markers older than this are swept when a new one is written.
const MARKER_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "neither XDG_STATE_HOME nor HOME is set to an absolute path, so ralph has no place to record the loops you arm"
    )]
    NoHome,
    #[error(
        "{path} is {what}; ralph keeps its record of armed loops only in a folder of yours. Remove it (ralph recreates it)"
    )]
    Unsafe { path: PathBuf, what: String },
    #[error("could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("no random numbers for a nonce: {0}")]
    Random(String),
}

impl ralph_fs::error::Exit for RegistryError {}

fn io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> RegistryError + 'a {
    move |source| RegistryError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// The folder of records, `$XDG_STATE_HOME/ralph`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    dir: PathBuf,
}

/// One armed loop, as stored in `loops/<key>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    pub project: String,
    pub name: String,
    pub file: String,
    pub nonce: String,
    pub digest: String,
    pub armed_at: String,
}

/// Whether a loop file may be driven here. There is no third way: a file
/// without a record is inert whoever its `session_id` names, since any
/// command the agent runs can read the session id from its environment and
/// plant a file that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arming {
    /// A record matches: project, name, file, nonce and digest.
    Armed,
    /// Anything else: the loop is inert until `ralph adopt`.
    Unarmed(Unarmed),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unarmed {
    /// No record for this project and name.
    NoRecord,
    /// No nonce in the file and no record under its name: armed by an older
    /// ralph, by the reference plugin's setup script, or planted.
    NoNonce,
    /// The record was written by a ralph that bound less (version 1).
    Outdated,
    /// A record exists, but for another nonce (the file was copied or replaced).
    Mismatch,
    /// The nonce matches, but the prompt, a promise or the verify command changed.
    Changed,
    /// The registry cannot be used.
    Unavailable(String),
}

impl Unarmed {
    /// Whether a record exists under the loop's name (for another nonce,
    /// an older version or other settings).
    pub fn has_record(&self) -> bool {
        matches!(
            self,
            Unarmed::Outdated | Unarmed::Mismatch | Unarmed::Changed
        )
    }
}

impl Arming {
    /// Why a loop is not armed, in words ("" when it is).
    pub fn why_not(&self) -> String {
        match self {
            Arming::Armed => String::new(),
            Arming::Unarmed(why) => why.why(),
        }
    }
}

impl Unarmed {
    /// Why, in words, completing "… is not driven: ".
    pub fn why(&self) -> String {
        match self {
            Unarmed::NoRecord => "nothing records that you armed it on this machine".into(),
            Unarmed::NoNonce => "it has no `ralph_nonce`, so nothing records that you armed it on this machine (a loop armed by the reference ralph-loop plugin or by a ralph older than its record of armed loops is adopted once, like any other)".into(),
            Unarmed::Outdated => "it was armed by an older ralph whose record did not bind the loop's settings".into(),
            Unarmed::Mismatch => {
                "it is not the loop you armed under that name (copied from elsewhere or replaced)"
                    .into()
            }
            Unarmed::Changed => {
                "its prompt or its settings (limits, budgets, breakers, promises, verify) changed since you armed it".into()
            }
            Unarmed::Unavailable(e) => format!("ralph's record of armed loops is unusable: {e}"),
        }
    }
}

/// Where the registry is: `$XDG_STATE_HOME/ralph`, else `$HOME/.local/state/ralph`.
/// Relative values are ignored, as the XDG base-directory rules require.
pub fn locate(state_home: Option<&Path>, home: Option<&Path>) -> Option<Registry> {
    let absolute = |p: &&Path| p.is_absolute();
    let base = match state_home.filter(absolute) {
        Some(state) => state.to_owned(),
        None => home.filter(absolute)?.join(".local").join("state"),
    };
    Some(Registry {
        dir: base.join("ralph"),
    })
}

/// The registry named by the process environment.
pub fn from_env() -> Option<Registry> {
    let state_home = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    locate(state_home.as_deref(), home_from_env().as_deref())
}

/// The user's home folder: `$HOME`; on Windows, where only Git Bash sets
/// `HOME` (to the same folder), `%USERPROFILE%` when it is missing.
pub fn home_from_env() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = var("HOME");
    #[cfg(windows)]
    let home = home.or_else(|| var("USERPROFILE"));
    home
}

/// A project's path as records bind it: canonical, so that one folder
/// reached by two paths is one project.
pub fn canonical_root(project: &Project) -> Result<PathBuf, RegistryError> {
    fs::canonicalize(&project.root).map_err(io_err("resolve", &project.root))
}

/// Whether a loop is armed on this machine, given the registry (if any) and
/// the project's canonical root (if it resolved).
pub fn arming(
    registry: Option<&Registry>,
    root: Option<&Path>,
    name: &str,
    state: &LoopState,
) -> Arming {
    match (registry, root) {
        (Some(registry), Some(root)) => registry.check(root, name, state),
        (None, _) => Arming::Unarmed(Unarmed::Unavailable(RegistryError::NoHome.to_string())),
        (_, None) => Arming::Unarmed(Unarmed::Unavailable(
            "the project folder does not resolve".into(),
        )),
    }
}

/// A fresh random nonce: 128 bits, in hex.
pub fn new_nonce() -> Result<String, RegistryError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| RegistryError::Random(e.to_string()))?;
    Ok(hex(&bytes))
}

/// The digest of what a loop will do: its prompt and its bound settings
/// (see [`settings_hash`], computed once when the file is parsed).
pub fn digest(state: &LoopState) -> String {
    let mut h = Sha256::new();
    h.update(b"ralph loop v2\0");
    h.update(state.settings_hash);
    h.update((state.prompt.len() as u64).to_be_bytes());
    h.update(state.prompt.as_bytes());
    hex(&h.finalize())
}

/// The digest of a whole file's text (for files that do not parse).
pub fn digest_text(text: &str) -> String {
    hash_parts(&[b"text", text.as_bytes()])
}

/// The file of the user's approval secret, in the registry's folder.
const APPROVAL_SECRET: &str = "approval-secret";

/// Creates `path` exclusively (`O_EXCL`, so never through a link), mode
/// 0600 from the start, with `bytes`.
fn create_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// The bytes of a hex string, if it is one.
fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hash_parts(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex(&h.finalize())
}

/// The loop file a record binds, in its canonical project.
fn loop_file(root: &Path, name: &str) -> PathBuf {
    root.join(".claude").join(format!("{name}{LOOP_SUFFIX}"))
}

impl Registry {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn loops_dir(&self) -> PathBuf {
        self.dir.join("loops")
    }

    fn notices_dir(&self) -> PathBuf {
        self.dir.join("notices")
    }

    /// Which `ralph` binary the hooks ran at the last session start (its
    /// path and version), so `ralph status` can say it.
    fn hooks_binary_file(&self) -> PathBuf {
        self.dir.join("hooks-binary")
    }

    /// Records `binary` as the one the hooks run, when it is not the one
    /// recorded already; best effort (a session start never fails on it).
    pub fn record_hooks_binary(&self, binary: &str) {
        if self.hooks_binary().as_deref() == Some(binary) {
            return;
        }
        if self.ensure(&self.notices_dir()).is_ok() {
            let _ = ralph_fs::safe_fs::replace(&self.hooks_binary_file(), binary.as_bytes());
        }
    }

    /// The binary the hooks ran at the last session start, if one was recorded.
    pub fn hooks_binary(&self) -> Option<String> {
        ralph_fs::safe_fs::read_text(&self.hooks_binary_file(), 4096).ok()
    }

    /// Where the record of the loop file `name` of the project at `root`
    /// (canonical) is kept, read or not.
    pub(crate) fn record_file(&self, root: &Path, name: &str) -> PathBuf {
        self.record_path(root, name)
    }

    fn record_path(&self, root: &Path, name: &str) -> PathBuf {
        let key = hash_parts(&[b"loop", &path_bytes(root), name.as_bytes()]);
        self.loops_dir().join(format!("{key}.json"))
    }

    /// Where the guidance `ralph say` queues for the loop file `name` of the
    /// project at `root` (canonical) is kept (`guidance.rs`).
    pub(crate) fn mailbox_dir(&self, root: &Path, name: &str) -> PathBuf {
        let key = hash_parts(&[b"loop", &path_bytes(root), name.as_bytes()]);
        self.dir.join("guidance").join(key)
    }

    /// Where the checkpoints of the project at `root` (canonical) are kept
    /// (`checkpoints/<key>/`, a folder per loop and arming below; not
    /// created here): outside the project, where the agent cannot write.
    pub(crate) fn checkpoint_place(&self, root: &Path) -> PathBuf {
        let key = hash_parts(&[b"checkpoints", &path_bytes(root)]);
        self.dir.join("checkpoints").join(&key[..32.min(key.len())])
    }

    /// Creates `path` (under this registry) and every folder between, each
    /// 0700 and checked as the registry's own folders are.
    pub(crate) fn ensure_private(&self, path: &Path) -> Result<(), RegistryError> {
        let Ok(below) = path.strip_prefix(&self.dir) else {
            return Err(RegistryError::Unsafe {
                path: path.to_owned(),
                what: "outside ralph's state folder".into(),
            });
        };
        let mut at = self.dir.clone();
        for part in below.components() {
            at.push(part);
            self.ensure(&at)?;
        }
        Ok(())
    }

    /// The gate folder of the loop `name` of the project at `root`
    /// (`gates/<key>/`, 0700, created where missing): where its gates'
    /// snapshot lives from gate to gate, outside the project.
    pub fn gate_place(&self, root: &Path, name: &str) -> Result<PathBuf, RegistryError> {
        let gates = self.dir.join("gates");
        self.ensure(&gates)?;
        let key = hash_parts(&[b"gate", &path_bytes(root), name.as_bytes()]);
        let place = gates.join(&key[..32.min(key.len())]);
        match private_dir_builder().create(&place) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create", &place)(e)),
        }
        check_dir(&place)?;
        Ok(place)
    }

    /// The user's approval secret: 32 random bytes in `approval-secret` in
    /// the registry's folder (hidden from a sandboxed agent, never in a
    /// project), made on first use with `O_EXCL` and mode 0600. An approval
    /// code is keyed with it, so a file of the project cannot print the
    /// right one. A file there that is not a regular file of 64 hex digits
    /// is refused, never replaced.
    pub fn approval_secret(&self) -> Result<Vec<u8>, RegistryError> {
        self.ensure(&self.dir)?;
        let path = self.dir.join(APPROVAL_SECRET);
        if fs::symlink_metadata(&path).is_err() {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|e| RegistryError::Random(e.to_string()))?;
            match create_private(&path, hex(&bytes).as_bytes()) {
                Ok(()) => return Ok(bytes.to_vec()),
                // Another ralph made it first: its secret is the one.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("create", &path)(e)),
            }
        }
        // A writer that just made it may not have written it yet.
        for _ in 0..50 {
            let text =
                ralph_fs::safe_fs::read_text(&path, 256).map_err(|e| RegistryError::Unsafe {
                    path: path.clone(),
                    what: e.to_string(),
                })?;
            if let Some(secret) = unhex(text.trim()).filter(|b| b.len() == 32) {
                return Ok(secret);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(RegistryError::Unsafe {
            path,
            what: "not 64 hex digits".to_owned(),
        })
    }

    /// Creates the registry's folders (0700) where missing, and checks them.
    fn ensure(&self, sub: &Path) -> Result<(), RegistryError> {
        if fs::symlink_metadata(&self.dir).is_err() {
            private_dir_builder()
                .recursive(true)
                .create(&self.dir)
                .map_err(io_err("create", &self.dir))?;
        }
        check_dir(&self.dir)?;
        match private_dir_builder().create(sub) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create", sub)(e)),
        }
        check_dir(sub)
    }

    /// Records a loop as armed by this user (replacing any older record for
    /// the same project and name). Call it under the project lock.
    pub fn record(
        &self,
        root: &Path,
        name: &str,
        nonce: &str,
        state: &LoopState,
        now: Timestamp,
    ) -> Result<(), RegistryError> {
        let loops = self.loops_dir();
        self.ensure(&loops)?;
        let record = Record {
            version: RECORD_VERSION,
            project: root.to_string_lossy().into_owned(),
            name: name.to_owned(),
            file: loop_file(root, name).to_string_lossy().into_owned(),
            nonce: nonce.to_owned(),
            digest: digest(state),
            armed_at: now.to_string(),
        };
        let text = serde_json::to_string_pretty(&record).unwrap_or_default() + "\n";
        let path = self.record_path(root, name);
        let temp = loops.join(format!(".{}.tmp", new_nonce()?));
        let written = (|| {
            let mut file = private_new_file()
                .open(&temp)
                .map_err(io_err("create", &temp))?;
            file.write_all(text.as_bytes())
                .map_err(io_err("write", &temp))?;
            file.sync_all().map_err(io_err("sync", &temp))?;
            fs::rename(&temp, &path).map_err(io_err("write", &path))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        } else if let Ok(d) = File::open(&loops) {
            let _ = d.sync_all();
        }
        written
    }

    /// The record for a project and name, if there is one.
    pub fn lookup(&self, root: &Path, name: &str) -> Result<Option<Record>, RegistryError> {
        for dir in [&self.dir, &self.loops_dir()] {
            match fs::symlink_metadata(dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                _ => check_dir(dir)?,
            }
        }
        let path = self.record_path(root, name);
        let Some(text) = read_private(&path)? else {
            return Ok(None);
        };
        // A record that does not parse binds nothing.
        Ok(serde_json::from_str(&text).ok())
    }

    /// Whether `state`, read from the loop file `name` of the project at
    /// `root` (canonical), is a loop this user armed here.
    pub fn check(&self, root: &Path, name: &str, state: &LoopState) -> Arming {
        let record = match self.lookup(root, name) {
            Ok(r) => r,
            Err(e) => return Arming::Unarmed(Unarmed::Unavailable(e.to_string())),
        };
        match (record, state.nonce.as_deref()) {
            (None, None) => Arming::Unarmed(Unarmed::NoNonce),
            (None, Some(_)) => Arming::Unarmed(Unarmed::NoRecord),
            (Some(r), nonce) => {
                let bound = r.project == root.to_string_lossy()
                    && r.name == name
                    && r.file == loop_file(root, name).to_string_lossy()
                    && Some(r.nonce.as_str()) == nonce;
                if !bound {
                    Arming::Unarmed(Unarmed::Mismatch)
                } else if r.version < RECORD_VERSION {
                    Arming::Unarmed(Unarmed::Outdated)
                } else if r.digest != digest(state) {
                    Arming::Unarmed(Unarmed::Changed)
                } else {
                    Arming::Armed
                }
            }
        }
    }

    /// Removes the record of a loop that ended. With a nonce, only a record
    /// of that nonce is removed (a loop re-armed meanwhile keeps its own),
    /// and it is kept under `ended/` by its nonce: the proof, for `ralph
    /// resume --add-*`, that this user armed the loop a history record holds.
    pub fn forget(&self, root: &Path, name: &str, nonce: Option<&str>) {
        let path = self.record_path(root, name);
        if let Some(nonce) = nonce {
            match self.lookup(root, name) {
                Ok(Some(r)) if r.nonce == nonce => {}
                _ => return,
            }
            let ended = self.ended_dir();
            if self.ensure(&ended).is_ok()
                && fs::rename(&path, self.ended_path(root, name, nonce)).is_ok()
            {
                return;
            }
        }
        let _ = fs::remove_file(path);
    }

    fn ended_dir(&self) -> PathBuf {
        self.dir.join("ended")
    }

    fn ended_path(&self, root: &Path, name: &str, nonce: &str) -> PathBuf {
        let key = hash_parts(&[
            b"ended",
            &path_bytes(root),
            name.as_bytes(),
            nonce.as_bytes(),
        ]);
        self.ended_dir().join(format!("{key}.json"))
    }

    /// Whether `state`, read from a history record of the loop `name` of the
    /// project at `root`, is a loop this user armed here and that ended as
    /// it was armed: its kept record matches nonce and digest. A planted
    /// history record has no such record.
    pub fn armed_before(&self, root: &Path, name: &str, state: &LoopState) -> bool {
        let Some(nonce) = state.nonce.as_deref() else {
            return false;
        };
        if check_dir(&self.dir).is_err() || check_dir(&self.ended_dir()).is_err() {
            return false;
        }
        let Ok(Some(text)) = read_private(&self.ended_path(root, name, nonce)) else {
            return false;
        };
        serde_json::from_str::<Record>(&text).is_ok_and(|r| {
            r.version >= RECORD_VERSION
                && r.project == root.to_string_lossy()
                && r.name == name
                && r.nonce == nonce
                && r.digest == digest(state)
        })
    }

    /// Drops the kept record of an ended loop (it was armed again: one
    /// revival per ending).
    pub fn forget_ended(&self, root: &Path, name: &str, nonce: &str) {
        let _ = fs::remove_file(self.ended_path(root, name, nonce));
    }

    /// Whether this is the first time `session` hears about `file` in this
    /// shape (`digest`). Leaves a marker, so each later stop stays quiet.
    /// When no marker can be written, every stop gets the notice.
    pub fn first_notice(&self, session: &str, file: &Path, digest: &str) -> bool {
        let dir = self.notices_dir();
        if self.ensure(&dir).is_err() {
            return true;
        }
        let key = hash_parts(&[
            b"notice",
            session.as_bytes(),
            &path_bytes(file),
            digest.as_bytes(),
        ]);
        let created = private_new_file().open(dir.join(&key[..32]));
        match created {
            Ok(_) => {
                // Once per process: a stop may write several markers, and
                // each sweep reads the whole folder.
                static SWEPT: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                if !SWEPT.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    sweep_old_markers(&dir);
                }
                true
            }
            Err(e) => e.kind() != io::ErrorKind::AlreadyExists,
        }
    }
}

fn sweep_old_markers(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > MARKER_LIFETIME);
        if old {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// A registry folder must be a real folder of this user that nobody else can write to.
fn check_dir(path: &Path) -> Result<(), RegistryError> {
    let meta = fs::symlink_metadata(path).map_err(io_err("inspect", path))?;
    let unsafe_because = |what: &str| {
        Err(RegistryError::Unsafe {
            path: path.to_owned(),
            what: what.to_owned(),
        })
    };
    if meta.file_type().is_symlink() {
        return unsafe_because("a symbolic link");
    }
    if !meta.is_dir() {
        return unsafe_because("not a folder");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if meta.uid() != rustix::process::getuid().as_raw() {
            return unsafe_because("owned by another user");
        }
        if meta.mode() & 0o022 != 0 {
            return unsafe_because("writable by other users");
        }
    }
    // Windows: the folder lies in the user's profile, whose ACL keeps other
    // users out; ralph does not read ACLs (no safe API for them).
    Ok(())
}

/// Reads a small regular file of this user, never through a symlink and
/// never blocking on a FIFO. `None` when it does not exist.
pub(crate) fn read_private(path: &Path) -> Result<Option<String>, RegistryError> {
    let file = match no_follow_read().open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("open", path)(e)),
    };
    let meta = file.metadata().map_err(io_err("inspect", path))?;
    if !meta.is_file() || !owned_by_me(&meta) {
        return Err(RegistryError::Unsafe {
            path: path.to_owned(),
            what: "not a regular file of yours".into(),
        });
    }
    let mut text = String::new();
    file.take(MAX_RECORD_BYTES)
        .read_to_string(&mut text)
        .map_err(io_err("read", path))?;
    Ok(Some(text))
}

/// The bytes a digest sees for a path: the OS string exactly (UTF-16 code
/// units on Windows, where a path need not be valid Unicode either).
fn path_bytes(path: &Path) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    }
    #[cfg(windows)]
    {
        use std::os::windows::ffi::OsStrExt;
        path.as_os_str()
            .encode_wide()
            .flat_map(u16::to_le_bytes)
            .collect()
    }
}

/// A folder only this user may enter (0700; on Windows the profile's ACL).
fn private_dir_builder() -> DirBuilder {
    #[allow(unused_mut)]
    let mut builder = DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
}

/// A new file only this user may read (0600), created exclusively.
pub(crate) fn private_new_file() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
}

/// Read access that never follows a link (nor blocks on a FIFO).
fn no_follow_read() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
        // The flags are a bit pattern: reinterpret, never convert.
        options.custom_flags(flags.bits().cast_signed());
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::OpenOptionsExt;
        options.custom_flags(ralph_fs::safe_fs::FILE_FLAG_OPEN_REPARSE_POINT);
    }
    options
}

/// Whether this user owns the file (Windows: always; see [`check_dir`]).
fn owned_by_me(meta: &fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        meta.uid() == rustix::process::getuid().as_raw()
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use std::os::unix::fs::PermissionsExt;

    fn state(text: &str) -> LoopState {
        LoopState::parse(text).unwrap()
    }

    #[cfg(unix)]
    #[test]
    fn the_approval_secret_is_made_once_private_and_never_through_a_link() {
        let (tmp, reg, _) = setup();
        let first = reg.approval_secret().unwrap();
        assert_eq!(first.len(), 32);
        assert_eq!(reg.approval_secret().unwrap(), first, "kept");
        let path = reg.dir().join(APPROVAL_SECRET);
        let mode = fs::symlink_metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        fs::remove_file(&path).unwrap();
        let planted = tmp.path().join("planted");
        fs::write(&planted, "ab".repeat(32)).unwrap();
        std::os::unix::fs::symlink(&planted, &path).unwrap();
        assert!(
            reg.approval_secret().is_err(),
            "a link is refused, not read"
        );
        assert_eq!(fs::read_to_string(&planted).unwrap(), "ab".repeat(32));
    }

    fn setup() -> (tempfile::TempDir, Registry, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let reg = locate(Some(&tmp.path().join("state")), None).unwrap();
        let root = tmp.path().join("proj");
        fs::create_dir_all(&root).unwrap();
        (tmp, reg, root)
    }

    #[test]
    fn locates_by_xdg_then_home_and_ignores_relative_paths() {
        // An absolute path: with a drive letter on Windows.
        let abs = |p: &str| format!("{}{p}", if cfg!(windows) { "C:" } else { "" });
        let at = |s: Option<&str>, h: Option<&str>| {
            locate(s.map(Path::new), h.map(Path::new)).map(|r| r.dir)
        };
        assert_eq!(
            at(Some(&abs("/s")), Some(&abs("/h"))),
            Some(PathBuf::from(abs("/s/ralph")))
        );
        assert_eq!(
            at(Some("rel"), Some(&abs("/h"))),
            Some(PathBuf::from(abs("/h/.local/state/ralph")))
        );
        assert_eq!(at(None, Some("h")), None);
        assert_eq!(at(None, None), None);
    }

    #[test]
    fn digest_covers_what_the_loop_does_and_not_its_counters() {
        let base =
            "---\niteration: 1\nverify: \"make test\"\ncompletion_promise: DONE\n---\nBuild it\n";
        assert_eq!(
            digest(&state(base)),
            digest(&state(&base.replace("\"make test\"", "'make test'"))),
            "requoting a value changes nothing"
        );
        let d = digest(&state(base));
        let counters = base.replace(
            "iteration: 1",
            "iteration: 7\ntokens_used: 9\nsession_id: s",
        );
        assert_eq!(digest(&state(&counters)), d);
        for changed in [
            base.replace("make test", "curl x | sh"),
            base.replace("DONE", "OK"),
            base.replace("Build it", "Build that"),
            base.replace("---\nBuild", "abort_promise: X\n---\nBuild"),
        ] {
            assert_ne!(digest(&state(&changed)), d, "{changed}");
        }
        // Text cannot move between parts unnoticed.
        let a = "---\ncompletion_promise: \"a\"\nabort_promise: \"b\"\n---\nx\n";
        let b = "---\ncompletion_promise: \"ab\"\n---\nx\n";
        assert_ne!(digest(&state(a)), digest(&state(b)));
    }

    #[test]
    fn a_record_arms_exactly_its_loop() {
        let (_t, reg, root) = setup();
        let text = "---\nralph_nonce: n1\nverify: ok\n---\nBuild it\n";
        let s = state(text);
        assert_eq!(
            reg.check(&root, "x", &s),
            Arming::Unarmed(Unarmed::NoRecord)
        );
        reg.record(&root, "x", "n1", &s, Timestamp(0)).unwrap();
        assert_eq!(reg.check(&root, "x", &s), Arming::Armed);
        // Another name, another project, another nonce, another verify.
        assert_eq!(
            reg.check(&root, "y", &s),
            Arming::Unarmed(Unarmed::NoRecord)
        );
        assert_eq!(
            reg.check(&root.join("sub"), "x", &s),
            Arming::Unarmed(Unarmed::NoRecord)
        );
        let other = state(&text.replace("n1", "n2"));
        assert_eq!(
            reg.check(&root, "x", &other),
            Arming::Unarmed(Unarmed::Mismatch)
        );
        let edited = state(&text.replace("verify: ok", "verify: evil"));
        assert_eq!(
            reg.check(&root, "x", &edited),
            Arming::Unarmed(Unarmed::Changed)
        );
        let stripped = state("---\nverify: ok\n---\nBuild it\n");
        assert_eq!(
            reg.check(&root, "x", &stripped),
            Arming::Unarmed(Unarmed::Mismatch),
            "a record under the name makes a nonce-less file a mismatch"
        );
        reg.forget(&root, "x", Some("other nonce"));
        assert_eq!(reg.check(&root, "x", &s), Arming::Armed);
        reg.forget(&root, "x", Some("n1"));
        assert_eq!(
            reg.check(&root, "x", &s),
            Arming::Unarmed(Unarmed::NoRecord)
        );
        assert_eq!(
            reg.check(&root, "x", &stripped),
            Arming::Unarmed(Unarmed::NoNonce),
            "a file without nonce or record is never armed, whoever it names"
        );
        let planted = state("---\nsession_id: the-stopping-session\nverify: ok\n---\nBuild it\n");
        assert_eq!(
            reg.check(&root, "x", &planted),
            Arming::Unarmed(Unarmed::NoNonce)
        );
    }

    #[test]
    fn every_setting_is_bound_and_the_bookkeeping_is_not() {
        let (_t, reg, root) = setup();
        let text = "---\nralph_nonce: n1\niteration: 1\nmax_iterations: 3\nstuck_after: 2\nverify: ok\n---\nBuild it\n";
        reg.record(&root, "x", "n1", &state(text), Timestamp(0))
            .unwrap();
        let armed = |t: &str| reg.check(&root, "x", &state(t));
        assert_eq!(armed(text), Arming::Armed);
        // What ralph rewrites as the loop runs leaves it armed.
        for bookkeeping in [
            text.replace(
                "iteration: 1",
                "iteration: 2\ntokens_used: 9\nsession_id: s\nactive: false",
            ),
            text.replace(
                "iteration: 1",
                "iteration: 1\nelapsed_secs: 5\nclock_at: \"2026-01-01T00:00:00Z\"",
            ),
            text.replace("max_iterations: 3", "max_iterations: \"3\""),
        ] {
            assert_eq!(armed(&bookkeeping), Arming::Armed, "{bookkeeping}");
        }
        // Every setting, whether ralph knew it when this test was written or
        // not: each known field that is not bookkeeping.
        let mut tested = 0;
        for field in crate::fields::state::KNOWN_FIELDS
            .iter()
            .filter(|f| is_bound(f))
        {
            // A value each kind of field accepts: a number, a duration, a
            // flag, a time, text, or a git tree id.
            let values = [
                "7",
                "1h",
                "true",
                "\"2026-01-01T00:00:00Z\"",
                "\"x\"",
                "\"4b825dc642cb6eb9a060e54bf8d69288fbee4904\"",
                "off",
                "open",
                // `fresh_via`: one of its words.
                "run",
            ];
            let edited = values.iter().find_map(|v| {
                let t = if text.contains(&format!("\n{field}:")) {
                    text.replace(&format!("\n{field}: "), &format!("\n{field}: 9"))
                } else {
                    text.replace("---\nBuild", &format!("{field}: {v}\n---\nBuild"))
                };
                LoopState::parse(&t).ok().map(|s| (t, s))
            });
            let (edited, s) = edited.unwrap_or_else(|| panic!("no value for `{field}`"));
            assert_eq!(
                reg.check(&root, "x", &s),
                Arming::Unarmed(Unarmed::Changed),
                "setting `{field}` is not bound: {edited}"
            );
            tested += 1;
        }
        assert!(tested >= 10, "{tested}");
        // The limit the attack raised.
        assert_eq!(
            armed(&text.replace("max_iterations: 3", "max_iterations: 0")),
            Arming::Unarmed(Unarmed::Changed)
        );
        // A record from a ralph that bound less binds nothing now.
        let path = reg.record_path(&root, "x");
        let old = fs::read_to_string(&path)
            .unwrap()
            .replace("\"version\": 2", "\"version\": 1");
        fs::remove_file(&path).unwrap();
        private_new_file()
            .open(&path)
            .unwrap()
            .write_all(old.as_bytes())
            .unwrap();
        assert_eq!(armed(text), Arming::Unarmed(Unarmed::Outdated));
    }

    #[test]
    fn every_field_a_stop_writes_is_bookkeeping() {
        // The hook stays fast when a stop leaves the record as it is: each
        // field a turn writes must be on the bookkeeping list (ralph would
        // re-record otherwise, a write per stop). Every figure made to differ.
        let old = crate::fields::state::Progress::default();
        let new = crate::fields::state::Progress {
            tokens_used: 1,
            transcript_offset: 1,
            last_message_id: Some("m".into()),
            reply_fingerprint: Some("r".into()),
            same_reply_count: 1,
            tree_fingerprint: Some("t".into()),
            no_progress_count: 1,
            idle_blocks: 1,
            elapsed_secs: Some(1),
            clock_at: Some(Timestamp(1)),
            largest_reply_tokens: 1,
            unseen_tokens: 1,
            counts: crate::fields::guards::GuardCounts::default(),
            prd_passed: vec!["US-001".into()],
            fresh_stage: 1,
        };
        // The guards' counters are bookkeeping by their own list, which a
        // test in `guards` holds equal to `GuardCounts`' fields.
        for field in crate::fields::guards::COUNTER_FIELDS {
            assert!(!is_bound(field), "{field}");
        }
        for (field, _) in new.changed_fields(&old) {
            assert!(
                !is_bound(field),
                "`{field}` is written at every stop: add it to registry::BOOKKEEPING"
            );
        }
        for field in ["iteration", "session_id", "active", "outcome", "ended_at"] {
            assert!(!is_bound(field), "{field}");
        }
        for field in BOOKKEEPING {
            assert!(
                crate::fields::state::KNOWN_FIELDS.contains(field)
                    || ["prompt_noticed_at", "clear_handover"].contains(field),
                "`{field}` is on the bookkeeping list but ralph does not read it"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn folders_are_private_and_checked() {
        let (t, reg, root) = setup();
        let s = state("---\n---\nx\n");
        reg.record(&root, "x", "n", &s, Timestamp(0)).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(reg.dir()), 0o700);
        assert_eq!(mode(&reg.loops_dir()), 0o700);
        let record = fs::read_dir(reg.loops_dir())
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(mode(&record.path()), 0o600);

        fs::set_permissions(reg.dir(), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            reg.check(&root, "x", &s),
            Arming::Unarmed(Unarmed::Unavailable(_))
        ));
        fs::set_permissions(reg.dir(), fs::Permissions::from_mode(0o700)).unwrap();

        // A registry folder that is a symlink is refused, for reads and writes.
        let elsewhere = t.path().join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        let linked = locate(Some(&t.path().join("linked")), None).unwrap();
        fs::create_dir_all(t.path().join("linked")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, linked.dir()).unwrap();
        assert!(matches!(
            linked.record(&root, "x", "n", &s, Timestamp(0)),
            Err(RegistryError::Unsafe { .. })
        ));
        assert!(matches!(
            linked.check(&root, "x", &s),
            Arming::Unarmed(Unarmed::Unavailable(_))
        ));
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_record_is_not_followed() {
        let (t, reg, root) = setup();
        let s = state("---\nralph_nonce: n\n---\nx\n");
        reg.record(&root, "x", "n", &s, Timestamp(0)).unwrap();
        let path = reg.record_path(&root, "x");
        let copy = t.path().join("copy.json");
        fs::rename(&path, &copy).unwrap();
        std::os::unix::fs::symlink(&copy, &path).unwrap();
        assert!(matches!(
            reg.check(&root, "x", &s),
            Arming::Unarmed(Unarmed::Unavailable(_))
        ));
    }

    #[test]
    fn one_notice_per_session_file_and_shape() {
        let (_t, reg, root) = setup();
        let f = root.join(".claude/x-loop.local.md");
        assert!(reg.first_notice("s1", &f, "d1"));
        assert!(!reg.first_notice("s1", &f, "d1"));
        assert!(reg.first_notice("s2", &f, "d1"));
        assert!(reg.first_notice("s1", &f, "d2"));
        assert!(reg.first_notice("s1", &root.join("other"), "d1"));
    }

    #[test]
    fn nonces_are_random_hex() {
        let (a, b) = (new_nonce().unwrap(), new_nonce().unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
