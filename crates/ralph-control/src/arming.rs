//! Arming a loop as `ralph start` and `/ralph-loop` ask for it: the options (from clap or
//! from a slash command's text, with the same checks), the `ArmRequest` they make, and the
//! text arming tells the user. The binary parses, calls, and prints what comes back.

use crate::approval::{Secret, StoryCommands};
use crate::arguments::{self, ArgumentsError};
use crate::commands::DefaultProtect;
use crate::commands::{self, ArmPrd, ArmRequest, Armed, CommandError};
use ralph_state::context::FreshVia;
use ralph_state::fields::guards::GuardSettings;
use ralph_state::fields::limit::Limit;
use ralph_state::fields::stories;
use ralph_state::messages;
use ralph_state::storage::registry::{Registry, RegistryError};
use ralph_state::storage::store::Project;
use ralph_state::time::Timestamp;

/// The loop `ralph start` and `/ralph-loop` arm when no `--name` is given.
pub(crate) const DEFAULT_NAME: &str = "ralph";

/// How a loop is armed: its name, owner, limit, promises and guards, as the command line or
/// a slash command gave them (`None`: not given).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "each is one flag of `ralph start`, as the command line gives it"
)]
pub struct ArmOptions {
    pub name: String,
    pub session_id: Option<String>,
    /// Replace an active loop of the same name or session.
    pub force: bool,
    pub max_iterations: Option<u64>,
    pub completion_promise: Option<String>,
    pub abort_promise: Option<String>,
    pub guards: GuardSettings,
    pub fresh_context: bool,
    /// `--fresh-at`: a percentage of the context window or tokens, checked.
    pub fresh_at: Option<ralph_state::context::Threshold>,
    /// `--fresh-via`: at `--fresh-at`, the user's `/clear` or a detached `ralph run`.
    pub fresh_via: FreshVia,
    /// `--prd`: the PRD's path inside the project.
    pub prd: Option<String>,
    pub notify: bool,
    pub notify_url: Option<String>,
    /// `--approve-commands CODE`: the user approved the PRD's story commands whose
    /// list has this code (`approval::StoryCommands`).
    pub approve_commands: Option<String>,
    /// `ralph run --sandbox`: the agent runs confined (not a slash-command option:
    /// only `ralph run` starts agents).
    pub sandbox: Option<ralph_state::fields::confinement::Confinement>,
    /// `--protect` (repeatable): globs of paths the agent must not change.
    pub protect: Vec<String>,
    /// `--scope` (repeatable): globs every changed path must match.
    pub scope: Vec<String>,
    /// `--unprotect` (repeatable): default protections left out.
    pub unprotect: Vec<String>,
    /// `--no-default-protect`: a gate protects nothing by default.
    pub no_default_protect: bool,
}

impl Default for ArmOptions {
    fn default() -> Self {
        Self {
            name: DEFAULT_NAME.to_owned(),
            session_id: None,
            force: false,
            max_iterations: None,
            completion_promise: None,
            abort_promise: None,
            guards: GuardSettings::default(),
            fresh_context: false,
            fresh_at: None,
            fresh_via: FreshVia::Clear,
            prd: None,
            notify: false,
            notify_url: None,
            approve_commands: None,
            sandbox: None,
            protect: Vec::new(),
            scope: Vec::new(),
            unprotect: Vec::new(),
            no_default_protect: false,
        }
    }
}

/// The task to arm, and a note for each word of a slash command's text that looks like an
/// option but is not ralph's (it stays in the task).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypedTask {
    pub prompt: String,
    pub notes: Vec<String>,
}

/// A task given as it is (on the command line or stdin): nothing to note.
impl From<String> for TypedTask {
    fn from(prompt: String) -> Self {
        Self {
            prompt,
            notes: Vec::new(),
        }
    }
}

