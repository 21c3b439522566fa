//! The one way ralph runs git. A repository's configuration (`.git/config`
//! and every file it includes, under any condition) may be a stranger's, so
//! no git process ralph starts may run a program it names: every key through
//! which git executes something is overridden at the command-line scope,
//! which wins over every file, and every filter and merge driver any
//! reachable configuration file defines is blanked.
//!
//! Keys git can execute through, and what stops each:
//! - hooks (`core.hooksPath`, `.git/hooks/*`): `core.hooksPath=/dev/null`;
//! - `core.fsmonitor`: `false`;
//! - `core.pager`, `pager.<cmd>`: `--no-pager`, `GIT_PAGER=cat`;
//! - `core.editor`, `sequence.editor`: `GIT_EDITOR`/`GIT_SEQUENCE_EDITOR=true`;
//! - `gpg.program`, `gpg.<format>.program`, `gpg.ssh.defaultKeyCommand`:
//!   nothing is signed or verified (`commit.gpgSign`, `tag.gpgSign`,
//!   `push.gpgSign`, `merge.verifySignatures`, `log.showSignature` off), and
//!   the programs are blanked as well;
//! - `filter.<driver>.clean`/`smudge`/`process`: blanked per driver (a
//!   blank filter is no filter), `required` released;
//! - `merge.<driver>.driver`: blanked per driver (git then reports the file
//!   as a conflict, never as merged);
//! - `diff.external`, `diff.<driver>.command`/`textconv`: blanked, and every
//!   diff ralph runs says `--no-ext-diff --no-textconv`;
//! - transports (`core.sshCommand`, `ext::`, remote helpers, `core.gitProxy`,
//!   `credential.helper`, `core.askPass`, `core.alternateRefsCommand`, lazy
//!   fetches of a partial clone): `protocol.allow=never` and each
//!   `protocol.<name>.allow=never` (a repository's own would win otherwise),
//!   `GIT_NO_LAZY_FETCH`, `GIT_TERMINAL_PROMPT=0`, helpers and askpass
//!   blanked;
//! - automatic `gc`/`maintenance` (a detached process outliving ralph): off;
//! - submodules (their own configuration): never recursed into;
//! - replace refs (`refs/replace/`, which swap one object for another):
//!   `GIT_NO_REPLACE_OBJECTS`.
//!
//! The user's own environment and the system's and user's configuration
//! files are not the project's and stay in force (an identity, `safe.directory`).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use crate::process::{Stop, spawn_in_group, stop_group};

/// Overrides at the command-line scope, for every git process.
const HARDENING: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.askPass", ""),
    ("core.sshCommand", ""),
    ("core.alternateRefsCommand", ""),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("protocol.allow", "never"),
    // A per-protocol setting wins over `protocol.allow`: each is set too.
    ("protocol.ext.allow", "never"),
    ("protocol.file.allow", "never"),
    ("protocol.ssh.allow", "never"),
    ("protocol.git.allow", "never"),
    ("protocol.http.allow", "never"),
    ("protocol.https.allow", "never"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("push.gpgSign", "false"),
    ("merge.verifySignatures", "false"),
    ("log.showSignature", "false"),
    ("gpg.program", ""),
    ("gpg.openpgp.program", ""),
    ("gpg.x509.program", ""),
    ("gpg.ssh.program", ""),
    ("gpg.ssh.defaultKeyCommand", ""),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("status.submoduleSummary", "false"),
    ("submodule.recurse", "false"),
];

/// The environment git would otherwise take from the session: a `GIT_DIR`
/// or index set there must not change which tree is read, and no program
/// named there runs.
const FOREIGN_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_EXTERNAL_DIFF",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_PROXY_COMMAND",
];

/// The most configuration files followed through includes, and the most of
/// one `git config` listing read.
const MAX_CONFIG_FILES: usize = 64;
const MAX_LISTING_BYTES: u64 = 16 * 1024 * 1024;

