//! Checkpoints: the work tree kept at each counted stop, so `ralph rollback`
//! can put it back; and, when a breaker or a budget ends the loop, the last
//! checkpoint whose check passed. Reached only through the seam (`mod.rs`).

use super::Extras;
use crate::decide::Observation;
use ralph_state::storage::checkpoints as kept;

/// The work tree the no-progress fingerprint waits for
/// ([`Observation::tree_pending`]), read under the lock: staged into the
/// loop's kept index when it keeps checkpoints (a `git status` of it and a
/// `git update-index` of what changed; that tree is this stop's
/// checkpoint: returned), else one `git status`.
pub(super) fn read_tree(extras: &Extras<'_>, seen: &mut Observation) -> Option<String> {
    if !seen.tree_pending {
        return None;
    }
    let Extras {
        on,
        project,
        live,
        registry,
    } = extras;
    let root = &project.root;
    let staged = on
        .checkpoints
        .then(|| kept::stage(root, *registry, &live.file.name, &live.state))
        .flatten();
    seen.tree_fingerprint = fingerprint(root, staged.as_deref());
    staged
}

/// The no-progress fingerprint of the tree `staged` at this stop, else of
/// the work tree as one `git status` reads it.
fn fingerprint(root: &std::path::Path, staged: Option<&str>) -> Option<String> {
    match staged {
        Some(tree) => Some(ralph_fs::git::staged_fingerprint(root, tree)),
        None => ralph_fs::git::working_tree(root, ralph_fs::git::STATUS_TIME_LIMIT),
    }
}

/// The paths changed since arming and this stop's checkpoint at one
/// staging, when the loop keeps checkpoints and compares paths
/// (`kept::stage_shared`), with [`read_tree`]'s fingerprint when the turn
/// waits for it: `None` when that cannot serve, and the caller reads each
/// its own way. A turn whose edit the transcript proved needs the paths
/// all the same, so the one staging serves it too (its checkpoint then
/// needs no staging of its own after the lock). When the shared staging
/// could not write the checkpoint, the kept index is staged for it here
/// only if the fingerprint waits for it, else after the lock as before.
pub(super) fn read_tree_and_paths(
    extras: &Extras<'_>,
    seen: &mut Observation,
) -> Option<Option<String>> {
    let Extras {
        on,
        project,
        live,
        registry,
    } = extras;
    if !on.checkpoints {
        return None;
    }
    let rules = &live.state.paths;
    let armed = rules.armed_tree.as_deref()?;
    let excludes = rules.armed_excludes.as_deref();
    let root = &project.root;
    let (name, state) = (&live.file.name, &live.state);
    let shared = kept::stage_shared(root, *registry, name, state, armed, excludes)?;
    let staged = match shared.tree {
        Some(tree) => Some(tree),
        None if seen.tree_pending => kept::stage(root, *registry, name, state),
        None => None,
    };
    if seen.tree_pending {
        seen.tree_fingerprint = fingerprint(root, staged.as_deref());
    }
    super::paths::observe_known(project, live, shared.changed, seen);
    Some(staged)
}

/// The checkpoint a counted stop keeps: the tree staged at this stop, the
/// previous one when the turn ran no tool, else staged after the lock.
pub(super) fn keep(
    extras: &Extras<'_>,
    staged: Option<String>,
    no_tool_ran: bool,
) -> Option<kept::Keep> {
    let source = match staged {
        Some(tree) => kept::Source::Staged(tree),
        None if no_tool_ran => kept::Source::Previous,
        None => kept::Source::Stage,
    };
    plan(extras, source)
}

fn plan(extras: &Extras<'_>, source: kept::Source) -> Option<kept::Keep> {
    let state = &extras.live.state;
    kept::plan(
        &extras.project.root,
        extras.registry,
        &extras.live.file.name,
        state,
        state.iteration,
        source,
    )
}

/// What an ending knows of the loop's checkpoints.
#[derive(Default)]
pub(super) struct Green {
    /// Whether this iteration's checkpoint will be kept (after the lock).
    pub(super) kept: bool,
    /// The last iteration whose `--check` passed and whose checkpoint exists.
    pub(super) iteration: Option<u64>,
    /// The sentence that names it, with the command that puts it back.
    pub(super) sentence: Option<String>,
}

/// The last green checkpoint at an ending (read before the log moves into
/// the history); nothing when the loop keeps no checkpoints.
pub(super) fn last_green(extras: &Extras<'_>, seen: &Observation) -> Green {
    if !extras.on.checkpoints {
        return Green::default();
    }
    // This iteration's checkpoint is kept after the lock (the turn's effect).
    let this_kept = plan(extras, kept::Source::Stage).is_some();
    let passed = seen.check.as_ref().is_some_and(|c| c.passed);
    let name = &extras.live.file.name;
    let state = &extras.live.state;
    let iteration = kept::last_green(
        extras.project,
        extras.registry,
        name,
        state,
        passed,
        this_kept,
    );
    Green {
        kept: this_kept,
        iteration,
        sentence: iteration.map(|n| kept::green_sentence(name, n)),
    }
}
