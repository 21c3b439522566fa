//! The loop state: the typed view of a `.claude/<name>-loop.local.md` file.
//!
//! The reference format (Anthropic's `ralph-loop` plugin) is read as is; the
//! extra fields this project adds are optional, so a file armed by the
//! reference setup script runs here unchanged, and a file armed here still
//! reads in the reference hook.

use serde::Deserialize;

use crate::fields::frontmatter::{self, Split, quote};
pub use crate::fields::limit::Limit;
use crate::fields::values::MAX_OFFSET;
use crate::fields::values::{FieldSource, duration, non_empty, number};
pub use crate::fields::values::{MAX_COUNT, MAX_TOKENS, StateError};
use crate::time::Timestamp;

/// `max_iterations` when the field is missing: a finite limit, so a file
/// that lost the line can never loop forever.
pub const DEFAULT_MAX_ITERATIONS: u64 = 50;
pub use crate::fields::guards::{DEFAULT_VERIFY_TIMEOUT, GuardCounts, Guards};

/// A parsed loop state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopState {
    /// `false` means paused: stops go through and are not counted.
    pub active: bool,
    /// The turn that just ran (arming writes 1).
    pub iteration: u64,
    /// The last turn allowed (`max_iterations: 0`: none).
    pub max_iterations: Limit,
    /// The owning session; `None` while nobody has claimed the loop.
    pub session_id: Option<String>,
    pub completion_promise: Option<String>,
    pub abort_promise: Option<String>,
    pub started_at: Option<Timestamp>,
    pub guards: Guards,
    pub progress: Progress,
    /// Set once the loop has ended (only in history records).
    pub outcome: Option<crate::fields::outcome::RecordedOutcome>,
    pub ended_at: Option<Timestamp>,
    /// `ralph_nonce`: binds the file to its record in the per-user registry.
    pub nonce: Option<String>,
    /// The prompt: the body without its surrounding blank lines.
    pub prompt: String,
    /// `fresh_context: true`: each iteration starts with a cleared model
    /// history, where the host can do it (Gemini CLI).
    pub fresh_context: bool,
    /// `ralph start --prd`: the stories the loop works through.
    pub prd: Option<PrdLoop>,
    /// `notify` and `notify_url`: how the user is told the loop ended.
    pub notify: crate::fields::notice::Settings,
    /// `ralph run --sandbox`: every agent process of a run runs confined.
    pub sandbox: Option<crate::fields::confinement::Confinement>,
    /// `protect`, `scope` and `armed_tree`: the paths the agent must not
    /// change, those it may, and the tree they are compared with.
    pub paths: PathRules,
    /// `fresh_at`: an in-session loop hands over to a fresh context (a
    /// wrap-up turn, then a pause until the user's `/clear`) once the
    /// context the last request sent reaches this.
    pub fresh_at: Option<crate::context::Threshold>,
    /// `fresh_via: run`: at `fresh_at`, after the wrap-up, a detached
    /// `ralph run` takes the loop over instead of the user's `/clear`.
    pub fresh_via_run: bool,
    /// The hash of every setting the user chose, as the registry binds it
    /// (`registry::settings_hash`): taken from the fields already read.
    pub settings_hash: [u8; 32],
}

/// A loop's PRD, as its file records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrdLoop {
    /// `prd:` the PRD's path, relative to the project root.
    pub path: String,
    /// `prd_commands:` each story's `verify` command at arming, as
    /// `ID:DIGEST` pairs (`stories::record_commands`).
    pub commands: String,
    /// `prd_criteria:` each story's title, description and acceptance
    /// criteria at arming, as `ID:DIGEST` pairs (`stories::record_criteria`);
    /// `None` for a loop armed before ralph recorded them (no check then).
    pub criteria: Option<String>,
}

/// `--protect` and `--scope`, as the loop file records them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PathRules {
    /// Globs of paths the agent must leave as they were at arming.
    pub protect: Vec<String>,
    /// Globs every changed path must match (none: any path).
    pub scope: Vec<String>,
    /// The work tree at arming, as a git tree object (`fs/tree_diff.rs`).
    pub armed_tree: Option<String>,
    /// The repository's own ignore rules at arming, as a git blob: the
    /// comparison lists untracked files with them, not with today's.
    pub armed_excludes: Option<String>,
}

impl PathRules {
    /// Whether the loop compares the work tree with its arming at all.
    pub fn any(&self) -> bool {
        !self.protect.is_empty() || !self.scope.is_empty()
    }
}

