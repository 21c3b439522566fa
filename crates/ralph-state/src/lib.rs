//! A ralph loop and its file, and where loops and their records live: what
//! every front of ralph (the Stop hook in `ralph-core`, the commands in
//! `ralph-control`, `ralph run`, the report, `ralph watch`) reads and
//! writes. Internal to ralph: its API is the `ralph` command and the
//! plugin, not this crate; `pub` here names only what another of ralph's
//! crates uses.
//!
//! Lowest first; a module imports only from its own folder and the ones
//! listed before it (`tests/tidy.rs` checks):
//! - leaves: `time`, `money`, `json_edit`, `globs`, `plural`, `context`:
//!   timestamps and durations; exact dollars; span-exact JSON edits;
//!   `--protect`/`--scope` globs; counts in words; how full the agent's
//!   context is.
//! - `protect_defaults`: what a loop with a gate protects by default, per
//!   ecosystem, and a manifest compared without its dependency lists.
//! - `fields`: what a loop file says. Its text split into frontmatter and
//!   body, each field read into a typed value (limits, guards, outcome,
//!   owner, sandbox, notifications, PRD stories), and `fields::state`, the
//!   whole file as one typed `LoopState`.
//! - `storage`: where loops and their records live. The project's loop
//!   files and their lock (`store`), the per-user arming record
//!   (`registry`), receipts, checkpoints, the usage window, the
//!   environment a command runs in, and a fleet's worktrees and story
//!   records (`fleet`).
//! - a loop's life: its proven rewrites (`rewrite`), the one place that
//!   writes a loop file (`lifecycle`), the one classification of a
//!   project's loop files as armed, paused, foreign or unreadable (`scan`),
//!   which loop a session drives (`ownership`), a breaker's hand-over
//!   (`handover`), the words around it (`messages`), the gate's sandbox
//!   setting (`gate_sandbox`), and `error`, the one error of reading,
//!   rewriting and adopting a loop file.

pub mod context;
pub mod error;
pub mod fields;
pub mod gate_sandbox;
pub mod globs;
pub mod handover;
pub mod json_edit;
pub mod lifecycle;
pub mod messages;
pub mod money;
pub mod ownership;
pub mod plural;
pub mod protect_defaults;
pub mod rewrite;
pub mod scan;
pub mod storage;
pub mod time;

/// What other crates' tests build on (the `test-support` feature, on in
/// their dev-dependencies only).
#[allow(clippy::unwrap_used, clippy::missing_panics_doc)] // test scaffolding: a failure is the test's
#[cfg(any(test, feature = "test-support"))]
pub mod test_support {
    /// A project (with its `.claude/`) and a registry of its own in a temporary
    /// folder, for unit tests; the folder lives as long as the guard.
    pub fn project() -> (
        tempfile::TempDir,
        crate::storage::store::Project,
        crate::storage::registry::Registry,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("p/.claude")).unwrap();
        let project = crate::storage::store::Project {
            root: tmp.path().join("p"),
        };
        let registry =
            crate::storage::registry::locate(Some(&tmp.path().join("state")), None).unwrap();
        (tmp, project, registry)
    }

    /// Arms a plain loop `name` (the task "task", at most `max_iterations`, driven by
    /// `session`) as `ralph start` would, written and recorded in `registry`: what this
    /// crate's and the Stop hook's unit tests arm (the commands' own arming is tested in
    /// `ralph-control`).
    pub fn arm_plain(
        project: &crate::storage::store::Project,
        registry: &crate::storage::registry::Registry,
        name: &str,
        session: Option<&str>,
        max_iterations: u64,
    ) -> crate::fields::state::LoopState {
        arm_task(
            project,
            registry,
            name,
            session,
            max_iterations,
            None,
            "task",
        )
    }

    /// [`arm_plain`] with a completion promise and a task of the caller's.
    pub fn arm_task(
        project: &crate::storage::store::Project,
        registry: &crate::storage::registry::Registry,
        name: &str,
        session: Option<&str>,
        max_iterations: u64,
        promise: Option<&str>,
        task: &str,
    ) -> crate::fields::state::LoopState {
        let promise = promise.map_or("null".to_owned(), crate::fields::frontmatter::quote);
        let nonce = crate::storage::registry::new_nonce().unwrap();
        let text = format!(
            "---\nactive: true\niteration: 1\nsession_id: {}\nmax_iterations: {max_iterations}\ncompletion_promise: {promise}\nstarted_at: \"{}\"\nralph_nonce: \"{nonce}\"\n---\n\n{task}\n",
            session.unwrap_or_default(),
            crate::time::Timestamp(0)
        );
        let state = crate::fields::state::LoopState::parse(&text).unwrap();
        let root = crate::storage::registry::canonical_root(project).unwrap();
        registry
            .record(&root, name, &nonce, &state, crate::time::Timestamp(0))
            .unwrap();
        let lock = project.lock().unwrap();
        crate::lifecycle::create(&lock, &project.loop_path(name), &text).unwrap();
        state
    }

    /// A project in `tmp` with the loop `l` armed for session `s1` (at most 5 iterations,
    /// the promise `DONE`, the task "Fix the parser"), and the environment a hook of that
    /// project sees at second 60, with `block_cap`.
    pub fn armed_environment(
        tmp: &tempfile::TempDir,
        block_cap: u64,
    ) -> crate::storage::environment::Environment {
        let root = tmp.path().join("p");
        std::fs::create_dir_all(root.join(".claude")).unwrap();
        let state = tmp.path().join("state");
        let registry = crate::storage::registry::locate(Some(&state), None).unwrap();
        let project = crate::storage::store::Project { root: root.clone() };
        arm_task(
            &project,
            &registry,
            "l",
            Some("s1"),
            5,
            Some("DONE"),
            "Fix the parser",
        );
        crate::storage::environment::Environment {
            project_dir: Some(root),
            process_cwd: None,
            home: None,
            state_home: Some(state),
            block_cap,
            now: crate::time::Timestamp(60),
            courier: None,
        }
    }
}
