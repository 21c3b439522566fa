//! What the CLI does to loops: arm, cancel, pause, resume and adopt them.
//! Every change happens under the project lock, with atomic writes, so a
//! command racing a Stop hook never loses an update or revives a loop.

use std::path::PathBuf;

use ralph_fs::display;
use ralph_state::error::LoopFileError;
use ralph_state::fields::frontmatter::{quote, scalar};
use ralph_state::fields::outcome::Outcome;
use ralph_state::fields::state::LoopState;
use ralph_state::lifecycle::{self, LogEntry, Logged, Loop, Tell};
use ralph_state::scan::{LoopEntry, Scan};
use ralph_state::storage::registry::{self, Registry, RegistryError};
use ralph_state::storage::store::{self, LoopFile, Project, ProjectLock, StoreError};
use ralph_state::time::Timestamp;

/// The texts say what happened; how to go on with the CLI (which flag to
/// give) is the binary's to add.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A loop file refused a rewrite or an adoption; the error names the file.
    #[error(transparent)]
    LoopFile(#[from] LoopFileError),
    #[error(
        "a loop named `{name}` {is} ({path}), {whose}",
        is = if *.paused { "already exists, paused" } else { "is already active" },
        whose = owner_words(.owner.as_deref())
    )]
    NameTaken {
        name: String,
        path: PathBuf,
        owner: Option<String>,
        /// The loop is paused (not running), whoever owned it.
        paused: bool,
    },
    /// The name asked for is taken by a loop file not armed on this machine.
    #[error(
        "a loop file named `{name}` is here ({path}) but was not armed on this machine; it stays inert. Read it and take it over with `ralph adopt --name {name}`, replace it with --force, or choose another --name"
    )]
    NameTakenByForeign { name: String, path: PathBuf },
    #[error("this session already drives the loop `{name}`; one session runs one loop at a time")]
    SessionBusy { name: String },
    #[error("the prompt is empty: give the task as arguments or on stdin")]
    EmptyPrompt,
    #[error("`{0}` is not a valid loop name: use letters, digits, `-` and `_`")]
    BadName(String),
    /// A promise given with its tags can never be said: the agent would have to write the
    /// tags twice over.
    #[error(
        "`--{option} {value}`: give only the text between the tags, e.g. `--{option} {inner}`; the agent writes <promise>{inner}</promise> around it. Nothing was armed"
    )]
    PromiseWithTags {
        option: &'static str,
        value: String,
        inner: String,
    },
    #[error("no loop named `{0}` is active (see `ralph status`)")]
    NoSuchLoop(String),
    /// `ralph rollback`, `ralph resume --add-*`: why not, in words.
    #[error("{0}")]
    Recover(String),
    /// `ralph log --name`: no loop of that name, live or ended, and no log left of one.
    #[error("no loop named `{0}` (see `ralph status`)")]
    NotLogged(String),
    #[error(transparent)]
    NotifyUrl(#[from] ralph_state::fields::notice::UrlError),
    #[error("several loops are active ({0})")]
    Ambiguous(String),
    #[error("{path}: {message}")]
    Unreadable { path: PathBuf, message: String },
    #[error("{0}. It was left as it is; fix or remove it by hand")]
    Untouched(String),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("{path} changed while you read it; nothing was adopted")]
    ChangedMeanwhile { path: PathBuf, name: String },
    #[error("{0}; nothing was armed")]
    Prd(#[from] ralph_state::fields::stories::PrdError),
    #[error(
        "--prd={0}: the PRD must be a path inside the project, such as ralph/prd.json (relative, no `..`); nothing was armed"
    )]
    PrdOutside(String),
    /// `ralph adopt --name`: no loop file of that name here, armed or not.
    #[error("no loop named `{}` here (see `ralph status`)", display::line(.0))]
    NotHere(String),
    /// `ralph adopt` without a name, and more than one loop to choose from.
    #[error("several loops here are not armed on this machine ({}); name one with --name", .0.join(", "))]
    SeveralUnarmed(Vec<String>),
    /// `ralph adopt`: the loop file chosen does not read. Every value from
    /// the file is escaped to one line.
    #[error(
        "{}: {}; a loop file that does not read cannot be adopted. Fix it, or cancel it with `ralph cancel --name {}`",
        display::line(.path),
        display::line(.why),
        display::line(.name)
    )]
    UnreadableToAdopt {
        path: String,
        why: String,
        name: String,
    },
    #[error(
        "--protect and --scope compare the work tree with a git tree recorded at arming, and none could be recorded: {0} is not in a git work tree, or git did not answer in 30 s; nothing was armed"
    )]
    NoTree(String),
    #[error(
        "`--holdout {dir}`: {why}; held-out checks are a folder outside the project, read at arming (its SHA-256 recorded) and copied into the gate's snapshot only; nothing was armed"
    )]
    HeldOut { dir: String, why: String },
    #[error(
        "`--protect` covers the submodule {0}: git records a submodule as its commit, so ralph cannot see a change in its work tree, and the gate's snapshot holds it as an empty folder; protect paths outside submodules; nothing was armed"
    )]
    SubmoduleProtected(String),
    #[error("`--max-window {0}`: a share of the window, 1 to 100; nothing was armed")]
    WindowShare(String),
    #[error(
        "`--max-window` pauses the loop by the plan's 5-hour window as `ralph statusline` last saw it, and it has seen none yet: set `ralph statusline` as Claude Code's status line (README, \"Status line\"; only subscription plans report the window), let it refresh once, then arm again; nothing was armed"
    )]
    WindowUnseen,
    #[error(
        "`--fresh-at {0}` is a share of this session's context window, and ralph has not seen its size: set `ralph statusline` as Claude Code's status line (README, \"Status line\"), let one turn pass so it refreshes, then arm again from that session; or give tokens instead (`--fresh-at 150k`). Nothing was armed"
    )]
    ContextWindowUnknown(u64),
    #[error(
        "`--fresh-via` says how a loop goes on in a fresh context at `--fresh-at`, which was not given; nothing was armed"
    )]
    FreshViaAlone,
    #[error(
        "`{0}` still holds the example stories `ralph init` wrote (\"EXAMPLE ONLY\"); nothing was armed. Replace them with your own stories (docs/prd.md), then arm again"
    )]
    ExamplePrd(String),
    /// The PRD has findings that `ralph prd lint` counts as errors (one a line).
    #[error(
        "`{file}` does not pass `ralph prd lint`; nothing was armed. Fix these, then arm again:\n{findings}"
    )]
    PrdLint { file: String, findings: String },
    /// `ralph prd import`: the Markdown file has no heading that names a story.
    #[error(
        "`{0}` has no story heading such as `## US-001: Title`; nothing was written. Give each story a heading that starts with its id (docs/prd.md, \"Importing a Markdown PRD\")"
    )]
    NoStoriesInMarkdown(String),
    /// `ralph prd import`: the PRD it would write exists.
    #[error("`{0}` exists; nothing was written. Pass --force to replace it, or --output FILE")]
    PrdExists(String),
    #[error(
        "`--max-iterations 0` with no completion promise, no --prd and no budget arms a loop that only a breaker or you could end; nothing was armed. Give it an end: `--completion-promise DONE` (with `--verify CMD` to check it), `--prd FILE`, a budget (`--max-tokens N`, `--max-cost USD`, `--max-duration 2h`), or an iteration limit such as `--max-iterations 20`"
    )]
    Unbounded,
    /// A PRD's story commands the user has not approved (`given`: a code that does not
    /// match them); the text lists them and says how to approve.
    #[error("{}", .list.refusal(.given.as_deref()))]
    CommandsUnapproved {
        list: Box<crate::approval::StoryCommands>,
        given: Option<String>,
    },
    /// `(name, why)` of each loop a cancel could not end.
    #[error("could not cancel:\n{}", not_cancelled(.0))]
    NotCancelled(Vec<(String, String)>),
}