/// What the hook remembers between stops to run the guards.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Progress {
    pub tokens_used: u64,
    /// How far the transcript has been read (bytes).
    pub transcript_offset: u64,
    /// The id of the last assistant message whose tokens were counted.
    pub last_message_id: Option<String>,
    pub reply_fingerprint: Option<String>,
    pub same_reply_count: u64,
    pub tree_fingerprint: Option<String>,
    pub no_progress_count: u64,
    /// ralph's blocks in a row since Claude Code's block count last started
    /// over (a new turn, or a continuation that provably ran a tool).
    pub idle_blocks: u64,
    /// Time counted against the time budget so far (only with a budget).
    /// It grows by the non-negative steps between stops, so a clock set
    /// back never switches the budget off.
    pub elapsed_secs: Option<u64>,
    /// The clock at the stop that last added to `elapsed_secs`.
    pub clock_at: Option<Timestamp>,
    /// The largest single assistant message counted (tokens): the estimate
    /// for a reply the transcript does not hold yet.
    pub largest_reply_tokens: u64,
    /// The estimate added at the last stop for a reply not yet in the
    /// transcript (0 when the transcript held it): `tokens_used` is known,
    /// this much may be missing.
    pub unseen_tokens: u64,
    /// What the guards count from stop to stop (`guards.rs`).
    pub counts: GuardCounts,
    /// `prd_passed:` a `--prd` loop's stories accepted as passing so far
    /// (space-separated ids): one that turns to passing outside it is checked.
    pub prd_passed: Vec<String>,
    /// `--fresh-at`'s hand-over: [`FRESH_NONE`], [`FRESH_WRAP_UP`] or
    /// [`FRESH_WAITING`].
    pub fresh_stage: u64,
}

/// No hand-over under way.
pub const FRESH_NONE: u64 = 0;
/// The wrap-up turn was asked for: its stop pauses the loop.
pub const FRESH_WRAP_UP: u64 = 1;
/// Paused after the wrap-up, until the owner's `/clear` (the session hooks
/// hand the loop, active, to the conversation it opens).
pub const FRESH_WAITING: u64 = 2;

impl Progress {
    /// The fields that changed since `old`, as frontmatter values: what a
    /// stop writes back. A field added to `Progress` is written here.
    pub fn changed_fields(&self, old: &Progress) -> Vec<(&'static str, String)> {
        let new = self;
        let mut fields = Vec::new();
        let mut num = |key, a: u64, b: u64| {
            if a != b {
                fields.push((key, b.to_string()));
            }
        };
        num("tokens_used", old.tokens_used, new.tokens_used);
        num(
            "transcript_offset",
            old.transcript_offset,
            new.transcript_offset,
        );
        num(
            "same_reply_count",
            old.same_reply_count,
            new.same_reply_count,
        );
        num(
            "no_progress_count",
            old.no_progress_count,
            new.no_progress_count,
        );
        num("idle_blocks", old.idle_blocks, new.idle_blocks);
        num(
            "largest_reply_tokens",
            old.largest_reply_tokens,
            new.largest_reply_tokens,
        );
        num("unseen_tokens", old.unseen_tokens, new.unseen_tokens);
        num("fresh_stage", old.fresh_stage, new.fresh_stage);
        fields.extend(new.counts.changed_fields(&old.counts));
        if new.prd_passed != old.prd_passed {
            fields.push(("prd_passed", quote(&new.prd_passed.join(" "))));
        }
        if let Some(elapsed) = new
            .elapsed_secs
            .filter(|_| old.elapsed_secs != new.elapsed_secs)
        {
            fields.push(("elapsed_secs", elapsed.to_string()));
        }
        if let Some(clock) = new.clock_at.filter(|_| old.clock_at != new.clock_at) {
            fields.push(("clock_at", quote(&clock.to_string())));
        }
        let mut text = |key, a: &Option<String>, b: &Option<String>| {
            if a != b {
                fields.push((key, quote(b.as_deref().unwrap_or(""))));
            }
        };
        text(
            "last_message_id",
            &old.last_message_id,
            &new.last_message_id,
        );
        text(
            "reply_fingerprint",
            &old.reply_fingerprint,
            &new.reply_fingerprint,
        );
        text(
            "tree_fingerprint",
            &old.tree_fingerprint,
            &new.tree_fingerprint,
        );
        fields
    }
}

macro_rules! raw_fields {
    ($($name:ident),* $(,)?) => {
        /// The frontmatter as written, every field a raw scalar. Unknown fields
        /// are ignored here and kept in the file by the in-place rewrite.
        #[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
        pub struct RawFields {
            $($name: Option<String>,)*
        }

        /// Every field ralph reads, by its name in the file.
        pub const KNOWN_FIELDS: &[&str] = &[$(stringify!($name)),*];

        impl FieldSource for RawFields {
            fn get(&self, name: &str) -> Option<&str> {
                match name {
                    $(stringify!($name) => self.$name.as_deref(),)*
                    _ => None,
                }
            }
        }
    };
}