/// `git -C root …`, hardened, with `overrides` (from [`driver_overrides`])
/// added after the fixed ones. Standard input is empty, standard output a
/// pipe, standard error discarded (callers that report git's message pipe
/// it themselves). git is found in an absolute folder of PATH outside
/// `root` and every folder the agent may write
/// ([`crate::process::program_outside`]); `Err` when it is in none.
pub fn command(root: &Path, overrides: &[(String, String)]) -> std::io::Result<Command> {
    let mut command = crate::process::program_outside("git", &[root])?;
    command.arg("--no-pager").arg("-C").arg(root);
    for key in FOREIGN_ENV {
        command.env_remove(key);
    }
    // Passed as GIT_CONFIG_KEY_n / VALUE_n: a driver name may hold `=`,
    // which `-c key=value` would split at.
    let all: Vec<(&str, &str)> = HARDENING
        .iter()
        .copied()
        .chain(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .collect();
    command.env("GIT_CONFIG_COUNT", all.len().to_string());
    for (i, (key, value)) in all.iter().enumerate() {
        command.env(format!("GIT_CONFIG_KEY_{i}"), key);
        command.env(format!("GIT_CONFIG_VALUE_{i}"), value);
    }
    command
        .env("GIT_OPTIONAL_LOCKS", "0") // never rewrite the index as a side effect
        .env("GIT_NO_LAZY_FETCH", "1")
        // A replace ref would let `refs/replace/` swap any object ralph
        // reads (the tree recorded at arming, a blob of it) for another.
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat")
        .env("GIT_EDITOR", "true")
        .env("GIT_SEQUENCE_EDITOR", "true")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .stdout(Stdio::piped());
    Ok(command)
}

/// Runs a git command until `deadline`, returning its stdout (at most
/// `cap` bytes, more is a failure) when it exited in time with one of
/// `ok_codes`; on time out its process group is killed.
pub fn run_until(
    mut command: Command,
    deadline: Instant,
    ok_codes: &[i32],
    cap: u64,
) -> Option<Vec<u8>> {
    let mut group = spawn_in_group(&mut command).ok()?;
    let stdout = group.child.stdout.take()?;
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let read = stdout.take(cap + 1).read_to_end(&mut out);
        let _ = sender.send(read.ok().map(|_| out));
    });
    let left = deadline.saturating_duration_since(Instant::now());
    if let Ok(out) = receiver.recv_timeout(left) {
        let status = group.child.wait().ok()?;
        let accepted = status.code().is_some_and(|c| ok_codes.contains(&c));
        out.filter(|o| accepted && (o.len() as u64) <= cap)
    } else {
        let _ = stop_group(&mut group, Stop::Kill);
        let _ = group.child.wait();
        None
    }
}

/// [`run_until`] with `input` written to the command's standard input.
pub(crate) fn run_with_input(
    mut command: Command,
    input: &[u8],
    deadline: Instant,
    cap: u64,
) -> Option<Vec<u8>> {
    let mut scratch = tempfile::tempfile().ok()?;
    std::io::Write::write_all(&mut scratch, input).ok()?;
    std::io::Seek::rewind(&mut scratch).ok()?;
    command.stdin(Stdio::from(scratch));
    run_until(command, deadline, &[0], cap)
}