/// The loops a cancel could not end, one a line.
fn not_cancelled(failed: &[(String, String)]) -> String {
    let list: Vec<String> = failed
        .iter()
        .map(|(name, why)| format!("  `{name}`: {why}"))
        .collect();
    list.join("\n")
}

/// A name, prompt, URL or window share the user typed is wrong: a usage error; the rest fail.
impl ralph_fs::error::Exit for CommandError {
    fn exit_class(&self) -> ralph_fs::error::ExitClass {
        match self {
            Self::BadName(_)
            | Self::EmptyPrompt
            | Self::NotifyUrl(_)
            | Self::PromiseWithTags { .. }
            | Self::WindowShare(_)
            | Self::WindowUnseen
            | Self::ContextWindowUnknown(_)
            | Self::FreshViaAlone
            | Self::Unbounded
            | Self::ExamplePrd(_)
            | Self::PrdLint { .. }
            | Self::NoStoriesInMarkdown(_)
            | Self::PrdExists(_)
            | Self::CommandsUnapproved { .. }
            | Self::HeldOut { .. }
            | Self::SubmoduleProtected(_) => ralph_fs::error::ExitClass::Usage,
            _ => ralph_fs::error::ExitClass::Failure,
        }
    }
}

/// Whose a loop is, for messages: "owned by session X" or "not claimed yet".
fn owner_words(owner: Option<&str>) -> String {
    let run = owner.map(|o| (o, ralph_state::fields::run_owner::RunOwner::parse(o)));
    match run {
        Some((o, Some(run))) if run.is_gone() => {
            format!("last driven by `ralph run` ({o}), which has ended")
        }
        Some((o, Some(_))) => format!("driven by `ralph run` ({o})"),
        Some((o, None)) => format!("owned by session {o}"),
        None => "not claimed by any session yet".to_owned(),
    }
}

/// The protections a gate added by default, and the ecosystems that gave them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DefaultProtect {
    pub ecosystems: Vec<&'static str>,
    pub globs: Vec<String>,
}

/// Everything `ralph start` writes into a new loop.
#[derive(Debug, Clone, Default)]
pub struct ArmRequest {
    pub name: String,
    pub prompt: String,
    pub max_iterations: ralph_state::fields::limit::Limit,
    pub completion_promise: Option<String>,
    pub abort_promise: Option<String>,
    pub session_id: Option<String>,
    pub guards: ralph_state::fields::guards::GuardSettings,
    pub force: bool,
    /// Gemini CLI: clear the model's history before each iteration.
    pub fresh_context: bool,
    /// `--fresh-at`: hand over to a fresh context at this fill.
    pub fresh_at: Option<ralph_state::context::Threshold>,
    /// `--fresh-via run`: a detached `ralph run` takes over at `fresh_at`.
    pub fresh_via_run: bool,
    /// `--prd`: the PRD as read at arming (`read_prd`).
    pub prd: Option<ArmPrd>,
    /// `--notify`, `--notify-url`: how the user is told the loop ended.
    pub notify: ralph_state::fields::notice::Settings,
    /// `ralph run --sandbox`: how every agent process runs confined.
    pub sandbox: Option<ralph_state::fields::confinement::Confinement>,
    /// `--protect`, `--scope`: globs, and the work tree they are compared with.
    pub protect: Vec<String>,
    pub scope: Vec<String>,
    pub armed_tree: Option<ralph_fs::tree_diff::TreeSnapshot>,
    /// What a gate protects by default (within `protect`), for the arming text.
    pub default_protect: DefaultProtect,
    /// `--holdout`: the SHA-256 of the held-out set at arming.
    pub holdout_digest: Option<String>,
}

