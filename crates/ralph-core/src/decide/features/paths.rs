//! `--protect` and `--scope`: the paths changed since arming, compared at
//! each stop of an active loop that has them (for both drivers), and what
//! they held at a completion, for its receipt. Reached only through the
//! seam (`mod.rs`).

use crate::decide::{self, ChangedPaths, Observation};
use ralph_state::fields::state::{LoopState, PathRules};
use ralph_state::lifecycle::Loop;
use ralph_state::storage::checkpoints;
use ralph_state::storage::receipt::PathsHeld;
use ralph_state::storage::registry::Registry;
use ralph_state::storage::store::Project;

/// The paths changed since arming, and the protected manifests among them
/// whose only change is in their dependency lists.
pub(super) fn observe(
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
    seen: &mut Observation,
) {
    let rules = &live.state.paths;
    seen.changed_paths = changed_paths(project, live, registry);
    seen.dependency_only = dependency_only(&project.root, rules, &seen.changed_paths);
}

/// [`observe`], with the paths changed since arming already read (by the
/// staging a checkpoint shares, `checkpoints::read_tree_and_paths`).
pub(super) fn observe_known(
    project: &Project,
    live: &Loop,
    changed: Vec<String>,
    seen: &mut Observation,
) {
    seen.changed_paths = ChangedPaths::Known(changed);
    seen.dependency_only = dependency_only(&project.root, &live.state.paths, &seen.changed_paths);
}

/// The paths that differ from the work tree at arming, or `Unknown` when
/// git could not tell (or no tree was recorded): through the arming's own
/// comparison index, else a copy of the user's index.
fn changed_paths(project: &Project, live: &Loop, registry: Option<&Registry>) -> ChangedPaths {
    let (root, rules) = (&project.root, &live.state.paths);
    let limit = ralph_fs::tree_diff::TREE_TIME_LIMIT;
    rules
        .armed_tree
        .as_deref()
        .and_then(|tree| {
            let excludes = rules.armed_excludes.as_deref();
            let name = &live.file.name;
            checkpoints::changed_since(root, registry, name, &live.state, tree, excludes)
                .or_else(|| ralph_fs::tree_diff::changed_since(root, tree, excludes, limit))
        })
        .map_or(ChangedPaths::Unknown, ChangedPaths::Known)
}

/// The changed, protected manifests whose only change is in their
/// dependency lists (`protect_defaults::dependency_only_change`): the file
/// as armed (from the armed tree) against the file now.
fn dependency_only(
    root: &std::path::Path,
    rules: &PathRules,
    changed: &ChangedPaths,
) -> Vec<String> {
    use ralph_state::protect_defaults::{dependency_only_change, is_manifest};
    let (ChangedPaths::Known(paths), Some(tree)) = (changed, rules.armed_tree.as_deref()) else {
        return Vec::new();
    };
    let protect = ralph_state::globs::Globs::new(&rules.protect);
    let limit = ralph_fs::tree_diff::TREE_TIME_LIMIT;
    paths
        .iter()
        .filter(|p| is_manifest(p) && protect.matches(p))
        .filter(|p| {
            let before = ralph_fs::tree_diff::file_in_tree(root, tree, p, limit);
            let after = ralph_fs::safe_fs::read_text(&root.join(p.as_str()), 8 * 1024 * 1024);
            match (before, after) {
                (Some(before), Ok(after)) => {
                    dependency_only_change(p, &String::from_utf8_lossy(&before), &after)
                }
                _ => false,
            }
        })
        .cloned()
        .collect()
}

/// What `--protect` and `--scope` held at a completion, for its receipt
/// (`None` when the paths were not compared).
pub(super) fn held(state: &LoopState, seen: &Observation) -> Option<PathsHeld> {
    let rules = &state.paths;
    let ChangedPaths::Known(changed) = &seen.changed_paths else {
        return None;
    };
    let (protected, outside) =
        decide::path_violations_but(state, &seen.changed_paths, &seen.dependency_only)?;
    Some(PathsHeld {
        protect: rules.protect.clone(),
        scope: rules.scope.clone(),
        armed_tree: rules.armed_tree.clone().unwrap_or_default(),
        changed: changed.clone(),
        protect_held: protected.is_empty(),
        scope_held: outside.is_empty(),
    })
}