// The guards' own fields come from `guards.rs`, in the middle of the list
// (the order is the order in which problems are reported).
crate::fields::guards::with_guard_fields!(raw_fields!(
    active,
    iteration,
    max_iterations,
    session_id,
    completion_promise,
    abort_promise,
    started_at;
    tokens_used,
    transcript_offset,
    last_message_id,
    reply_fingerprint,
    same_reply_count,
    tree_fingerprint,
    no_progress_count,
    idle_blocks,
    elapsed_secs,
    clock_at,
    largest_reply_tokens,
    unseen_tokens,
    fresh_stage;
    outcome,
    ended_at,
    ralph_nonce,
    fresh_context,
    prd,
    prd_commands,
    prd_criteria,
    prd_passed,
    notify,
    notify_url,
    sandbox,
    sandbox_network,
    sandbox_image,
    protect,
    scope,
    armed_tree,
    armed_excludes,
    fresh_at,
    fresh_via,
));

impl LoopState {
    /// Parses a whole state file.
    pub fn parse(text: &str) -> Result<Self, StateError> {
        let layout = frontmatter::split(text)?;
        Self::parse_split(text, &layout)
    }

    pub(crate) fn parse_split(text: &str, layout: &Split) -> Result<Self, StateError> {
        let raw = raw_fields(text, layout)?;
        Self::from_raw(raw, &text[layout.body.clone()])
    }

    pub fn from_raw(raw: RawFields, body: &str) -> Result<Self, StateError> {
        let count = |field, value: &Option<String>| number(field, value.as_deref(), MAX_COUNT);
        Ok(Self {
            active: boolean("active", raw.active.as_deref(), true)?,
            iteration: count("iteration", &raw.iteration)?.unwrap_or(1),
            max_iterations: Limit::read(
                "max_iterations",
                raw.max_iterations.as_deref(),
                MAX_COUNT,
            )?
            .unwrap_or(Limit::new(DEFAULT_MAX_ITERATIONS)),
            session_id: non_empty(raw.session_id.clone()),
            completion_promise: promise(raw.completion_promise.clone()),
            abort_promise: promise(raw.abort_promise.clone()),
            started_at: timestamp("started_at", raw.started_at.as_deref())?,
            // Borrowed, not moved: the fields above were cloned for it.
            guards: Guards::read(&raw)?,
            progress: Progress {
                tokens_used: number("tokens_used", raw.tokens_used.as_deref(), MAX_TOKENS)?
                    .unwrap_or(0),
                transcript_offset: number(
                    "transcript_offset",
                    raw.transcript_offset.as_deref(),
                    MAX_OFFSET,
                )?
                .unwrap_or(0),
                last_message_id: non_empty(raw.last_message_id.clone()),
                reply_fingerprint: non_empty(raw.reply_fingerprint.clone()),
                same_reply_count: count("same_reply_count", &raw.same_reply_count)?.unwrap_or(0),
                tree_fingerprint: non_empty(raw.tree_fingerprint.clone()),
                no_progress_count: count("no_progress_count", &raw.no_progress_count)?.unwrap_or(0),
                idle_blocks: count("idle_blocks", &raw.idle_blocks)?.unwrap_or(0),
                elapsed_secs: duration("elapsed_secs", raw.elapsed_secs.as_deref())?,
                clock_at: timestamp("clock_at", raw.clock_at.as_deref())?,
                largest_reply_tokens: number(
                    "largest_reply_tokens",
                    raw.largest_reply_tokens.as_deref(),
                    MAX_TOKENS,
                )?
                .unwrap_or(0),
                unseen_tokens: number("unseen_tokens", raw.unseen_tokens.as_deref(), MAX_TOKENS)?
                    .unwrap_or(0),
                counts: GuardCounts::read(&raw)?,
                prd_passed: crate::fields::stories::id_list(
                    raw.prd_passed.as_deref().unwrap_or(""),
                ),
                fresh_stage: count("fresh_stage", &raw.fresh_stage)?.unwrap_or(FRESH_NONE),
            },
            outcome: non_empty(raw.outcome.clone())
                .map(crate::fields::outcome::RecordedOutcome::parse),
            ended_at: timestamp("ended_at", raw.ended_at.as_deref())?,
            nonce: non_empty(raw.ralph_nonce.clone()),
            prompt: body.trim_matches(['\n', '\r', ' ', '\t']).to_owned(),
            fresh_context: boolean("fresh_context", raw.fresh_context.as_deref(), false)?,
            prd: prd_loop(&raw)?,
            notify: crate::fields::notice::Settings {
                desktop: boolean("notify", raw.notify.as_deref(), false)?,
                // A URL that does not pass the arming check is never called.
                url: non_empty(raw.notify_url.clone())
                    .and_then(|u| crate::fields::notice::check_url(&u).ok()),
            },
            sandbox: crate::fields::confinement::Confinement::from_fields(
                boolean("sandbox", raw.sandbox.as_deref(), false)?,
                raw.sandbox_network.as_deref(),
                raw.sandbox_image.as_deref(),
            )?,
            paths: path_rules(&raw)?,
            fresh_at: fresh_at(raw.fresh_at.as_deref())?,
            fresh_via_run: fresh_via(raw.fresh_via.as_deref())?,
            settings_hash: crate::fields::binding::settings_hash(KNOWN_FIELDS, |f| raw.get(f)),
        })
    }