/// A loop's PRD at arming: its path and its stories, whose commands are
/// recorded with the loop (only those ever run).
#[derive(Debug, Clone, Default)]
pub struct ArmPrd {
    pub path: String,
    pub stories: Vec<ralph_state::fields::stories::Story>,
    /// What `ralph prd lint` warns about in it (one line each), shown at arming.
    pub warnings: Vec<String>,
}

/// Reads the PRD a loop is armed with, through `safe_fs`.
pub(crate) fn read_prd(project: &Project, path: &str) -> Result<ArmPrd, CommandError> {
    if !ralph_state::fields::stories::inside_project(path) {
        return Err(CommandError::PrdOutside(
            ralph_fs::display::line(path).into_owned(),
        ));
    }
    let prd = ralph_state::fields::state::PrdLoop {
        path: path.to_owned(),
        commands: String::new(),
        criteria: None,
    };
    let (stories, findings) = ralph_core::decide::prd_turn::read_and_lint(&project.root, &prd)?;
    if crate::templates::unedited(&stories)
        .is_some_and(|t| t.name == crate::templates::EXAMPLE_ONLY)
    {
        return Err(CommandError::ExamplePrd(
            ralph_fs::display::line(path).into_owned(),
        ));
    }
    use ralph_state::fields::prd_lint::Severity;
    let lines = |severity: Severity| -> Vec<String> {
        findings
            .iter()
            .filter(|f| f.severity == severity)
            .map(ralph_state::fields::prd_lint::Finding::line)
            .collect()
    };
    let errors = lines(Severity::Error);
    if !errors.is_empty() {
        return Err(CommandError::PrdLint {
            file: ralph_fs::display::line(path).into_owned(),
            findings: errors.join("\n"),
        });
    }
    Ok(ArmPrd {
        path: path.to_owned(),
        stories,
        warnings: lines(Severity::Warning),
    })
}

pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The text of a new loop file, in the reference layout plus our fields;
/// `nonce` binds it to its record in the per-user registry.
pub fn render(req: &ArmRequest, nonce: &str, now: Timestamp) -> String {
    let mut fm = vec![
        "active: true".to_owned(),
        "iteration: 1".to_owned(),
        format!(
            "session_id: {}",
            req.session_id.as_deref().map(scalar).unwrap_or_default()
        ),
        format!("max_iterations: {}", req.max_iterations.count()),
        format!(
            "completion_promise: {}",
            req.completion_promise
                .as_deref()
                .map_or("null".to_owned(), quote)
        ),
        format!("started_at: {}", quote(&now.to_string())),
    ];
    let mut opt = |key: &str, value: Option<String>| {
        if let Some(v) = value {
            fm.push(format!("{key}: {v}"));
        }
    };
    opt("abort_promise", req.abort_promise.as_deref().map(quote));
    for (field, value) in req.guards.fields() {
        opt(field, Some(value));
    }
    opt(
        "fresh_context",
        req.fresh_context.then(|| "true".to_owned()),
    );
    opt("fresh_at", req.fresh_at.map(|t| quote(&t.render())));
    opt("fresh_via", req.fresh_via_run.then(|| "run".to_owned()));
    if let Some(prd) = &req.prd {
        opt("prd", Some(quote(&prd.path)));
        let commands = ralph_state::fields::stories::record_commands(&prd.stories);
        opt("prd_commands", Some(quote(&commands)));
        let criteria = ralph_state::fields::stories::record_criteria(&prd.stories);
        opt("prd_criteria", Some(quote(&criteria)));
        let passed = ralph_core::decide::prd_turn::passed_field(&prd.stories);
        opt("prd_passed", Some(quote(&passed)));
    }
    for (field, value) in req.notify.fields() {
        opt(field, Some(value));
    }
    for (field, value) in req
        .sandbox
        .iter()
        .flat_map(ralph_state::fields::confinement::Confinement::fields)
    {
        opt(field, Some(value));
    }
    let globs =
        |list: &[String]| (!list.is_empty()).then(|| quote(&ralph_state::globs::join(list)));
    opt("protect", globs(&req.protect));
    opt("scope", globs(&req.scope));
    opt(
        "armed_tree",
        req.armed_tree.as_ref().map(|s| quote(&s.tree)),
    );
    opt(
        "armed_excludes",
        req.armed_tree
            .as_ref()
            .and_then(|s| s.excludes.as_deref())
            .map(quote),
    );
    opt("holdout_digest", req.holdout_digest.as_deref().map(quote));
    opt(registry::NONCE_FIELD, Some(quote(nonce)));
    format!(
        "---\n{}\n---\n\n{}\n",
        fm.join("\n"),
        req.prompt.trim_matches(['\n', '\r'])
    )
}

/// Arms a loop and records it in the registry, so that the hook drives it.
/// Returns its file and parsed state.
pub fn arm(
    project: &Project,
    registry: &Registry,
    req: &ArmRequest,
    now: Timestamp,
) -> Result<(PathBuf, LoopState), CommandError> {
    arm_or_keep(project, registry, req, now).map(|armed| (armed.path, armed.state))
}

/// What [`arm_or_keep`] did.
#[derive(Debug)]
pub struct Armed {
    pub path: PathBuf,
    pub state: LoopState,
    /// The same session asked for the same loop again (say, after Esc un-sent its
    /// `/ralph-loop` on screen): the live loop was kept as it is, nothing was written.
    pub kept: bool,
}