impl ArmOptions {
    /// Applies one option found in a slash command's text, with the checks clap applies on
    /// the command line.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<(), ArgumentsError> {
        if let Some(guard) = GuardSettings::option(key) {
            return self.guards.set(guard, value);
        }
        match key {
            "name" => self.name = value.to_owned(),
            "max-iterations" => self.max_iterations = Some(arguments::check_number(key, value)?),
            "completion-promise" => self.completion_promise = Some(value.to_owned()),
            "abort-promise" => self.abort_promise = Some(value.to_owned()),
            "session-id" => self.session_id = Some(value.to_owned()),
            "force" => self.force = true,
            "fresh-context" => self.fresh_context = true,
            "fresh-via" => self.fresh_via = fresh_via(value)?,
            "fresh-at" => {
                self.fresh_at = Some(
                    ralph_state::context::Threshold::parse(value)
                        .map_err(ArgumentsError::BadFresh)?,
                );
            }
            "prd" if value.is_empty() => self.prd = Some(stories::DEFAULT_PRD.into()),
            "prd" => self.prd = Some(value.to_owned()),
            "notify" => self.notify = true,
            "notify-url" => self.notify_url = Some(value.to_owned()),
            "approve-commands" => self.approve_commands = Some(value.to_owned()),
            "no-default-protect" => self.no_default_protect = true,
            "unprotect" => {
                ralph_state::globs::check(value).map_err(|why| ArgumentsError::BadGlob {
                    option: key.to_owned(),
                    value: ralph_fs::display::line(value).into_owned(),
                    why,
                })?;
                self.unprotect.push(value.to_owned());
            }
            "protect" | "scope" => {
                ralph_state::globs::check(value).map_err(|why| ArgumentsError::BadGlob {
                    option: key.to_owned(),
                    value: ralph_fs::display::line(value).into_owned(),
                    why,
                })?;
                let list = if key == "protect" {
                    &mut self.protect
                } else {
                    &mut self.scope
                };
                if !list.iter().any(|g| g == value) {
                    list.push(value.to_owned());
                }
            }
            other => return Err(ArgumentsError::NoSuchOption(other.to_owned())),
        }
        Ok(())
    }

    /// Applies the options of a slash command's raw text (`--raw-arguments`, `/ralph-loop`);
    /// returns the task that is left.
    pub fn apply_raw(&mut self, raw: &str) -> Result<TypedTask, ArgumentsError> {
        let parsed = arguments::parse(raw)?;
        for (key, value) in &parsed.options {
            self.apply(key, value)?;
        }
        let notes = parsed
            .unknown
            .iter()
            .map(|word| {
                format!("note: `{word}` is not a ralph option; it was kept as part of the task.")
            })
            .collect();
        Ok(TypedTask {
            prompt: parsed.prompt,
            notes,
        })
    }

    /// The request to arm a loop with `prompt`; `--prd` reads the PRD now (and gives a task
    /// when none was typed). A PRD's story commands are refused unless the user approved
    /// exactly them (`--approve-commands`).
    pub fn request(
        mut self,
        project: &Project,
        prompt: String,
    ) -> Result<ArmRequest, CommandError> {
        let non_empty = |v: Option<String>| v.filter(|p| !p.trim().is_empty());
        let prd = match &self.prd {
            Some(path) => Some(commands::read_prd(project, path)?),
            None => None,
        };
        if let Some(list) = prd
            .as_ref()
            .map(|p| StoryCommands::of(&p.path, &p.stories, &Secret::of_user()))
            && !list.approved_by(self.approve_commands.as_deref())
        {
            return Err(CommandError::CommandsUnapproved {
                list: Box::new(list),
                given: self.approve_commands,
            });
        }
        let prompt = match &prd {
            Some(p) if prompt.trim().is_empty() => stories::default_task(&p.path),
            _ => prompt,
        };
        let max_iterations = Limit::new(
            self.max_iterations
                .unwrap_or(ralph_state::fields::state::DEFAULT_MAX_ITERATIONS),
        );
        let promise = non_empty(self.completion_promise.clone());
        let bounded = max_iterations.is_set() || self.guards.has_budget();
        if !bounded && promise.is_none() && prd.is_none() {
            return Err(CommandError::Unbounded);
        }
        let default_protect = self.gather_globs(project, prd.as_ref());
        let holdout_digest = held_out(project, &mut self.guards)?;
        let armed_tree = armed_tree(project, &self.protect, &self.scope)?;
        Ok(ArmRequest {
            name: self.name,
            prompt,
            max_iterations,
            completion_promise: promise,
            abort_promise: non_empty(self.abort_promise),
            session_id: self.session_id,
            guards: self.guards,
            force: self.force,
            fresh_context: self.fresh_context,
            fresh_at: self.fresh_at,
            fresh_via_run: self.fresh_via == FreshVia::Run,
            prd,
            notify: ralph_state::fields::notice::Settings {
                desktop: self.notify,
                url: non_empty(self.notify_url),
            },
            sandbox: self.sandbox,
            protect: self.protect,
            scope: self.scope,
            armed_tree,
            default_protect,
            holdout_digest,
        })
    }

    /// Each story's globs, recorded with the loop's own now (the agent can
    /// edit the PRD, not the loop's settings), then the gate's defaults;
    /// returns the defaults.
    fn gather_globs(&mut self, project: &Project, prd: Option<&ArmPrd>) -> DefaultProtect {
        fn add(list: &mut Vec<String>, globs: &[String]) {
            for glob in globs {
                if !list.contains(glob) {
                    list.push(glob.clone());
                }
            }
        }
        for story in prd.iter().flat_map(|p| &p.stories) {
            add(&mut self.protect, &story.protect);
            add(&mut self.scope, &story.scope);
        }
        let defaults = self.default_protect(project, prd.is_some());
        add(&mut self.protect, &defaults.globs);
        defaults
    }

    /// What a loop with a gate (`--verify`, `--check`, `--prd`) protects by
    /// default in a git project: the test layouts and test-runner
    /// configuration of each ecosystem found at its root
    /// (`protect_defaults`), less `--unprotect`; nothing with
    /// `--no-default-protect`, without a gate, or outside git (where
    /// `--protect` cannot compare).
    fn default_protect(&self, project: &Project, prd: bool) -> DefaultProtect {
        let gate = prd || self.guards.get("verify").is_some() || self.guards.get("check").is_some();
        let git = ralph_fs::safe_fs::kind_at(&project.root.join(".git")).is_some();
        if !gate || !git || self.no_default_protect {
            return DefaultProtect::default();
        }
        let at_root = |name: &str| {
            ralph_fs::safe_fs::kind_at(&project.root.join(name)).is_some_and(|k| k.is_file())
        };
        let found = ralph_state::protect_defaults::detect(at_root);
        DefaultProtect {
            ecosystems: found.iter().map(|e| e.name).collect(),
            globs: ralph_state::protect_defaults::globs(&found, &self.unprotect),
        }
    }
}