    /// Whether `max_iterations` is reached at the current iteration.
    pub fn at_limit(&self) -> bool {
        self.max_iterations.reached(self.iteration)
    }

    /// `--verify` with no completion promise and no PRD: the gate alone
    /// ends the loop, run at each stop whose turn changed the work tree or
    /// HEAD (`decide::gate_alone`).
    pub fn gate_alone(&self) -> bool {
        self.guards.verify.is_some() && self.completion_promise.is_none() && self.prd.is_none()
    }

    /// `3/20`, or `3/∞` for an unlimited loop.
    pub fn iteration_label(&self) -> String {
        format!("{}/{}", self.iteration, self.max_iterations)
    }
}

/// `fresh_at:` a percentage (`60%`) or tokens (`150000`).
fn fresh_at(value: Option<&str>) -> Result<Option<crate::context::Threshold>, StateError> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    crate::context::Threshold::parse(value)
        .map(Some)
        .map_err(|_| StateError::Field {
            field: "fresh_at",
            value: ralph_fs::display::line(value).into_owned(),
            expected: "expected a share of the context window such as 60% or tokens such as 150000",
        })
}

/// `fresh_via:` `clear` (the default) or `run`.
fn fresh_via(value: Option<&str>) -> Result<bool, StateError> {
    match value.map_or("", str::trim) {
        "" | "clear" => Ok(false),
        "run" => Ok(true),
        other => Err(StateError::Field {
            field: "fresh_via",
            value: ralph_fs::display::line(other).into_owned(),
            expected: "expected clear or run",
        }),
    }
}

/// The `prd:` fields; a path that leaves the project is refused.
fn prd_loop(raw: &RawFields) -> Result<Option<PrdLoop>, StateError> {
    let Some(path) = non_empty(raw.prd.clone()) else {
        return Ok(None);
    };
    if !crate::fields::stories::inside_project(&path) {
        return Err(StateError::Field {
            field: "prd",
            value: ralph_fs::display::line(&path).into_owned(),
            expected: "expected a path inside the project such as ralph/prd.json (relative, no `..`)",
        });
    }
    Ok(Some(PrdLoop {
        path,
        commands: raw.prd_commands.clone().unwrap_or_default(),
        criteria: raw.prd_criteria.clone(),
    }))
}

/// The `protect`, `scope` and `armed_tree` fields; a glob that fails the
/// arming check, or a tree that is no object id, is refused.
fn path_rules(raw: &RawFields) -> Result<PathRules, StateError> {
    let globs = |field: &'static str, value: &Option<String>| {
        let list = crate::globs::list(value.as_deref().unwrap_or(""));
        for glob in &list {
            crate::globs::check(glob).map_err(|_| StateError::Field {
                field,
                value: ralph_fs::display::line(glob).into_owned(),
                expected: "expected globs relative to the project root, separated by spaces, such as tests/** docs/*.md",
            })?;
        }
        if list.len() > crate::globs::MAX_GLOBS {
            return Err(StateError::Field {
                field,
                value: format!("{} globs", list.len()),
                expected: "expected at most 64 globs",
            });
        }
        Ok(list)
    };
    let armed_tree = non_empty(raw.armed_tree.clone());
    if let Some(tree) = armed_tree
        .as_deref()
        .filter(|t| !ralph_fs::tree_diff::is_object_id(t))
    {
        return Err(StateError::Field {
            field: "armed_tree",
            value: ralph_fs::display::line(tree).into_owned(),
            expected: "expected a git tree id (40 or 64 hex digits), as ralph start records it",
        });
    }
    let armed_excludes = non_empty(raw.armed_excludes.clone());
    if let Some(blob) = armed_excludes
        .as_deref()
        .filter(|t| !ralph_fs::tree_diff::is_object_id(t))
    {
        return Err(StateError::Field {
            field: "armed_excludes",
            value: ralph_fs::display::line(blob).into_owned(),
            expected: "expected a git blob id (40 or 64 hex digits), as ralph start records it",
        });
    }
    Ok(PathRules {
        protect: globs("protect", &raw.protect)?,
        scope: globs("scope", &raw.scope)?,
        armed_tree,
        armed_excludes,
    })
}

/// The value of `session_id:` in a file whose YAML does not parse, read from the line a
/// rewrite would edit (`frontmatter::field_lines`, not a reader of its own): it decides
/// whether a broken file is ours to move. A file cut short before its closing `---` is
/// read to its end.
pub fn scan_session_id(text: &str) -> Option<String> {
    let layout = frontmatter::split(text).unwrap_or(Split {
        yaml: 0..text.len(),
        body: text.len()..text.len(),
        newline: "\n",
    });
    let (_, range) =
        frontmatter::field_lines(text, &layout).find(|(name, _)| *name == "session_id")?;
    let (_, value) = text[range].lines().next()?.split_once(':')?;
    let value = value.trim().trim_matches(['"', '\'']).trim();
    (!value.is_empty() && value != "null" && value != "~").then(|| value.to_owned())
}