/// Whether two loops were armed with the same task and settings (limits, promises,
/// guards, gate), whatever their counters say.
fn same_request(a: &LoopState, b: &LoopState) -> bool {
    a.prompt == b.prompt
        && a.max_iterations == b.max_iterations
        && a.completion_promise == b.completion_promise
        && a.abort_promise == b.abort_promise
        && a.guards == b.guards
        && a.fresh_context == b.fresh_context
        && a.sandbox == b.sandbox
        && a.paths.protect == b.paths.protect
        && a.paths.scope == b.paths.scope
}

/// [`arm`], idempotent for the session that armed it: asking again for the very loop this
/// session already drives (active, recorded as armed here, same task and settings) keeps it
/// and says so, rather than refusing with advice that cannot work.
pub(crate) fn arm_or_keep(
    project: &Project,
    registry: &Registry,
    req: &ArmRequest,
    now: Timestamp,
) -> Result<Armed, CommandError> {
    let checked = checked_request(req)?;
    let req = checked.as_ref().unwrap_or(req);
    let nonce = registry::new_nonce()?;
    let (text, state) = new_loop_text(project, req, &nonce, now)?;
    let lock = project.lock()?;
    let path = project.loop_path(&req.name);
    // The last word of each loop `--force` ended, sent once the lock is let
    // go, whether or not the new loop then arms.
    let mut tells = Vec::new();
    let armed = match make_room(&lock, project, registry, req, &state, now, &mut tells) {
        Err(e) => Err(e),
        Ok(Some(kept)) => return Ok(kept),
        Ok(None) => registry::canonical_root(project)
            .map_err(CommandError::from)
            .and_then(|root| Ok(registry.record(&root, &req.name, &nonce, &state, now)?))
            .and_then(|()| Ok(lifecycle::create(&lock, &path, &text)?)),
    };
    drop(lock);
    send_all(tells);
    armed?;
    ralph_state::storage::checkpoints::prune(project, Some(registry));
    Ok(Armed {
        path,
        state,
        kept: false,
    })
}

/// Refuses a request that cannot be armed (a bad name, an empty task, a promise with its
/// tags); the request with its notification URL checked (trimmed) when it has one, as the
/// URL is recorded checked or the loop is not armed.
fn checked_request(req: &ArmRequest) -> Result<Option<ArmRequest>, CommandError> {
    if !valid_name(&req.name) {
        return Err(CommandError::BadName(req.name.clone()));
    }
    if req.prompt.trim().is_empty() {
        return Err(CommandError::EmptyPrompt);
    }
    let checked = match &req.notify.url {
        Some(url) => {
            let mut c = req.clone();
            c.notify.url = Some(ralph_state::fields::notice::check_url(url)?);
            Some(c)
        }
        None => None,
    };
    check_promise("completion-promise", req.completion_promise.as_deref())?;
    check_promise("abort-promise", req.abort_promise.as_deref())?;
    Ok(checked)
}

/// The new loop file's text and its state as read back from it: refused when it would be
/// longer than a loop file may be or would not read back.
fn new_loop_text(
    project: &Project,
    req: &ArmRequest,
    nonce: &str,
    now: Timestamp,
) -> Result<(String, LoopState), CommandError> {
    let text = render(req, nonce, now);
    if text.len() as u64 > ralph_fs::safe_fs::LOOP_FILE_CAP {
        return Err(CommandError::Unreadable {
            path: project.loop_path(&req.name),
            message: format!(
                "the task is too long: a loop file is at most {} bytes; put the details in a file and point the prompt at it",
                ralph_fs::safe_fs::LOOP_FILE_CAP
            ),
        });
    }
    let state = LoopState::parse(&text).map_err(|e| CommandError::Unreadable {
        path: project.loop_path(&req.name),
        message: format!("the new loop would not read back: {e}"),
    })?;
    Ok((text, state))
}

/// Clears the way for the new loop, under the lock: each loop under its name or driven by
/// its session is ended as replaced with `--force`; without it, the first one found is
/// kept (`Some`, when it is the very loop asked for) or refuses the new loop.
fn make_room(
    lock: &ProjectLock,
    project: &Project,
    registry: &Registry,
    req: &ArmRequest,
    state: &LoopState,
    now: Timestamp,
    tells: &mut Vec<Tell>,
) -> Result<Option<Armed>, CommandError> {
    for entry in Scan::read(project, Some(registry))?.entries {
        if entry.file().name != req.name && !same_session(&entry, req) {
            continue;
        }
        if !req.force {
            return keep_or_refuse(project, &entry, req, state).map(Some);
        }
        let (_, tell) = end(
            lock,
            project,
            Some(registry),
            &entry,
            Outcome::Cancelled,
            "replaced by a new loop (--force)",
            now,
        )?;
        tells.extend(tell);
    }
    Ok(None)
}

/// The loops of this user's that `ralph start --force` for `name` (and `session`) would
/// end as replaced, as `make_room` finds them: when each began (`None`: its file says
/// not). Empty when the force replaces no live loop of the user's.
pub fn forced_over(
    project: &Project,
    registry: &Registry,
    name: &str,
    session: Option<&str>,
) -> Vec<Option<Timestamp>> {
    // Unreadable: as if a loop of unknown age were in the way (the terminal is asked for).
    let Ok(_lock) = project.lock() else {
        return vec![None];
    };
    let Ok(scan) = Scan::read(project, Some(registry)) else {
        return vec![None];
    };
    scan.entries
        .iter()
        .filter_map(|entry| {
            let ours = entry.ours()?;
            let in_the_way =
                entry.file().name == name || (session.is_some() && entry.session_id() == session);
            in_the_way.then_some(ours.state.started_at)
        })
        .collect()
}

