//! Where a loop's gates run: `--verify`, `--check` and a story's `verify`
//! run in a snapshot of the work tree (ralph-fs's `gate_tree.rs`) kept in
//! the loop's gate folder outside the project (`gates/<key>/` in the
//! per-user state folder), with every protected path as it was at arming
//! (but a manifest whose only change is in its dependency lists, the
//! comparison's own rule), the held-out set copied in, and the setup step
//! run there first when the snapshot changed since it last passed. A
//! project that is not a git work tree has no snapshot: its gates run in
//! the project folder, as before.
//!
//! What the folder keeps from gate to gate: the files of the tree are
//! written again wherever they differ; every other file there (what the
//! setup step made, a build's caches, what a gate wrote) stays, so warm
//! gates stay fast. The agent's own ignored files never get there; but a
//! gate runs the agent's code, and what that code writes into the folder
//! (a file in the setup's virtualenv, say) is still there at the next
//! gate, until the setup step runs again and rewrites it, or not.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ralph_fs::gate::{self, Verification};
use ralph_fs::gate_jail::GateConfinement;
use ralph_state::fields::guards::Guards;
use ralph_state::fields::state::PathRules;
use ralph_state::storage::receipt::GateRan;
use ralph_state::storage::registry::Registry;

/// The marker of the last setup that passed, in the gate folder.
const SETUP_MARK: &str = "setup-passed";

/// Where a loop's gates run, and what goes there.
pub struct Place<'a> {
    pub root: &'a Path,
    /// The loop's gate folder; `Err`: why there is none (the gate fails).
    folder: Result<PathBuf, String>,
    guards: &'a Guards,
    paths: &'a PathRules,
    /// How every command run there is confined (`ralph_fs::gate_jail`).
    pub confinement: GateConfinement,
}

impl<'a> Place<'a> {
    /// The place of the loop `name`'s gates (its folder created).
    pub fn of(
        root: &'a Path,
        registry: Option<&Registry>,
        name: &str,
        guards: &'a Guards,
        paths: &'a PathRules,
        confinement: GateConfinement,
    ) -> Self {
        let canonical = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned());
        let folder = match registry {
            Some(r) => r.gate_place(&canonical, name).map_err(|e| e.to_string()),
            None => Err("no per-user state folder (HOME and XDG_STATE_HOME are unset)".into()),
        };
        Self {
            root,
            folder,
            guards,
            paths,
            confinement,
        }
    }

    /// The place of the loop `live`'s gates in `root`, confined as its
    /// settings say.
    pub(crate) fn of_loop(
        root: &'a Path,
        registry: Option<&Registry>,
        live: &'a ralph_state::lifecycle::Loop,
    ) -> Self {
        let state = &live.state;
        let confinement =
            ralph_state::gate_sandbox::confinement(&state.guards, state.sandbox.is_some());
        Self::of(
            root,
            registry,
            &live.file.name,
            &state.guards,
            &state.paths,
            confinement,
        )
    }
}

/// The folder a gate runs in, prepared, or the verdict of a gate that
/// could not run (the snapshot, the held-out set or the setup failed); and
/// how it ran.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub dir: Result<PathBuf, Verification>,
    pub ran: GateRan,
    /// How the gate is confined there.
    pub confinement: GateConfinement,
}

fn ready(place: &Place<'_>, dir: &Path, ran: GateRan) -> Prepared {
    Prepared {
        dir: Ok(dir.to_owned()),
        ran,
        confinement: place.confinement.clone(),
    }
}

fn failed(place: &Place<'_>, verdict: Verification, ran: GateRan) -> Prepared {
    Prepared {
        dir: Err(verdict),
        ran,
        confinement: place.confinement.clone(),
    }
}

/// Prepares the place for this stop's gates: the snapshot within `limit`
/// (the gate's own time limit: a first snapshot of a large tree writes
/// every file), counted as time in gates.
pub fn prepare(place: &Place<'_>, limit: Duration) -> Prepared {
    gate::counted(|| prepare_within(place, limit))
}

fn prepare_within(place: &Place<'_>, limit: Duration) -> Prepared {
    let guards = &place.guards;
    let mut ran = GateRan {
        setup: guards.gate_setup.clone(),
        held_out: guards.holdout.clone(),
        held_out_sha256: guards.holdout_digest.clone(),
        ..GateRan::default()
    };
    if !ralph_fs::checkpoint::in_repository(place.root) && !in_work_tree(place.root) {
        if guards.holdout.is_some() {
            let why = "held-out checks need the gate's snapshot, and this project is not in a git work tree";
            return failed(place, not_run(why), ran);
        }
        return setup(place, place.root, None, ran);
    }
    let folder = match &place.folder {
        Ok(folder) => folder.clone(),
        Err(why) => return failed(place, not_run(&format!("no gate folder: {why}")), ran),
    };
    let protect = ralph_state::globs::Globs::new(&place.paths.protect);
    let new_dependencies = dependency_only_manifests(place.root, place.paths, &protect);
    let protected = |p: &str| {
        !protect.is_empty() && protect.matches(p) && !new_dependencies.iter().any(|m| m == p)
    };
    let armed = place
        .paths
        .armed_tree
        .as_deref()
        .filter(|_| !place.paths.protect.is_empty())
        .map(|tree| ralph_fs::gate_tree::Baseline {
            tree,
            protected: &protected,
        });
    let held_out = match (&guards.holdout, &guards.holdout_digest) {
        (Some(dir), Some(sha256)) => Some(ralph_fs::gate_tree::HeldOut {
            dir: Path::new(dir),
            sha256,
        }),
        (Some(_), None) => {
            let why = "the held-out set has no digest recorded at arming; arm the loop again";
            return failed(place, not_run(why), ran);
        }
        _ => None,
    };
    let request = ralph_fs::gate_tree::SnapshotRequest {
        root: place.root,
        place: &folder,
        armed,
        held_out,
        limit,
    };
    match ralph_fs::gate_tree::prepare(&request) {
        Ok(done) => {
            ran.tree = Some(done.tree.clone());
            ran.restored = done.restored;
            setup(place, &done.dir, Some((&folder, &done.tree)), ran)
        }
        Err(e) => failed(
            place,
            not_run(&format!("the gate's snapshot could not be prepared: {e}")),
            ran,
        ),
    }
}