/// The overrides that blank every filter and merge driver that any
/// configuration file git may read for `root` defines, whatever the
/// condition of the `includeIf` that reaches it: a condition true for one
/// command may be false for the next (`onbranch:` while a rebase or a new
/// worktree moves HEAD, `gitdir:` in a linked worktree). `None` when git
/// could not list its configuration before `deadline`.
pub fn driver_overrides(root: &Path, deadline: Instant) -> Option<Vec<(String, String)>> {
    let mut drivers = Drivers::default();
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut queue = vec![None];
    while let Some(file) = queue.pop() {
        let mut list = command(root, &[]).ok()?;
        list.args(["config", "--list", "-z", "--show-origin", "--includes"]);
        if let Some(file) = &file {
            list.arg("--file").arg(file);
        }
        // A missing included file is no configuration (git skips it too).
        let out = match run_until(list, deadline, &[0], MAX_LISTING_BYTES) {
            Some(out) => out,
            None if file.is_some() => continue,
            None => return None,
        };
        for include in drivers.read(root, &String::from_utf8_lossy(&out)) {
            if seen.len() < MAX_CONFIG_FILES && seen.insert(include.clone()) {
                queue.push(Some(include));
            }
        }
    }
    Some(drivers.blanked())
}

/// Driver names found in configuration listings.
#[derive(Default)]
struct Drivers {
    filters: BTreeSet<String>,
    merges: BTreeSet<String>,
    diffs: BTreeSet<String>,
}

impl Drivers {
    /// Takes the drivers from one `git config --list -z --show-origin`
    /// listing; returns the files its `includeIf.<condition>.path` entries
    /// name, resolved as git would (relative to the including file).
    fn read(&mut self, root: &Path, listing: &str) -> Vec<PathBuf> {
        let mut includes = Vec::new();
        let mut fields = listing.split('\0');
        while let (Some(origin), Some(entry)) = (fields.next(), fields.next()) {
            let (key, value) = entry.split_once('\n').unwrap_or((entry, ""));
            let key = key.to_ascii_lowercase();
            if let Some(rest) = key.strip_prefix("filter.") {
                self.filters.extend(subsection(rest));
            } else if let Some(rest) = key.strip_prefix("merge.") {
                self.merges.extend(subsection(rest));
            } else if let Some(rest) = key.strip_prefix("diff.") {
                self.diffs.extend(subsection(rest));
            }
            let conditional = key.starts_with("includeif.") && key.ends_with(".path");
            if conditional && let Some(origin) = origin.strip_prefix("file:") {
                includes.extend(resolve_include(root, Path::new(origin), value));
            }
        }
        includes
    }

    fn blanked(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut blank = |key: String| out.push((key, String::new()));
        for d in &self.filters {
            blank(format!("filter.{d}.clean"));
            blank(format!("filter.{d}.smudge"));
            blank(format!("filter.{d}.process"));
        }
        for d in &self.merges {
            blank(format!("merge.{d}.driver"));
        }
        for d in &self.diffs {
            blank(format!("diff.{d}.command"));
            blank(format!("diff.{d}.textconv"));
        }
        for d in &self.filters {
            out.push((format!("filter.{d}.required"), "false".to_owned()));
        }
        out
    }
}

/// The `<name>` of `<name>.<key>` (the key has no dot; the name may), when
/// there is one: `merge.ff` or `diff.external` name no driver.
fn subsection(rest: &str) -> Option<String> {
    rest.rsplit_once('.').map(|(name, _)| name.to_owned())
}

/// Where git looks for an included file: `~/` is the home folder, a
/// relative path is relative to the folder of the file that includes it
/// (itself relative to `root`, where git ran). `%(prefix)/` paths are
/// git's own installation, not a stranger's, and are left out.
fn resolve_include(root: &Path, origin: &Path, path: &str) -> Option<PathBuf> {
    if path.is_empty() || path.starts_with("%(prefix)/") {
        return None;
    }
    if let Some(rest) = path.strip_prefix("~/") {
        return Some(PathBuf::from(std::env::var_os("HOME")?).join(rest));
    }
    let path = Path::new(path);
    if path.is_absolute() {
        return Some(path.to_owned());
    }
    Some(root.join(origin).parent()?.join(path))
}