/// `--protect`/`--scope`: the work tree recorded now, and no protected
/// glob over a submodule (whose work tree git never compares).
fn armed_tree(
    project: &Project,
    protect: &[String],
    scope: &[String],
) -> Result<Option<ralph_fs::tree_diff::TreeSnapshot>, CommandError> {
    if protect.is_empty() && scope.is_empty() {
        return Ok(None);
    }
    let limit = ralph_fs::tree_diff::TREE_TIME_LIMIT;
    let tree = ralph_fs::tree_diff::snapshot(&project.root, limit).ok_or_else(|| {
        CommandError::NoTree(
            ralph_fs::display::line(&project.root.display().to_string()).into_owned(),
        )
    })?;
    let globs = ralph_state::globs::Globs::new(protect);
    // A glob names the submodule itself or something inside it.
    let inside = |s: &String| {
        let folder = format!("{s}/");
        globs.matches(s)
            || globs.matches(&format!("{s}/x"))
            || protect
                .iter()
                .any(|g| g.trim_start_matches("./").starts_with(&folder))
    };
    if let Some(sub) = tree.submodules.iter().find(|s| inside(s)) {
        return Err(CommandError::SubmoduleProtected(
            ralph_fs::display::line(sub).into_owned(),
        ));
    }
    Ok(Some(tree))
}

/// `--holdout DIR`: the folder made absolute and checked to lie outside the
/// project (the agent must never see it), its set's SHA-256 taken now; the
/// option then names the folder by its canonical path.
fn held_out(project: &Project, guards: &mut GuardSettings) -> Result<Option<String>, CommandError> {
    let Some(given) = guards.get("holdout").filter(|d| !d.trim().is_empty()) else {
        return Ok(None);
    };
    let given = given.to_owned();
    let refuse = |why: &str| CommandError::HeldOut {
        dir: ralph_fs::display::line(&given).into_owned(),
        why: why.to_owned(),
    };
    let path = std::path::Path::new(&given);
    if !path.is_absolute() {
        return Err(refuse("give the folder's absolute path"));
    }
    let canonical = std::fs::canonicalize(path).map_err(|e| refuse(&e.to_string()))?;
    let root = std::fs::canonicalize(&project.root).unwrap_or_else(|_| project.root.clone());
    if canonical.starts_with(&root) || root.starts_with(&canonical) {
        return Err(refuse(
            "it is inside the project (or holds it), where the agent can read it",
        ));
    }
    let digest =
        ralph_fs::gate_tree::held_out_digest(&canonical).map_err(|e| refuse(&e.to_string()))?;
    let option = GuardSettings::option("holdout").ok_or_else(|| refuse("unknown option"))?;
    guards
        .set(option, &canonical.to_string_lossy())
        .map_err(|e| refuse(&e.to_string()))?;
    Ok(Some(digest))
}