/// Every bound field (`binding::is_bound`) the file sets, with its value as YAML reads it,
/// in the order ralph reads them: what `ralph adopt` shows before it binds them.
pub fn bound_values(text: &str) -> Result<Vec<(&'static str, String)>, StateError> {
    let layout = frontmatter::split(text)?;
    let raw = raw_fields(text, &layout)?;
    Ok(KNOWN_FIELDS
        .iter()
        .copied()
        .filter(|f| crate::fields::binding::is_bound(f))
        .filter_map(|f| raw.get(f).map(|v| (f, v.to_owned())))
        .collect())
}

/// Reads the frontmatter into raw fields, and proves that every known field
/// is written where a rewrite will find it (see `parse_proven_yaml`).
pub(crate) fn raw_fields(text: &str, layout: &Split) -> Result<RawFields, StateError> {
    let yaml = &text[layout.yaml.clone()];
    let raw = parse_raw(yaml)?;
    prove_spelling(text, layout, &raw)?;
    Ok(raw)
}

pub(crate) fn parse_raw(yaml: &str) -> Result<RawFields, StateError> {
    let only_comments = yaml
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
    if only_comments {
        return Ok(RawFields::default());
    }
    serde_saphyr::from_str(yaml).map_err(|e| yaml_error(yaml, &e.to_string()))
}

/// The rewrite edits the `key: value` lines that `frontmatter::field_lines`
/// finds; the reader is a YAML parser. Both must see the same fields, or a
/// rewrite would change a line the parser never reads (a key hidden in a
/// quoted multi-line value: a loop that is never counted) or miss the one
/// it does (`{iteration: 1}`, an alias, a merge key). The proof: the lines
/// found for known fields, parsed alone, give exactly the known fields of
/// the whole frontmatter, and the rest, parsed alone, gives none of them.
/// Anything else is refused here, at the first stop, with the fix.
fn prove_spelling(text: &str, layout: &Split, raw: &RawFields) -> Result<(), StateError> {
    let mut found: Vec<(&'static str, std::ops::Range<usize>)> = Vec::new();
    for (name, range) in frontmatter::field_lines(text, layout) {
        let Some(&field) = KNOWN_FIELDS.iter().find(|f| **f == name) else {
            continue;
        };
        if found.iter().any(|(f, _)| *f == field) {
            return Err(spelling(field, "is on more than one line", raw));
        }
        found.push((field, range));
    }
    if plainly_written(&text[layout.yaml.clone()]) {
        return Ok(());
    }
    prove_by_parsing(text, layout, raw, found)
}

/// The proof the long way: the known fields' lines and the rest, each
/// parsed alone, against the whole.
fn prove_by_parsing(
    text: &str,
    layout: &Split,
    raw: &RawFields,
    mut found: Vec<(&'static str, std::ops::Range<usize>)>,
) -> Result<(), StateError> {
    let mut lines = String::new();
    let mut rest = String::new();
    let mut at = layout.yaml.start;
    found.sort_by_key(|(_, range)| range.start);
    for (_, range) in &found {
        rest.push_str(&text[at..range.start]);
        lines.push_str(&text[range.clone()]);
        if !lines.ends_with('\n') {
            lines.push('\n');
        }
        at = range.end;
    }
    rest.push_str(&text[at..layout.yaml.end]);
    let from_lines = parse_raw(&lines);
    let from_rest = parse_raw(&rest);
    for field in KNOWN_FIELDS.iter().copied() {
        let in_file = raw.get(field);
        let line = found.iter().any(|(f, _)| *f == field);
        let problem = match (&from_lines, &from_rest) {
            _ if !line && in_file.is_some() => {
                "is not written as a plain `key: value` line (a flow mapping `{…}`, an alias, a merge key, a complex or escaped key)"
            }
            (Err(_), _) => {
                let culprit = found
                    .iter()
                    .find(|(_, range)| parse_raw(&text[range.clone()]).is_err())
                    .map_or(field, |(f, _)| *f);
                return Err(spelling(
                    culprit,
                    "has a `key:` line that does not read on its own (it sits inside another value, or uses an anchor or alias defined elsewhere)",
                    raw,
                ));
            }
            (Ok(lines), _) if lines.get(field) != in_file => {
                "has a `key:` line inside another field's value (quoted or block text), which is not the value YAML reads"
            }
            (_, Err(_)) => {
                // Taking out the line that was inside a value broke it.
                let yaml = &text[layout.yaml.clone()];
                let start = layout.yaml.start;
                let culprit = found
                    .iter()
                    .find(|(_, range)| {
                        let (a, b) = (range.start - start, range.end - start);
                        parse_raw(&format!("{}{}", &yaml[..a], &yaml[b..])).is_err()
                    })
                    .map_or(field, |(f, _)| *f);
                return Err(spelling(
                    culprit,
                    "has a `key:` line inside another field's value (quoted or block text)",
                    raw,
                ));
            }
            (_, Ok(rest)) if rest.get(field).is_some() => {
                "is also written in another spelling elsewhere in the frontmatter"
            }
            _ => continue,
        };
        return Err(spelling(field, problem, raw));
    }
    Ok(())
}

/// Whether every line of the frontmatter stands alone: blank, a comment, or
/// a `key: value` line at column 0 with a plain key and a one-line scalar
/// that neither opens a multi-line value nor refers to another line (no
/// block scalar, flow collection, anchor, alias, tag, or unclosed quote).
/// Such a frontmatter is a list of independent entries, so each line parsed
/// alone reads as it does in the whole, and the proof in [`prove_spelling`]
/// holds without parsing the parts again. Every file ralph writes has this
/// shape; anything else takes the full proof.
fn plainly_written(yaml: &str) -> bool {
    yaml.split('\n').all(|line| {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() || line.starts_with('#') {
            return true;
        }
        let key_len = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(line.len());
        let starts_plain = line
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
        match line[key_len..].strip_prefix(':') {
            Some(rest) if starts_plain => {
                rest.is_empty() || rest.strip_prefix(' ').is_some_and(one_line_scalar)
            }
            _ => false,
        }
    })
}

/// A scalar that ends on its line: a closed quoted string (then at most a
/// comment), or a plain scalar starting with a character that opens nothing.
fn one_line_scalar(value: &str) -> bool {
    let value = value.trim_start_matches(' ');
    let after_quote = |rest: &str| {
        let rest = rest.trim_start_matches(' ');
        rest.is_empty() || rest.starts_with('#')
    };
    let mut chars = value.char_indices();
    match chars.next() {
        None => true,
        Some((_, '"')) => {
            let mut escaped = false;
            for (i, c) in chars {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => return after_quote(&value[i + 1..]),
                    _ => {}
                }
            }
            false
        }
        Some((_, '\'')) => {
            let mut rest = &value[1..];
            while let Some(at) = rest.find('\'') {
                if rest[at + 1..].starts_with('\'') {
                    rest = &rest[at + 2..];
                } else {
                    return after_quote(&rest[at + 1..]);
                }
            }
            false
        }
        Some((_, c)) => c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '~' | '+'),
    }
}