/// Whether `name` may be given to git as a branch name: git's own rules
/// for one (`git check-ref-format --branch`), and never a name that starts
/// with `-`, which git would read as an option. A name from a repository
/// (its HEAD, a planted ref) is checked before it reaches git, and is then
/// passed as `refs/heads/<name>` or after `--`/`--end-of-options` anyway.
pub fn is_branch_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with(['-', '/'])
        && !name.ends_with(['/', '.'])
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("@{")
        && !name.contains("//")
        && name != "@"
        && !name
            .chars()
            .any(|c| c.is_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
        && name
            .split('/')
            .all(|part| !part.starts_with('.') && !part.ends_with(".lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_driver_in_a_listing_is_blanked_and_conditional_includes_are_followed() {
        let listing = "file:.git/config\0filter.lfs.clean\ngit-lfs clean\0\
            file:.git/config\0merge.ff\nfalse\0\
            file:.git/config\0Merge.Ours.Driver\ntouch x\0\
            file:.git/config\0diff.a.b.textconv\nx\0\
            file:.git/config\0includeif.onbranch:ralph/**.path\nevil.cfg\0\
            file:.git/config\0include.path\nplain.cfg\0\
            command line:\0core.pager\ncat\0";
        let mut drivers = Drivers::default();
        let includes = drivers.read(Path::new("/repo"), listing);
        assert_eq!(includes, [PathBuf::from("/repo/.git/evil.cfg")]);
        let o = drivers.blanked();
        for key in [
            "filter.lfs.clean",
            "filter.lfs.smudge",
            "filter.lfs.process",
            "merge.ours.driver",
            "diff.a.b.command",
            "diff.a.b.textconv",
        ] {
            assert!(o.contains(&(key.into(), String::new())), "{key}: {o:?}");
        }
        assert!(o.contains(&("filter.lfs.required".into(), "false".into())));
        assert_eq!(o.len(), 7, "merge.ff names no driver: {o:?}");
    }

    #[test]
    fn included_paths_resolve_as_git_resolves_them() {
        let root = Path::new("/repo");
        let origin = Path::new(".git/config");
        assert_eq!(
            resolve_include(root, origin, "/etc/x"),
            Some("/etc/x".into())
        );
        assert_eq!(
            resolve_include(root, Path::new("/home/u/.gitconfig"), "more/y"),
            Some("/home/u/more/y".into())
        );
        assert_eq!(resolve_include(root, origin, "%(prefix)/etc/z"), None);
        assert_eq!(resolve_include(root, origin, ""), None);
    }

    // Needs git and sh, which the Windows tests under Wine do not have.
    #[cfg(unix)]
    #[test]
    fn a_transport_the_repository_allows_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let plain = |args: &[&str]| {
            Command::new("git")
                .arg("-C")
                .arg(root)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap()
        };
        assert!(plain(&["init", "-q"]).success());
        assert!(plain(&["config", "protocol.ext.allow", "always"]).success());
        let marker = root.join("ran");
        let url = format!("ext::sh -c touch% {}", marker.display());
        let mut hardened = command(root, &[]).unwrap();
        hardened.args(["ls-remote", &url]).stdout(Stdio::null());
        let _ = hardened.status().unwrap();
        assert!(!marker.exists(), "the ext:: transport ran");
        let _ = plain(&["ls-remote", &url]);
        assert!(
            marker.exists(),
            "the planted transport did not run even unguarded"
        );
    }

    #[test]
    fn a_name_git_would_read_as_an_option_is_no_branch_name() {
        for good in ["main", "ralph/US-1", "feature/a.b_c", "v1.2"] {
            assert!(is_branch_name(good), "{good}");
        }
        for bad in [
            "",
            "-x",
            "--exec=sh",
            "a..b",
            "a/.b",
            "a.lock",
            "a/",
            "a b",
            "a\nb",
            "a~1",
            "a^",
            "a:b",
            "@",
            "a@{1}",
            "/a",
            "a//b",
            "x\u{1b}[2J",
        ] {
            assert!(!is_branch_name(bad), "{bad:?}");
        }
    }
}