/// The story commands `options` would bind that the user has not approved (none when
/// the loop has no PRD, the PRD no command, or the code given approves them): what a
/// terminal asks about before arming. The PRD is read again when the loop is armed, and
/// the code checked against it then.
pub fn unapproved(
    project: &Project,
    options: &ArmOptions,
) -> Result<Option<StoryCommands>, CommandError> {
    let Some(path) = &options.prd else {
        return Ok(None);
    };
    let prd = commands::read_prd(project, path)?;
    let list = StoryCommands::of(&prd.path, &prd.stories, &Secret::of_user());
    Ok((!list.approved_by(options.approve_commands.as_deref())).then_some(list))
}

/// `--max-window` goes by what `ralph statusline` last saw of the plan's 5-hour window (kept
/// beside the registry): without that, the guard could never fire, so arming is refused with
/// the fix. Nothing is read unless the guard is set.
pub(crate) fn check_window(
    guards: &GuardSettings,
    registry: Option<&Registry>,
) -> Result<(), CommandError> {
    let Some(pct) = guards.get("max-window") else {
        return Ok(());
    };
    if pct.trim().parse::<u64>().is_ok_and(|p| p > 100) {
        return Err(CommandError::WindowShare(pct.to_owned()));
    }
    let seen = registry.and_then(|r| ralph_state::storage::window::load(r.dir()));
    if seen.is_none() {
        return Err(CommandError::WindowUnseen);
    }
    Ok(())
}

/// `--fresh-via clear|run`: whether a detached `ralph run` takes over at `--fresh-at`.
pub fn fresh_via(value: &str) -> Result<FreshVia, ArgumentsError> {
    match value.trim() {
        "clear" => Ok(FreshVia::Clear),
        "run" => Ok(FreshVia::Run),
        other => Err(ArgumentsError::BadFresh(format!(
            "`--fresh-via {}`: expected clear (you type /clear) or run (a detached `ralph run` takes over)",
            ralph_fs::display::line(other)
        ))),
    }
}

/// `--fresh-at 60` is a share of the session's context window, which only the status line
/// reports (`ralph statusline` keeps it per session): without it for the session that arms,
/// the hand-over could never come, so arming is refused with the fix. A token count needs no
/// window.
pub(crate) fn check_fresh(
    options: &ArmOptions,
    registry: Option<&Registry>,
) -> Result<(), CommandError> {
    if options.fresh_via == FreshVia::Run && options.fresh_at.is_none() {
        return Err(CommandError::FreshViaAlone);
    }
    let Some(ralph_state::context::Threshold::Percent(pct)) = options.fresh_at else {
        return Ok(());
    };
    let known = options.session_id.as_deref().and_then(|session| {
        let r = registry?;
        ralph_state::storage::window::load_context_windows(r.dir()).of(session)
    });
    match known {
        Some(_) => Ok(()),
        None => Err(CommandError::ContextWindowUnknown(pct)),
    }
}

/// A loop armed (or this session's identical one kept), with what to tell the user.
#[derive(Debug)]
pub struct Activation {
    pub name: String,
    pub armed: Armed,
    /// One entry per message, each possibly several lines.
    pub text: Vec<String>,
}

/// Arms the loop `options` and `task` ask for, or keeps this session's identical one:
/// `--max-window` checked first, then the PRD read, then the loop written under the lock.
/// The task's notes lead the text.
pub fn arm_and_tell(
    project: &Project,
    registry: Option<&Registry>,
    options: ArmOptions,
    task: TypedTask,
    now: Timestamp,
) -> Result<Activation, CommandError> {
    check_window(&options.guards, registry)?;
    check_fresh(&options, registry)?;
    let request = options.request(project, task.prompt)?;
    let registry = registry.ok_or(RegistryError::NoHome)?;
    let armed = commands::arm_or_keep(project, registry, &request, now)?;
    let mut text = task.notes;
    text.extend(activation(project, &request, &armed));
    Ok(Activation {
        name: request.name,
        armed,
        text,
    })
}