/// Whether `root` lies in a git work tree below its top (a project in a
/// monorepo's folder): `.git` in a folder above.
/// The protected manifests at the root whose only change since arming is
/// in their dependency lists (`protect_defaults::dependency_only_change`,
/// the comparison's own rule): the gate builds with the dependencies the
/// agent added, so these go to the snapshot as they are now.
fn dependency_only_manifests(
    root: &Path,
    paths: &PathRules,
    protect: &ralph_state::globs::Globs,
) -> Vec<String> {
    use ralph_state::protect_defaults::{MANIFESTS, dependency_only_change};
    let Some(tree) = paths.armed_tree.as_deref() else {
        return Vec::new();
    };
    let limit = ralph_fs::tree_diff::TREE_TIME_LIMIT;
    MANIFESTS
        .iter()
        .filter(|m| protect.matches(m))
        .filter(|m| {
            let before = ralph_fs::tree_diff::file_in_tree(root, tree, m, limit);
            let now = ralph_fs::safe_fs::read_text(&root.join(m), 8 * 1024 * 1024);
            match (before, now) {
                (Some(before), Ok(now)) => {
                    dependency_only_change(m, &String::from_utf8_lossy(&before), &now)
                }
                _ => false,
            }
        })
        .map(|m| (*m).to_owned())
        .collect()
}

fn in_work_tree(root: &Path) -> bool {
    root.ancestors()
        .skip(1)
        .any(ralph_fs::checkpoint::in_repository)
}

/// Runs the setup step in `dir` when one is set and (with a snapshot) the
/// tree changed since it last passed there.
fn setup(place: &Place<'_>, dir: &Path, tree: Option<(&Path, &str)>, mut ran: GateRan) -> Prepared {
    let guards = &place.guards;
    let Some(command) = guards.gate_setup.as_deref() else {
        return ready(place, dir, ran);
    };
    let mark = tree.map(|(folder, tree)| {
        let text = format!("{} {tree}\n", ralph_fs::fingerprint::fingerprint(command));
        (folder.join(SETUP_MARK), text)
    });
    let done_before = mark.as_ref().is_some_and(|(path, text)| {
        ralph_fs::safe_fs::read_text(path, 4096).is_ok_and(|t| &t == text)
    });
    if done_before {
        return ready(place, dir, ran);
    }
    ran.setup_ran = true;
    let timeout = Duration::from_secs(guards.gate_setup_timeout_secs);
    let verdict = gate::run(command, dir, timeout, &place.confinement);
    if !verdict.passed {
        let status = format!(
            "the gate setup `{}` failed: {}",
            ralph_fs::display::line(command),
            verdict.status
        );
        return failed(place, Verification { status, ..verdict }, ran);
    }
    if let Some((path, text)) = mark {
        // Best effort: without the mark the step runs again next time.
        let _ = ralph_fs::safe_fs::replace_unsynced(&path, text.as_bytes());
    }
    ready(place, dir, ran)
}

/// A gate that could not run: failed, with why as its status and output.
fn not_run(why: &str) -> Verification {
    Verification {
        passed: false,
        status: format!("not run: {why}"),
        output_tail: why.to_owned(),
        ..Verification::default()
    }
}

/// Runs `command` as a gate in a place prepared by [`prepare`]: its
/// verdict, the end of its output, and how it ran.
pub fn run_keeping(
    prepared: Prepared,
    command: &str,
    timeout: Duration,
) -> (Verification, Vec<u8>, GateRan) {
    match prepared.dir {
        Ok(dir) => {
            let (verdict, output) =
                gate::run_keeping(command, &dir, timeout, &prepared.confinement);
            (verdict, output, prepared.ran)
        }
        Err(verdict) => (verdict, Vec::new(), prepared.ran),
    }
}

/// `ralph receipt --recheck`: the receipt's gate run again where a loop's
/// gate runs, in the loop's snapshot (its setup step and held-out set as
/// the receipt names them, its protected paths as at arming), never over
/// the project folder's ignored files.
pub fn recheck(
    registry: Option<&Registry>,
    root: &Path,
    receipt: &ralph_state::storage::receipt::Receipt,
    timeout: Duration,
) -> ralph_state::storage::receipt::Recheck {
    let confinement = ralph_state::gate_sandbox::of_receipt(receipt);
    let ran = receipt.gate.clone().unwrap_or_default();
    let guards = Guards {
        gate_setup: ran.setup,
        gate_setup_timeout_secs: ralph_state::fields::guards::DEFAULT_GATE_SETUP_TIMEOUT,
        holdout: ran.held_out,
        holdout_digest: ran.held_out_sha256,
        ..Guards::default()
    };
    let paths = receipt
        .paths
        .as_ref()
        .map_or_else(PathRules::default, |p| PathRules {
            protect: p.protect.clone(),
            scope: p.scope.clone(),
            armed_tree: Some(p.armed_tree.clone()).filter(|t| !t.is_empty()),
            armed_excludes: None,
        });
    let place = Place::of(root, registry, &receipt.name, &guards, &paths, confinement);
    ralph_state::storage::receipt::recheck_with(receipt, root, |command| {
        run_keeping(prepare(&place, timeout), command, timeout).0
    })
}