/// Whether `entry` is driven by the session asking. Only a loop armed here is driven by a
/// session: a file no record vouches for (planted, copied, edited) names whatever session
/// it likes and stays inert, so it never makes this session busy.
fn same_session(entry: &LoopEntry, req: &ArmRequest) -> bool {
    req.session_id.is_some()
        && entry.ours().is_some()
        && entry.session_id() == req.session_id.as_deref()
}

/// Without `--force`, a loop in the new one's way (`entry`, under its name or driven by
/// its session): kept when it is this session's loop under that name, armed with the same
/// task and settings (`state`); refused otherwise, saying why.
fn keep_or_refuse(
    project: &Project,
    entry: &LoopEntry,
    req: &ArmRequest,
    state: &LoopState,
) -> Result<Armed, CommandError> {
    let path = project.loop_path(&req.name);
    let same_name = entry.file().name == req.name;
    let same_session = same_session(entry, req);
    if let LoopEntry::Foreign { live, .. } = entry {
        // The name is taken by a file this user did not arm: say so, and how to read
        // and take it over, or replace it.
        return Err(CommandError::NameTakenByForeign {
            name: live.file.name.clone(),
            path,
        });
    }
    if same_name
        && same_session
        && let LoopEntry::Armed(live) = entry
        && same_request(&live.state, state)
    {
        return Ok(Armed {
            path,
            state: live.state.clone(),
            kept: true,
        });
    }
    // This session's own loop, under the name asked for or another: another name
    // would be refused too, so the advice is to end or replace it.
    Err(if same_name && !same_session {
        CommandError::NameTaken {
            name: req.name.clone(),
            path,
            owner: entry
                .session_id()
                .map(|s| ralph_fs::display::line(s).into_owned()),
            paused: matches!(entry, LoopEntry::Paused(_)),
        }
    } else {
        CommandError::SessionBusy {
            name: entry.file().name.clone(),
        }
    })
}

/// Refuses a promise written with its `<promise>` tags (or any part of them): the text
/// between the tags is what the agent must say, so a tag inside can never match.
fn check_promise(option: &'static str, value: Option<&str>) -> Result<(), CommandError> {
    let Some(value) = value else { return Ok(()) };
    let lower = value.to_ascii_lowercase();
    if !lower.contains("<promise") && !lower.contains("</promise") {
        return Ok(());
    }
    let mut inner = value.to_owned();
    for tag in ["<promise>", "</promise>"] {
        while let Some(at) = inner.to_ascii_lowercase().find(tag) {
            inner.replace_range(at..at + tag.len(), "");
        }
    }
    let inner = inner.trim();
    Err(CommandError::PromiseWithTags {
        option,
        value: ralph_state::messages::escape_controls(value),
        inner: if inner.is_empty() {
            "DONE".to_owned()
        } else {
            ralph_state::messages::escape_controls(inner)
        },
    })
}

/// Ends a live loop: records the outcome in the file, then moves it (and its
/// log) into the history, and forgets its registry record. Returns the
/// history record's path, and the loop's last word to send once the lock is
/// let go ([`send_all`]).
fn end(
    lock: &ProjectLock,
    project: &Project,
    registry: Option<&Registry>,
    entry: &LoopEntry,
    outcome: Outcome,
    why: &str,
    now: Timestamp,
) -> Result<(PathBuf, Option<Tell>), CommandError> {
    let text = match entry {
        LoopEntry::Unreadable {
            text: None, why, ..
        } => return Err(CommandError::Untouched(why.clone())),
        _ => entry.text().unwrap_or_default(),
    };
    Ok(lifecycle::end_file(
        lock,
        project,
        registry,
        entry.file(),
        text,
        entry.state(),
        lifecycle::Ending { outcome, why, now },
    )?)
}