/// What arming tells: the loop and its owner, the state file, the guards, a PRD's stories,
/// the task and how to finish it.
pub fn activation(project: &Project, request: &ArmRequest, armed: &Armed) -> Vec<String> {
    let (path, state) = (&armed.path, &armed.state);
    let mut out = Vec::new();
    let limit = match state.max_iterations.get() {
        None => "no iteration limit".to_owned(),
        Some(n) => format!("at most {}", ralph_state::plural::iterations(n)),
    };
    let owner = state
        .session_id
        .as_deref()
        .map_or("the first session that stops claims it".to_owned(), |s| {
            format!("session {s}")
        });
    if armed.kept {
        out.push(format!(
            "🔄 Ralph loop `{}` is already armed for this session with this task and these settings (iteration {}); it was kept as it is.",
            request.name,
            state.iteration_label()
        ));
    } else {
        out.push(format!(
            "🔄 Ralph loop `{}` armed: {limit}; owner: {owner}.",
            request.name
        ));
    }
    out.push(format!(
        "State: {} · cancel: /ralph-cancel (ralph cancel) · status: /ralph-status (ralph status)",
        project.shown(path)
    ));
    let guards = messages::guard_summary(state);
    if !guards.is_empty() {
        out.push(format!("Guards: {}", guards.join(", ")));
    }
    if state.fresh_via_run {
        out.push(messages::fresh_via_run(&request.name));
    }
    if let Some(prd) = &request.prd {
        out.push(story_commands(prd));
    }
    out.extend(default_protect_line(request));
    out.extend(path_rules(request));
    out.extend(ralph_state::storage::checkpoints::at_arming(&project.root));
    let story = state
        .prd
        .as_ref()
        .and_then(|prd| ralph_core::decide::prd_turn::first_section(&project.root, prd))
        .unwrap_or_default();
    if let Some(words) = state.notify.summary() {
        out.push(format!("When it ends: {words}."));
    }
    if !state
        .session_id
        .as_deref()
        .is_some_and(ralph_state::fields::run_owner::is_run)
    {
        out.push(format!("Spends: {}.", messages::SPENDS_IN_SESSION));
    }
    out.push(format!("\nYour task:\n\n{}{story}\n", state.prompt));
    out.push(messages::how_to_finish(state).trim_end().to_owned());
    out.push(
        "When you try to stop, this same task is given back to you; your earlier work stays in the files and git history.".to_owned(),
    );
    out
}

/// What arming with `--protect` or `--scope` shows: the globs, and each
/// protected path that already differs from HEAD (it is compared with the
/// tree as it is now, so it stays as it is).
fn path_rules(request: &ArmRequest) -> Vec<String> {
    let mut out = Vec::new();
    if !request.protect.is_empty() {
        out.push(format!(
            "Protected (the agent must not change them; compared with the work tree as it is now): {}",
            ralph_fs::display::line(&request.protect.join(", "))
        ));
        let globs = ralph_state::globs::Globs::new(&request.protect);
        let dirty: Vec<&str> = request
            .armed_tree
            .as_ref()
            .map(|s| globs.matching(&s.dirty))
            .unwrap_or_default();
        if !dirty.is_empty() {
            out.push(format!(
                "⚠ Protected paths that already differ from HEAD (kept as they are now): {}",
                ralph_fs::display::line(&shown_paths(&dirty))
            ));
        }
    }
    if !request.scope.is_empty() {
        out.push(format!(
            "Scope (every path the loop changes must match): {}",
            ralph_fs::display::line(&request.scope.join(", "))
        ));
    }
    out
}

/// What `ralph run` says as it arms: the paths protected by default and
/// the files checkpoints will leave out.
pub fn run_arming_lines(project: &Project, request: &ArmRequest) -> Vec<String> {
    default_protect_line(request)
        .into_iter()
        .chain(ralph_state::storage::checkpoints::at_arming(&project.root))
        .collect()
}