fn spelling(field: &'static str, problem: &'static str, raw: &RawFields) -> StateError {
    let example = raw
        .get(field)
        .filter(|v| !v.is_empty() && v.len() <= 40 && !v.contains(['\n', '\r']))
        .map_or_else(
            || "…".to_owned(),
            |v| {
                let plain = v
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b));
                if plain { v.to_owned() } else { quote(v) }
            },
        );
    StateError::Spelling {
        field,
        problem,
        example,
    }
}

fn yaml_error(yaml: &str, message: &str) -> StateError {
    let detail = message
        .lines()
        .next()
        .unwrap_or(message)
        .trim_start_matches("error: ")
        .to_owned();
    let near = line_number(&detail)
        .and_then(|n| yaml.lines().nth(n.saturating_sub(1)))
        .map(|line| format!(" near `{}`", line.trim()))
        .unwrap_or_default();
    StateError::Yaml { detail, near }
}

fn line_number(detail: &str) -> Option<usize> {
    let rest = &detail[detail.find("line ")? + 5..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A promise of `null`, empty text or only spaces means "no promise".
fn promise(value: Option<String>) -> Option<String> {
    non_empty(value).filter(|v| v != "null")
}

fn boolean(field: &'static str, value: Option<&str>, default: bool) -> Result<bool, StateError> {
    match value.map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v.is_empty() => Ok(default),
        Some(v) if matches!(v.as_str(), "true" | "yes" | "on") => Ok(true),
        Some(v) if matches!(v.as_str(), "false" | "no" | "off") => Ok(false),
        Some(_) => Err(StateError::Field {
            field,
            value: value.unwrap_or_default().to_owned(),
            expected: "expected `true` or `false`",
        }),
    }
}

fn timestamp(field: &'static str, value: Option<&str>) -> Result<Option<Timestamp>, StateError> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => Timestamp::parse_rfc3339(v)
            .map(Some)
            .ok_or_else(|| StateError::Field {
                field,
                value: v.to_owned(),
                expected: "expected a UTC time such as `2026-11-30T01:27:56Z`",
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFERENCE: &str = "---\nactive: true\niteration: 1\nsession_id: \nmax_iterations: 0\ncompletion_promise: \"DONE\"\nstarted_at: \"2026-11-30T00:00:00Z\"\n---\n\nBuild the thing.\n";

    #[test]
    fn reads_the_reference_format() {
        let s = LoopState::parse(REFERENCE).unwrap();
        assert!(s.active);
        assert_eq!(s.iteration, 1);
        assert_eq!(s.max_iterations, Limit::Unlimited);
        assert_eq!(s.session_id, None);
        assert_eq!(s.completion_promise.as_deref(), Some("DONE"));
        assert_eq!(s.prompt, "Build the thing.");
        assert!(!s.at_limit());
    }

    #[test]
    fn numbers_are_decimal() {
        let s = LoopState::parse("---\niteration: 08\nmax_iterations: 010\n---\nx").unwrap();
        assert_eq!((s.iteration, s.max_iterations), (8, Limit::new(10)));
    }

    #[test]
    fn missing_limit_is_finite() {
        let s = LoopState::parse("---\niteration: 3\n---\nx").unwrap();
        assert_eq!(s.max_iterations, Limit::new(DEFAULT_MAX_ITERATIONS));
    }

    #[test]
    fn bad_numbers_name_the_field() {
        let err = LoopState::parse("---\niteration: -1\n---\nx").unwrap_err();
        assert!(err.to_string().contains("`iteration`"), "{err}");
        assert!(err.to_string().contains("-1"), "{err}");
        let err = LoopState::parse("---\nmax_iterations: five\n---\nx").unwrap_err();
        assert!(err.to_string().contains("max_iterations"), "{err}");
    }

    #[test]
    fn null_promise_means_none() {
        let s = LoopState::parse("---\ncompletion_promise: null\n---\nx").unwrap();
        assert_eq!(s.completion_promise, None);
    }

    #[test]
    fn yaml_errors_point_at_the_line() {
        let err = LoopState::parse("---\niteration: 1\nbroken: [1\n---\nx").unwrap_err();
        assert!(err.to_string().contains("broken"), "{err}");
    }

    fn refused(text: &str) -> String {
        match LoopState::parse(text) {
            Ok(s) => panic!("accepted {text:?} as {s:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_counter_hidden_in_a_quoted_value_is_refused() {
        // The attack: the line edit would count `iteration: 2`, the parser
        // never sees it, and the loop runs past any limit.
        let err =
            refused("---\nactive: true\nnote: \"x\niteration: 2\nmax_iterations: 3\n\"\n---\nP");
        assert!(
            err.contains("`iteration`") || err.contains("`max_iterations`"),
            "{err}"
        );
        assert!(err.contains("on a line of its own"), "{err}");
        // The same with real fields in another spelling further down.
        let err = refused("---\nnote: \"x\niteration: 2\n\"\n\"iteration\": 2\n---\nP");
        assert!(err.contains("`iteration`"), "{err}");
        // A key at column 0 after a block scalar is a real key: it counts.
        let s = LoopState::parse("---\nnote: |\n  x\niteration: 2\n---\nP").unwrap();
        assert_eq!(s.iteration, 2);
    }

    #[test]
    fn every_other_spelling_works_or_is_refused_with_the_fix() {
        for (text, works) in [
            ("---\n\"iteration\": 4\n---\nP", true),
            ("---\n'iteration': 4\n---\nP", true),
            ("---\niteration : 4\n---\nP", true),
            ("---\niteration: !!str 4\n---\nP", true),
            ("---\n{iteration: 4}\n---\nP", false),
            ("---\nx: &n 4\niteration: *n\n---\nP", false),
            ("---\nbase: &b {iteration: 4}\n<<: *b\n---\nP", false),
            ("---\n? iteration\n: 4\n---\nP", false),
            ("---\n\"iter\\x61tion\": 4\n---\nP", false),
        ] {
            match LoopState::parse(text) {
                Ok(s) => assert!(works && s.iteration == 4, "{text:?}: {s:?}"),
                Err(e) => {
                    assert!(!works, "{text:?}: {e}");
                    let msg = e.to_string();
                    assert!(
                        msg.contains("iteration") || msg.contains("YAML"),
                        "{text:?}: {msg}"
                    );
                }
            }
        }
        let err = refused("---\n{iteration: 4}\n---\nP");
        assert!(
            err.contains("write it as `iteration: 4` on a line of its own"),
            "{err}"
        );
    }

    #[test]
    fn plainly_written_frontmatter_passes_the_long_proof_too() {
        let plain = [
            "---\nactive: true\niteration: 5\nsession_id: s1\ncompletion_promise: null\nstarted_at: \"2026-11-30T17:37:32Z\"\n---\nTask\n",
            "---\n# note\n\nverify: 'it''s fine' # c\nabort_promise: \"a \\\" b: c\"\nmax_duration: 90m\nother:\n---\nx",
            "---\r\niteration: 2\r\nsession_id: ~\r\n---\r\nx",
        ];
        for text in plain {
            let layout = frontmatter::split(text).unwrap();
            let yaml = &text[layout.yaml.clone()];
            assert!(plainly_written(yaml), "{text:?}");
            let raw = parse_raw(yaml).unwrap();
            let found = frontmatter::field_lines(text, &layout)
                .filter_map(|(name, range)| {
                    KNOWN_FIELDS
                        .iter()
                        .find(|f| **f == name)
                        .map(|f| (*f, range))
                })
                .collect();
            prove_by_parsing(text, &layout, &raw, found).unwrap();
        }
        let not_plain = [
            "note: |\n  iteration: 2\n",
            "note: \"a\niteration: 2\"\n",
            "note: 'a\niteration: 2'\n",
            "{iteration: 1}\n",
            "a: &x 1\niteration: *x\n",
            "iteration: !!str 1\n",
            "\"iteration\": 1\n",
            "iteration : 1\n",
            "list:\n- iteration: 1\n",
            "note: [a,\niteration: 1]\n",
            "<<: {iteration: 1}\n",
            "? iteration\n: 1\n",
            "iteration:\t1\n",
            "note: a\n  iteration: 2\n",
        ];
        for yaml in not_plain {
            assert!(!plainly_written(yaml), "{yaml:?}");
        }
    }

    proptest::proptest! {
        /// The shortcut never accepts a frontmatter the long proof refuses:
        /// lines drawn from plain and tricky spellings, in any order.
        #[test]
        fn the_shortcut_agrees_with_the_long_proof(
            picks in proptest::collection::vec(0usize..18, 0..8)
        ) {
            const LINES: [&str; 18] = [
                "iteration: 3", "session_id: \"s 1\"", "verify: 'a''b' # c", "note: x",
                "# comment", "", "active: true", "note: |", "  iteration: 9",
                "other: \"a", "iteration: 4\"", "max_iterations: *x", "a: &x 5",
                "{verify: z}", "- item", "started_at: \"2026-01-01T00:00:00Z\"",
                "stuck_after: 0 # off", "\tx: 1",
            ];
            let yaml: String = picks.iter().map(|&i| format!("{}\n", LINES[i])).collect();
            let text = format!("---\n{yaml}---\nbody\n");
            let Ok(layout) = frontmatter::split(&text) else { return Ok(()) };
            let Ok(raw) = parse_raw(&text[layout.yaml.clone()]) else { return Ok(()) };
            let mut found = Vec::new();
            for (name, range) in frontmatter::field_lines(&text, &layout) {
                if let Some(f) = KNOWN_FIELDS.iter().find(|f| **f == name) {
                    if found.iter().any(|(g, _)| g == f) {
                        return Ok(()); // refused before either proof
                    }
                    found.push((*f, range));
                }
            }
            if plainly_written(&text[layout.yaml.clone()]) {
                proptest::prop_assert!(
                    prove_by_parsing(&text, &layout, &raw, found).is_ok(),
                    "{text:?}"
                );
            }
        }
    }

    #[test]
    fn duplicated_keys_are_refused() {
        let err = refused("---\niteration: 1\n\"iteration\": 2\n---\nP");
        assert!(err.contains("iteration"), "{err}");
    }

    #[test]
    fn empty_values_and_comments_still_read() {
        let s = LoopState::parse("---\n# a comment\nsession_id:\nverify: |\n  a\n\n  b\n---\nP")
            .unwrap();
        assert_eq!(s.session_id, None);
        assert_eq!(s.guards.verify.as_deref(), Some("a\n\nb\n"));
    }

    #[test]
    fn numbers_past_their_caps_are_corrupt_not_wrapped() {
        let err = refused("---\niteration: 18446744073709551615\n---\nP");
        assert!(
            err.contains("`iteration`") && err.contains("1000000000"),
            "{err}"
        );
        refused("---\niteration: 18446744073709551616\n---\nP");
        refused("---\nmax_iterations: 1000000001\n---\nP");
        refused("---\ntokens_used: 1000000000000001\n---\nP");
        refused("---\nmax_duration: 3651d\n---\nP");
        let s = LoopState::parse(
            "---\niteration: 1000000000\nmax_tokens: 1000000000000000\nmax_duration: 3650d\n---\nP",
        )
        .unwrap();
        assert_eq!(s.iteration, MAX_COUNT);
    }

    #[test]
    fn scans_session_of_broken_files() {
        assert_eq!(
            scan_session_id("---\nsession_id: abc\nx: [\n---\n").as_deref(),
            Some("abc")
        );
        assert_eq!(scan_session_id("---\nsession_id: \n---\n"), None);
        // Cut short before the closing fence, or a quoted key: still found.
        assert_eq!(
            scan_session_id("---\n\"session_id\": 'abc'\nx: [").as_deref(),
            Some("abc")
        );
        // A line inside another field's value is not the field.
        assert_eq!(
            scan_session_id("---\nprompt: |\n  session_id: x\n---\n"),
            None
        );
    }
}