/// Which live loops a command without `--name` means: the one this session
/// owns, else the only one there is.
fn pick<'a>(
    lives: &'a [LoopEntry],
    name: Option<&str>,
    session: Option<&str>,
) -> Result<Vec<&'a LoopEntry>, CommandError> {
    if let Some(name) = name {
        return lives
            .iter()
            .find(|l| l.file().name == name)
            .map(|l| vec![l])
            .ok_or_else(|| CommandError::NoSuchLoop(name.to_owned()));
    }
    if let Some(session) = session {
        let owned: Vec<&LoopEntry> = lives
            .iter()
            .filter(|l| l.session_id() == Some(session))
            .collect();
        if !owned.is_empty() {
            return Ok(owned);
        }
    }
    match lives {
        [] => Ok(Vec::new()),
        [only] => Ok(vec![only]),
        _ => Err(CommandError::Ambiguous(
            lives
                .iter()
                .map(|l| l.file().name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

/// The names of the loops [`pick`] chooses among `lives`.
pub(crate) fn pick_entries(
    lives: &[LoopEntry],
    name: Option<&str>,
    session: Option<&str>,
) -> Result<Vec<String>, CommandError> {
    Ok(pick(lives, name, session)?
        .into_iter()
        .map(|l| l.file().name.clone())
        .collect())
}

/// Whether there is no loop at all, checked before taking the lock so that a
/// command with nothing to do leaves no trace (no `.claude/ralph/` appears).
fn nothing_to_do(project: &Project, name: Option<&str>) -> Result<bool, CommandError> {
    if !project.loop_files()?.is_empty() {
        return Ok(false);
    }
    match name {
        Some(name) => Err(CommandError::NoSuchLoop(name.to_owned())),
        None => Ok(true),
    }
}

/// What `cancel` did: the loops ended, and those it could not end.
#[derive(Debug, Default)]
pub struct Cancelled {
    /// `(name, iteration, record)` for each loop ended.
    pub ended: Vec<(String, u64, PathBuf)>,
    /// `(name, why)` for each chosen loop that could not be ended.
    pub failed: Vec<(String, String)>,
}

/// Cancels loops, each on its own: one that cannot be ended (unreadable,
/// unarchivable) is reported in `failed` and the others still end.
pub fn cancel(
    project: &Project,
    registry: Option<&Registry>,
    name: Option<&str>,
    all: bool,
    session: Option<&str>,
    now: Timestamp,
) -> Result<Cancelled, CommandError> {
    let mut done = Cancelled::default();
    if nothing_to_do(project, name)? {
        return Ok(done);
    }
    let lock = project.lock()?;
    let lives = Scan::read(project, registry)?.entries;
    let chosen: Vec<&LoopEntry> = if all {
        lives.iter().collect()
    } else {
        pick(&lives, name, session)?
    };
    let mut tells = Vec::new();
    for entry in chosen {
        if let Some(run) = driven_by_an_ancestor(entry) {
            done.failed.push((
                entry.file().name.clone(),
                format!(
                    "refused: this `ralph cancel` runs inside the `ralph run` (pid {}) that drives the loop, as its agent does; the agent cannot end its own loop. Cancel it from another terminal, or press Ctrl-C in the run",
                    run.pid
                ),
            ));
            continue;
        }
        match end(
            &lock,
            project,
            registry,
            entry,
            Outcome::Cancelled,
            "cancelled by the user",
            now,
        ) {
            Ok((record, tell)) => {
                let iteration = entry.state().map_or(0, |s| s.iteration);
                done.ended
                    .push((entry.file().name.clone(), iteration, record));
                tells.extend(tell);
            }
            Err(e) => done.failed.push((entry.file().name.clone(), e.to_string())),
        }
    }
    drop(lock);
    send_all(tells);
    Ok(done)
}

/// Sends each loop's last word, after the project's lock is let go.
fn send_all(tells: Vec<Tell>) {
    for tell in tells {
        tell.send(Some(ralph_notify::send));
    }
}

/// The `ralph run` that drives `entry`, when this process runs under it
/// (the run's agent, or a process it started).
fn driven_by_an_ancestor(
    entry: &LoopEntry,
) -> Option<ralph_state::fields::run_owner::RunOwner<'_>> {
    let run = ralph_state::fields::run_owner::RunOwner::parse(entry.session_id()?)?;
    run.is_ancestor().then_some(run)
}

/// Ends the loop `name` as `outcome` if `driver` still owns it (`ralph run`
/// ending what it drives: denied, failed). Returns its iteration and the
/// history record, or `None` when it is gone or someone else owns it now.
pub fn end_driven(
    project: &Project,
    registry: Option<&Registry>,
    name: &str,
    driver: &str,
    outcome: Outcome,
    why: &str,
    now: Timestamp,
) -> Result<Option<(u64, PathBuf)>, CommandError> {
    let lock = project.lock()?;
    let lives = Scan::read(project, registry)?.entries;
    let Some(entry) = lives
        .iter()
        .find(|l| l.file().name == name && l.session_id() == Some(driver))
    else {
        return Ok(None);
    };
    let (record, tell) = end(&lock, project, registry, entry, outcome, why, now)?;
    let iteration = entry.state().map_or(0, |s| s.iteration);
    drop(lock);
    send_all(tell.into_iter().collect());
    Ok(Some((iteration, record)))
}

/// The task of each loop named that was armed here, as a resumed loop's
/// first turn needs it: its prompt and how to finish it. A loop file this
/// user did not arm never gives its prompt to the agent.
pub fn tasks_of(project: &Project, registry: Option<&Registry>, names: &[String]) -> String {
    let Ok(scan) = Scan::read(project, registry) else {
        return String::new();
    };
    let tasks: Vec<String> = scan
        .entries
        .iter()
        .filter_map(|entry| match entry {
            LoopEntry::Armed(live) if names.contains(&live.file.name) => Some(format!(
                "Your task (Ralph loop `{}`):\n\n{}\n\n{}",
                live.file.name,
                live.state.prompt,
                ralph_state::messages::how_to_finish(&live.state).trim_end()
            )),
            _ => None,
        })
        .collect();
    tasks.join("\n\n")
}

/// Pauses (`active: false`) or resumes loops; returns the names changed.
/// Only a loop armed here is resumed: a file this user did not arm stays as
/// it is (pausing one is harmless, and always allowed).
pub fn set_active(
    project: &Project,
    registry: Option<&Registry>,
    name: Option<&str>,
    all: bool,
    session: Option<&str>,
    active: bool,
    now: Timestamp,
) -> Result<Vec<String>, CommandError> {
    if nothing_to_do(project, name)? {
        return Ok(Vec::new());
    }
    let lock = project.lock()?;
    // One scan under one lock, `--all` included: a checkout of thousands of
    // loop files costs one read of each.
    let lives = Scan::read(project, registry)?.entries;
    let chosen: Vec<&LoopEntry> = if all {
        lives.iter().collect()
    } else {
        pick(&lives, name, session)?
    };
    let mut changed = Vec::new();
    for entry in chosen {
        // A file that does not read or parse is never rewritten.
        let Some(current) = (if active { entry.ours() } else { entry.live() }) else {
            continue;
        };
        let state = &current.state;
        if state.active == active {
            continue;
        }
        current.write(&lock, &[("active", active.to_string())])?;
        let (word, why) = if active {
            (Logged::Resume, "resumed by the user")
        } else {
            (Logged::Pause, "paused by the user")
        };
        LogEntry::new(now, word, why)
            .iteration(state.iteration)
            .append(project, &current.file.name);
        changed.push(current.file.name.clone());
    }
    Ok(changed)
}

/// Adopts a loop file deliberately: `shown` is the text the user read and
/// accepted. Under the lock, if the file is still exactly that text, a new
/// nonce is written into it and the loop is recorded as armed here.
pub fn adopt(
    project: &Project,
    registry: &Registry,
    name: &str,
    shown: &str,
    now: Timestamp,
) -> Result<LoopState, CommandError> {
    let path = project.loop_path(name);
    let lock = project.lock()?;
    let text =
        store::read_to_string(&path).map_err(|_| CommandError::NoSuchLoop(name.to_owned()))?;
    if text != shown {
        return Err(CommandError::ChangedMeanwhile {
            path,
            name: name.to_owned(),
        });
    }
    let root = registry::canonical_root(project)?;
    let shown = Loop {
        file: LoopFile {
            name: name.to_owned(),
            path: path.clone(),
        },
        state: LoopState::parse(&text).map_err(|e| CommandError::Unreadable {
            path: path.clone(),
            message: e.to_string(),
        })?,
        text,
    };
    let adopted = shown.adopt(&lock, registry, &root, now)?;
    LogEntry::new(now, Logged::Adopt, "adopted by the user (ralph adopt)")
        .iteration(adopted.state.iteration)
        .append(project, name);
    Ok(adopted.state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::report;
    use ralph_state::storage::registry::{Arming, Unarmed};

    use crate::test_support::project;

    #[test]
    fn one_scan_tells_armed_paused_foreign_and_unreadable_apart() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("p/.claude")).unwrap();
        let project = Project {
            root: tmp.path().join("p"),
        };
        let registry = registry::locate(Some(&tmp.path().join("state")), None).unwrap();
        for (name, session) in [("a-running", "s1"), ("b-paused", "s2")] {
            let req = crate::ArmRequest {
                name: name.into(),
                prompt: "task".into(),
                max_iterations: 5.into(),
                session_id: Some(session.into()),
                ..crate::ArmRequest::default()
            };
            crate::arm(&project, &registry, &req, Timestamp(0)).unwrap();
        }
        crate::set_active(
            &project,
            Some(&registry),
            Some("b-paused"),
            false,
            None,
            false,
            Timestamp(1),
        )
        .unwrap();
        // A copy of an armed file under another name is not armed.
        let armed = std::fs::read_to_string(project.loop_path("a-running")).unwrap();
        std::fs::write(project.loop_path("c-copied"), &armed).unwrap();
        std::fs::write(project.loop_path("d-broken"), "not a loop file").unwrap();

        let scan = Scan::read(&project, Some(&registry)).unwrap();
        let kinds: Vec<(&str, &str)> = scan
            .entries
            .iter()
            .map(|e| {
                let kind = match e {
                    LoopEntry::Armed(_) => "armed",
                    LoopEntry::Paused(_) => "paused",
                    LoopEntry::Foreign { .. } => "foreign",
                    LoopEntry::Unreadable { text: Some(_), .. } => "unparsed",
                    LoopEntry::Unreadable { text: None, .. } => "unread",
                };
                (e.file().name.as_str(), kind)
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("a-running", "armed"),
                ("b-paused", "paused"),
                ("c-copied", "foreign"),
                ("d-broken", "unparsed"),
            ]
        );
        assert!(matches!(
            &scan.entries[2],
            LoopEntry::Foreign {
                why: Unarmed::NoRecord,
                ..
            }
        ));
        assert_eq!(scan.ours().count(), 2);
        // Without a registry nothing is ours.
        let none = Scan::read(&project, None).unwrap();
        assert_eq!(none.ours().count(), 0);
        assert!(matches!(
            &none.entries[0],
            LoopEntry::Foreign {
                why: Unarmed::Unavailable(_),
                ..
            }
        ));
    }

    fn req(name: &str, session: Option<&str>) -> ArmRequest {
        ArmRequest {
            name: name.into(),
            prompt: "Do \"it\" $HOME\n---\niteration: 7".into(),
            max_iterations: 5.into(),
            completion_promise: Some("ALL DONE".into()),
            session_id: session.map(Into::into),
            ..ArmRequest::default()
        }
    }

    #[test]
    fn rendered_state_reads_back() {
        let text = render(&req("ralph", Some("abc-1")), "n0nce", Timestamp(0));
        assert!(text.contains("session_id: abc-1\n"), "{text}");
        assert!(text.contains("\nralph_nonce: \"n0nce\"\n---\n"), "{text}");
        let s = LoopState::parse(&text).unwrap();
        assert_eq!(s.prompt, "Do \"it\" $HOME\n---\niteration: 7");
        assert_eq!(s.completion_promise.as_deref(), Some("ALL DONE"));
        assert_eq!(s.max_iterations.count(), 5);
    }

    #[test]
    fn a_paused_loop_in_the_way_is_called_paused_not_active() {
        let (_t, p, r) = project();
        arm(&p, &r, &req("ralph", Some("s1")), Timestamp(0)).unwrap();
        set_active(
            &p,
            Some(&r),
            Some("ralph"),
            false,
            None,
            false,
            Timestamp(1),
        )
        .unwrap();
        let err = arm(&p, &r, &req("ralph", Some("s2")), Timestamp(2)).unwrap_err();
        let words = err.to_string();
        assert!(
            words.starts_with("a loop named `ralph` already exists, paused (")
                && !words.contains("active"),
            "{words}"
        );
    }

    #[test]
    fn arm_refuses_duplicates_without_force() {
        let (_t, p, r) = project();
        arm(&p, &r, &req("ralph", Some("s")), Timestamp(0)).unwrap();
        assert!(matches!(
            arm(&p, &r, &req("ralph", None), Timestamp(1)),
            Err(CommandError::NameTaken { .. })
        ));
        assert!(matches!(
            arm(&p, &r, &req("other", Some("s")), Timestamp(1)),
            Err(CommandError::SessionBusy { .. })
        ));
        let mut forced = req("other", Some("s"));
        forced.force = true;
        arm(&p, &r, &forced, Timestamp(2)).unwrap();
        let names: Vec<_> = p
            .loop_files()
            .unwrap()
            .into_iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, ["other"]);
        let reports = report(&p, Some(&r), 10, 0, Timestamp(3)).unwrap();
        assert_eq!(reports[1].outcome.as_deref(), Some("cancelled"));
    }

    /// Only a loop armed here makes a session busy: a file no record vouches for, naming
    /// the session, is left alone; under the name asked for, the refusal says what it is.
    #[test]
    fn a_foreign_file_naming_the_session_never_makes_it_busy() {
        let (_t, p, r) = project();
        let planted = "---\nsession_id: s\nmax_iterations: 5\n---\nPlanted\n";
        std::fs::write(p.loop_path("planted"), planted).unwrap();
        arm(&p, &r, &req("mine", Some("s")), Timestamp(0)).unwrap();
        let taken = arm(&p, &r, &req("planted", Some("t")), Timestamp(1)).unwrap_err();
        assert!(
            matches!(taken, CommandError::NameTakenByForeign { .. }),
            "{taken}"
        );
        assert!(
            taken.to_string().contains("`ralph adopt --name planted`"),
            "{taken}"
        );
        assert_eq!(
            std::fs::read_to_string(p.loop_path("planted")).unwrap(),
            planted
        );
        assert!(
            matches!(
                arm(&p, &r, &req("other", Some("s")), Timestamp(2)),
                Err(CommandError::SessionBusy { .. })
            ),
            "the loop armed here still makes the session busy"
        );
    }

    #[test]
    fn cancel_and_pause() {
        let (_t, p, r) = project();
        arm(&p, &r, &req("a", Some("s1")), Timestamp(0)).unwrap();
        arm(&p, &r, &req("b", Some("s2")), Timestamp(0)).unwrap();
        assert!(matches!(
            cancel(&p, Some(&r), None, false, None, Timestamp(1)),
            Err(CommandError::Ambiguous(_))
        ));
        assert_eq!(
            set_active(&p, Some(&r), None, false, Some("s2"), false, Timestamp(1)).unwrap(),
            ["b"]
        );
        let ended = cancel(&p, Some(&r), None, false, Some("s1"), Timestamp(1))
            .unwrap()
            .ended;
        assert_eq!(ended[0].0, "a");
        assert!(cancel(&p, Some(&r), Some("zzz"), false, None, Timestamp(1)).is_err());
        let r = report(&p, Some(&r), 10, 5, Timestamp(2)).unwrap();
        assert_eq!((r[0].name.as_str(), r[0].state.as_str()), ("b", "paused"));
        assert_eq!((r[1].name.as_str(), r[1].state.as_str()), ("a", "ended"));
        assert_eq!(r[1].recent.last().unwrap()["outcome"], "cancelled");
    }

    #[test]
    fn armed_loops_are_recorded_and_forgotten_when_they_end() {
        let (_t, p, r) = project();
        arm(&p, &r, &req("a", Some("s1")), Timestamp(0)).unwrap();
        let root = registry::canonical_root(&p).unwrap();
        assert!(r.lookup(&root, "a").unwrap().is_some());
        let reports = report(&p, Some(&r), 0, 0, Timestamp(1)).unwrap();
        assert_eq!(
            (reports[0].armed, &reports[0].not_armed),
            (Some(true), &None)
        );
        cancel(&p, Some(&r), Some("a"), false, None, Timestamp(1)).unwrap();
        assert!(r.lookup(&root, "a").unwrap().is_none());
    }

    #[test]
    fn adopt_records_only_the_text_that_was_shown() {
        let (_t, p, r) = project();
        let planted = "---\nverify: \"touch x\"\n---\nDo it\n";
        std::fs::write(p.loop_path("x"), planted).unwrap();
        let reports = report(&p, Some(&r), 0, 0, Timestamp(1)).unwrap();
        assert_eq!(reports[0].armed, Some(false));
        assert!(
            reports[0]
                .not_armed
                .as_deref()
                .is_some_and(|n| n.contains("ralph adopt --name x")),
            "{:?}",
            reports[0].not_armed
        );
        let shown_before_an_edit = planted.replace("touch x", "true");
        assert!(matches!(
            adopt(&p, &r, "x", &shown_before_an_edit, Timestamp(2)),
            Err(CommandError::ChangedMeanwhile { .. })
        ));
        let state = adopt(&p, &r, "x", planted, Timestamp(2)).unwrap();
        let text = std::fs::read_to_string(p.loop_path("x")).unwrap();
        assert!(
            text.starts_with("---\nverify: \"touch x\"\nralph_nonce: "),
            "{text}"
        );
        assert!(text.ends_with("\n---\nDo it\n"), "{text}");
        let root = registry::canonical_root(&p).unwrap();
        assert_eq!(r.check(&root, "x", &state), Arming::Armed);
        assert_eq!(
            report(&p, Some(&r), 0, 0, Timestamp(3)).unwrap()[0].armed,
            Some(true)
        );
    }
}