/// What the gate's defaults protect, said at arming with how to narrow it.
pub(crate) fn default_protect_line(request: &ArmRequest) -> Option<String> {
    let defaults = &request.default_protect;
    if defaults.globs.is_empty() {
        return None;
    }
    let found = if defaults.ecosystems.is_empty() {
        "no test ecosystem found".to_owned()
    } else {
        format!("{} found", defaults.ecosystems.join(", "))
    };
    Some(format!(
        "Protected by default, as a gate runs ({found}): {}. A manifest among them (package.json, pyproject.toml, Cargo.toml) is compared without its dependency lists, so adding a dependency is allowed. Narrow it with --unprotect GLOB, or --no-default-protect.",
        ralph_fs::display::line(&defaults.globs.join(", "))
    ))
}

/// At most ten paths, then how many more.
pub(crate) fn shown_paths(paths: &[&str]) -> String {
    let mut shown: Vec<&str> = paths.iter().copied().take(10).collect();
    let more = paths.len().saturating_sub(shown.len());
    let tail = (more > 0).then(|| format!("and {more} more"));
    if let Some(t) = &tail {
        shown.push(t);
    }
    shown.join(", ")
}

/// What arming a `--prd` loop shows: the stories, and each command ralph would run (recorded
/// now; one added or changed later never runs).
pub fn story_commands(prd: &ArmPrd) -> String {
    let (pass, total) = stories::tally(&prd.stories);
    let mut out = format!(
        "Stories: {} ({pass} of {total} pass).",
        ralph_fs::display::line(&prd.path)
    );
    let commands: Vec<String> = prd
        .stories
        .iter()
        .filter_map(|s| {
            s.verify.as_ref().map(|c| {
                format!(
                    "  {}: {}",
                    ralph_fs::display::line(&s.id),
                    ralph_fs::display::line(c)
                )
            })
        })
        .collect();
    if let Some(t) = crate::templates::unedited(&prd.stories) {
        out.push_str(&format!(
            " These are the `{}` template's stories as `ralph init` wrote them: fill in its [placeholders] now, or the first iteration fills them from the repository.",
            t.name
        ));
    }
    if commands.is_empty() {
        out.push_str(" No story has a verify command.");
    } else {
        out.push_str(&format!(
            "\nStory commands ralph will run, as you (a story's command added or changed later never runs; arm again to approve it):\n{}",
            commands.join("\n")
        ));
    }
    if !prd.warnings.is_empty() {
        out.push_str(&format!(
            "\n`ralph prd lint` warns (armed anyway):\n{}",
            prd.warnings
                .iter()
                .map(|w| format!("  {w}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_support::project;

    #[test]
    fn apply_sets_each_option() {
        let mut o = ArmOptions::default();
        for (key, value) in [
            ("name", "docs"),
            ("max-iterations", " 7"),
            ("completion-promise", "DONE"),
            ("abort-promise", "BLOCKED"),
            ("session-id", "s-1"),
            ("force", ""),
            ("fresh-context", ""),
            ("fresh-at", "60%"),
            ("fresh-via", "run"),
            ("prd", ""),
            ("notify", ""),
            ("notify-url", "http://127.0.0.1:9/x"),
            ("stuck-after", "3"),
            ("approve-commands", "c0de"),
            ("protect", "tests/**"),
            ("protect", "ci.yml"),
            ("protect", "tests/**"),
            ("scope", "src/**"),
        ] {
            o.apply(key, value).unwrap();
        }
        assert!(o.apply("protect", "../x").is_err());
        let mut guards = GuardSettings::default();
        guards
            .set(GuardSettings::option("stuck-after").unwrap(), "3")
            .unwrap();
        assert_eq!(
            o,
            ArmOptions {
                name: "docs".into(),
                session_id: Some("s-1".into()),
                force: true,
                max_iterations: Some(7),
                completion_promise: Some("DONE".into()),
                abort_promise: Some("BLOCKED".into()),
                guards,
                fresh_context: true,
                fresh_at: Some(ralph_state::context::Threshold::Percent(60)),
                fresh_via: FreshVia::Run,
                prd: Some(stories::DEFAULT_PRD.into()),
                notify: true,
                notify_url: Some("http://127.0.0.1:9/x".into()),
                approve_commands: Some("c0de".into()),
                sandbox: None,
                protect: vec!["tests/**".into(), "ci.yml".into()],
                scope: vec!["src/**".into()],
                unprotect: Vec::new(),
                no_default_protect: false,
            }
        );
        o.apply("prd", "other/prd.json").unwrap();
        assert_eq!(o.prd.as_deref(), Some("other/prd.json"));
    }

    #[test]
    fn every_option_of_the_table_applies() {
        for (key, kind) in arguments::OPTIONS {
            let value = match kind {
                arguments::OptionKind::Number => "3",
                arguments::OptionKind::Duration => "2h",
                arguments::OptionKind::Money => "5",
                _ if *key == "fresh-at" => "60",
                _ if *key == "fresh-via" => "run",
                _ => "x",
            };
            ArmOptions::default()
                .apply(key, value)
                .unwrap_or_else(|e| panic!("--{key}: {e}"));
        }
    }

    #[test]
    fn apply_refuses_an_unknown_option_and_a_bad_number() {
        let mut o = ArmOptions::default();
        let unknown = o.apply("bogus", "1").unwrap_err();
        assert_eq!(unknown, ArgumentsError::NoSuchOption("bogus".into()));
        assert_eq!(unknown.to_string(), "unknown option --bogus");
        assert!(matches!(
            o.apply("max-iterations", "five"),
            Err(ArgumentsError::BadNumber { .. })
        ));
        assert!(matches!(
            o.apply("max-duration", "2"),
            Err(ArgumentsError::DurationUnit { .. })
        ));
        assert_eq!(o, ArmOptions::default(), "nothing set by a refusal");
    }

    #[test]
    fn raw_text_gives_the_task_and_notes_for_foreign_words() {
        let mut o = ArmOptions::default();
        let typed = o.apply_raw("add a --verbose flag").unwrap();
        assert_eq!(typed.prompt, "add a --verbose flag");
        assert_eq!(
            typed.notes,
            ["note: `--verbose` is not a ralph option; it was kept as part of the task."]
        );
        let typed = o.apply_raw("Fix it --max-iterations 4 --name x").unwrap();
        assert_eq!(typed.prompt, "Fix it");
        assert!(typed.notes.is_empty());
        assert_eq!((o.name.as_str(), o.max_iterations), ("x", Some(4)));
        assert!(o.apply_raw("t --max-iterations").is_err());
    }

    #[test]
    fn the_request_drops_blank_promises_and_defaults_the_limit() {
        let (_t, p, _r) = project();
        let o = ArmOptions {
            completion_promise: Some("  ".into()),
            notify_url: Some(String::new()),
            ..ArmOptions::default()
        };
        let req = o.request(&p, "task".into()).unwrap();
        assert_eq!(req.name, DEFAULT_NAME);
        assert_eq!(
            req.max_iterations,
            ralph_state::fields::state::Limit::new(
                ralph_state::fields::state::DEFAULT_MAX_ITERATIONS
            )
        );
        assert_eq!(req.completion_promise, None);
        assert_eq!(req.notify.url, None);
        let outside = ArmOptions {
            prd: Some("../prd.json".into()),
            ..ArmOptions::default()
        };
        assert!(matches!(
            outside.request(&p, String::new()),
            Err(CommandError::PrdOutside(_))
        ));
    }

    #[test]
    fn max_window_needs_a_share_and_a_window_seen() {
        let (_t, _p, r) = project();
        let mut guards = GuardSettings::default();
        assert!(
            check_window(&guards, None).is_ok(),
            "no guard, nothing read"
        );
        let window = GuardSettings::option("max-window").unwrap();
        guards.set(window, "101").unwrap();
        let share = check_window(&guards, Some(&r)).unwrap_err();
        assert_eq!(
            share.to_string(),
            "`--max-window 101`: a share of the window, 1 to 100; nothing was armed"
        );
        guards.set(window, "80").unwrap();
        assert!(matches!(
            check_window(&guards, Some(&r)),
            Err(CommandError::WindowUnseen)
        ));
        assert!(matches!(
            check_window(&guards, None),
            Err(CommandError::WindowUnseen)
        ));
        let seen = ralph_state::storage::window::Window {
            used_percentage: 10,
            resets_at: None,
            seen_at: 0,
        };
        ralph_state::storage::window::save(r.dir(), &seen).unwrap();
        assert!(check_window(&guards, Some(&r)).is_ok());
    }

    #[test]
    fn a_limit_of_one_reads_as_one_iteration() {
        let (_t, p, r) = project();
        let options = ArmOptions {
            max_iterations: Some(1),
            ..ArmOptions::default()
        };
        let task = TypedTask {
            prompt: "Do it".into(),
            notes: Vec::new(),
        };
        let armed = arm_and_tell(&p, Some(&r), options, task, Timestamp(0)).unwrap();
        assert!(
            armed.text[0].contains("armed: at most 1 iteration;"),
            "{:?}",
            armed.text
        );
    }

    #[test]
    fn arming_tells_the_loop_its_state_file_and_the_task() {
        let (_t, p, r) = project();
        let options = ArmOptions {
            session_id: Some("s-1".into()),
            max_iterations: Some(3),
            ..ArmOptions::default()
        };
        let task = TypedTask {
            prompt: "Do it".into(),
            notes: vec!["note: kept".into()],
        };
        let first = arm_and_tell(&p, Some(&r), options.clone(), task, Timestamp(0)).unwrap();
        assert_eq!(first.name, "ralph");
        assert!(!first.armed.kept);
        assert_eq!(first.text[0], "note: kept");
        assert_eq!(
            first.text[1],
            "🔄 Ralph loop `ralph` armed: at most 3 iterations; owner: session s-1."
        );
        assert_eq!(
            first.text[2],
            format!(
                "State: {} · cancel: /ralph-cancel (ralph cancel) · status: /ralph-status (ralph status)",
                std::path::Path::new(".claude/ralph-loop.local.md")
                    .components()
                    .collect::<std::path::PathBuf>()
                    .display()
            )
        );
        assert!(first.text.contains(&"\nYour task:\n\nDo it\n".to_owned()));
        assert!(
            first
                .text
                .last()
                .unwrap()
                .starts_with("When you try to stop"),
            "{:?}",
            first.text
        );
        let again = arm_and_tell(
            &p,
            Some(&r),
            options,
            "Do it".to_owned().into(),
            Timestamp(1),
        )
        .unwrap();
        assert!(again.armed.kept);
        assert!(
            again.text[0].starts_with("🔄 Ralph loop `ralph` is already armed for this session"),
            "{:?}",
            again.text
        );
        let no_home = arm_and_tell(
            &p,
            None,
            ArmOptions::default(),
            "x".to_owned().into(),
            Timestamp(2),
        );
        assert!(matches!(
            no_home,
            Err(CommandError::Registry(RegistryError::NoHome))
        ));
    }

    #[test]
    fn story_commands_are_listed_escaped() {
        let story = |id: &str, verify: Option<&str>| stories::Story {
            id: id.into(),
            title: String::new(),
            description: String::new(),
            criteria: Vec::new(),
            passes: false,
            priority: None,
            protect: Vec::new(),
            scope: Vec::new(),
            depends_on: Vec::new(),
            verify: verify.map(Into::into),
            blocked: None,
            concerns: Vec::new(),
        };
        let none = ArmPrd {
            path: "ralph/prd.json".into(),
            stories: vec![story("US-1", None)],
            warnings: Vec::new(),
        };
        assert_eq!(
            story_commands(&none),
            "Stories: ralph/prd.json (0 of 1 pass). No story has a verify command."
        );
        let some = ArmPrd {
            path: "ralph/prd.json".into(),
            stories: vec![story("US-1", Some("make\u{1b}[2J test"))],
            warnings: Vec::new(),
        };
        let text = story_commands(&some);
        assert!(
            text.contains("\nStory commands ralph will run, as you"),
            "{text}"
        );
        assert!(text.ends_with("\n  US-1: make\\x1b[2J test"), "{text}");
    }

    /// The exit codes stay as they were: a bad option or window share is a usage error
    /// (exit 2).
    #[test]
    fn refusals_keep_their_exit_class() {
        use ralph_fs::error::{Exit as _, ExitClass};
        assert_eq!(
            ArgumentsError::NoSuchOption("x".into()).exit_class(),
            ExitClass::Usage
        );
        assert_eq!(
            CommandError::WindowShare("101".into()).exit_class(),
            ExitClass::Usage
        );
        assert_eq!(CommandError::WindowUnseen.exit_class(), ExitClass::Usage);
    }
}
