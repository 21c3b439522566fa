//! The stories of a PRD (`ralph/prd.json`), one model for the single loop
//! (`ralph start --prd`) and the fleet (`ralph run --parallel`): reading
//! them (ids checked as branch names), the pure rules (the current story,
//! all pass, only blocked ones left), the digest that records a story's
//! `verify` command at arming, and the span-exact edit of one story's
//! `passes` value. Reading the file and running commands happen elsewhere
//! (`decide/prd_turn.rs`, `run/fleet/git.rs`).

use serde_json::Value;

/// Where the stories live by default, relative to the project root.
pub const DEFAULT_PRD: &str = "ralph/prd.json";

/// One story (or one task named on the command line).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Story {
    pub id: String,
    pub title: String,
    pub description: String,
    pub criteria: Vec<String>,
    pub passes: bool,
    pub priority: Option<i64>,
    /// The story's own check (`"verify": "CMD"`), run when it turns to passing.
    pub verify: Option<String>,
    /// Why a person must act first (`"blocked": "why"`): the loop skips it.
    pub blocked: Option<String>,
    /// What the agent noted while finishing it (`"concerns"`), shown at the end.
    pub concerns: Vec<String>,
    /// `"protect"` and `"scope"`: globs, as `--protect` and `--scope`; a loop
    /// armed with `--prd` records them with its own at arming (only those count).
    pub protect: Vec<String>,
    pub scope: Vec<String>,
    /// `"dependsOn"`: the ids of the stories this one needs first (each
    /// exists, is not this story, and no chain of them comes back to it).
    pub depends_on: Vec<String>,
}

impl Story {
    /// Open: not passing and not blocked, so the loop works on it.
    pub(crate) fn is_open(&self) -> bool {
        !self.passes && self.blocked.is_none()
    }

    /// Every story this one depends on passes (`all`: the PRD's stories).
    pub(crate) fn prerequisites_pass(&self, all: &[Story]) -> bool {
        self.waiting_for(all).is_empty()
    }

    /// The stories this one depends on that do not pass yet, in its order.
    pub(crate) fn waiting_for<'a>(&'a self, all: &[Story]) -> Vec<&'a str> {
        self.depends_on
            .iter()
            .filter(|d| !all.iter().any(|s| &s.id == *d && s.passes))
            .map(String::as_str)
            .collect()
    }

    /// Open, and every story it depends on passes: the loop can work on it now.
    pub(crate) fn is_ready(&self, all: &[Story]) -> bool {
        self.is_open() && self.prerequisites_pass(all)
    }
}

/// A loop's PRD at a stop, after each story that turned to passing was
/// checked (and set back when its check failed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrdSeen {
    /// The PRD's path as the loop names it.
    pub file: String,
    pub stories: Vec<Story>,
    /// Stories set back to `passes: false` at this stop, and why.
    pub refused: Vec<StoryRefusal>,
    /// Stories whose own command ran and passed at this stop.
    pub checked: Vec<String>,
    /// Stories whose criteria differ from those bound at arming
    /// (`changed_criteria`; empty for a loop without `prd_criteria`).
    pub changed: Vec<String>,
}

/// A story that turned to passing but was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoryRefusal {
    /// Its command (or the loop's `--verify`) failed.
    Failed {
        id: String,
        command: String,
        verification: ralph_fs::gate::Verification,
    },
    /// Its command is not the one recorded at arming, so it did not run.
    Unrecorded { id: String, command: String },
}

/// Why a PRD cannot be used: each names the file, the field and the fix.
#[derive(Debug, thiserror::Error)]
pub enum PrdError {
    #[error(
        "{file} is not valid JSON: {source}; fix the file (a JSON object with a `userStories` list)"
    )]
    NotJson {
        file: String,
        source: serde_json::Error,
    },
    #[error(
        "{file}: the field `userStories` is missing or not a list; see `ralph init` for the shape"
    )]
    NoStoryList { file: String },
    #[error("{file}: userStories[{index}].id is missing or not a string")]
    MissingId { file: String, index: usize },
    #[error(
        "{file}: userStories[{index}].id = {:?} cannot name a branch: use ASCII letters, digits, `.`, `_` and `-` only (at most 64, not starting with `-` or `.`), e.g. \"US-001\"",
        ralph_fs::display::line(.id)
    )]
    BadId {
        file: String,
        index: usize,
        id: String,
    },
    #[error(
        "{file}: userStories[{index}].id: the id {id:?} is used twice; every story needs its own"
    )]
    DuplicateId {
        file: String,
        index: usize,
        id: String,
    },
    #[error("{file}: userStories[{index}].{field} must be {expected}")]
    BadField {
        file: String,
        index: usize,
        field: &'static str,
        expected: &'static str,
    },
    #[error(
        "{file}: story {id}'s dependsOn names {missing:?}, which no story has as its id; fix the id or remove it from dependsOn"
    )]
    UnknownDependency {
        file: String,
        id: String,
        missing: String,
    },
    #[error(
        "{file}: story {id}'s dependsOn names {id} itself; a story cannot wait for itself: remove it from dependsOn"
    )]
    SelfDependency { file: String, id: String },
    #[error(
        "{file}: the stories' dependsOn go round in a circle ({}), so none of them could ever start; remove one of these ids from the dependsOn of the story before it",
        .cycle.join(" → ")
    )]
    DependencyCycle { file: String, cycle: Vec<String> },
    #[error("{file}: no story with id {id:?} in `userStories` any more")]
    StoryGone { file: String, id: String },
    /// The file could not be read (a link, a special file, too long…).
    #[error("{file}: {source}")]
    Unreadable {
        file: String,
        source: ralph_fs::safe_fs::FsError,
    },
}

impl ralph_fs::error::Exit for PrdError {}

/// A story id is used as a branch name, a folder name and a loop name:
/// ASCII letters, digits, `.`, `_`, `-`; at most 64; no leading `-` or
/// `.`, no `..`, no trailing `.` or `.lock` (which git refuses in a ref).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !id.starts_with(['-', '.'])
        && !id.ends_with('.')
        && !id.ends_with(".lock")
        && !id.contains("..")
}

/// The stories of the PRD `text` (read from `file`), in file order. Every
/// id is checked; a bad one is refused with the file, the field and the rule.
pub fn parse(file: &str, text: &str) -> Result<Vec<Story>, PrdError> {
    let file = || file.to_owned();
    let value: Value = serde_json::from_str(text).map_err(|source| PrdError::NotJson {
        file: file(),
        source,
    })?;
    let Some(list) = value.get("userStories").and_then(Value::as_array) else {
        return Err(PrdError::NoStoryList { file: file() });
    };
    let mut out: Vec<Story> = Vec::with_capacity(list.len());
    // The loop names seen so far: one lookup per story, so a PRD of tens of
    // thousands of stories is read in linear time.
    let mut names = std::collections::HashSet::with_capacity(list.len());
    for (index, s) in list.iter().enumerate() {
        let id = s
            .get("id")
            .and_then(Value::as_str)
            .ok_or(PrdError::MissingId {
                file: file(),
                index,
            })?;
        if !valid_id(id) {
            let id = id.to_owned();
            return Err(PrdError::BadId {
                file: file(),
                index,
                id,
            });
        }
        if !names.insert(id.replace('.', "_")) {
            let id = id.to_owned();
            return Err(PrdError::DuplicateId {
                file: file(),
                index,
                id,
            });
        }
        out.push(story(&file(), index, id, s)?);
    }
    check_dependencies(&file(), &out)?;
    Ok(out)
}

/// Every `dependsOn` names another story of the PRD, and no chain of them
/// comes back to where it started (the first such circle is named).
pub(crate) fn check_dependencies(file: &str, stories: &[Story]) -> Result<(), PrdError> {
    let index: std::collections::HashMap<&str, usize> = stories
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    for s in stories {
        for d in &s.depends_on {
            if d == &s.id {
                return Err(PrdError::SelfDependency {
                    file: file.to_owned(),
                    id: s.id.clone(),
                });
            }
            if !index.contains_key(d.as_str()) {
                return Err(PrdError::UnknownDependency {
                    file: file.to_owned(),
                    id: s.id.clone(),
                    missing: ralph_fs::display::line(d).into_owned(),
                });
            }
        }
    }
    match find_cycle(stories, &index) {
        Some(cycle) => Err(PrdError::DependencyCycle {
            file: file.to_owned(),
            cycle,
        }),
        None => Ok(()),
    }
}

/// A circle of `dependsOn` (its ids, the first one again at the end), found
/// by a depth-first walk without recursion (a PRD may hold many stories).
fn find_cycle(
    stories: &[Story],
    index: &std::collections::HashMap<&str, usize>,
) -> Option<Vec<String>> {
    // 0: not seen, 1: on the current path, 2: done.
    let mut mark = vec![0u8; stories.len()];
    for start in 0..stories.len() {
        if mark[start] != 0 {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = 1;
        while let Some((node, next)) = path.last_mut() {
            let node = *node;
            let Some(dep) = stories[node].depends_on.get(*next) else {
                mark[node] = 2;
                path.pop();
                continue;
            };
            *next += 1;
            let d = index[dep.as_str()];
            match mark[d] {
                0 => {
                    mark[d] = 1;
                    path.push((d, 0));
                }
                1 => {
                    let from = path.iter().position(|(n, _)| *n == d).unwrap_or(0);
                    let mut cycle: Vec<String> = path[from..]
                        .iter()
                        .map(|(n, _)| stories[*n].id.clone())
                        .collect();
                    cycle.push(stories[d].id.clone());
                    return Some(cycle);
                }
                _ => {}
            }
        }
    }
    None
}

/// The stories still to do, in waves: wave 1 needs nothing that does not
/// pass, wave 2 needs wave 1, and so on (each wave by priority, then file
/// order). A blocked story and every story that waits for it, directly or
/// not, are in no wave: they are returned apart, in file order. The PRD's
/// `dependsOn` are checked (`check_dependencies`), so every chain ends.
pub fn waves(stories: &[Story]) -> (Vec<Vec<&Story>>, Vec<&Story>) {
    let index: std::collections::HashMap<&str, usize> = stories
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    // The prerequisites still to do of each story, and who waits for whom.
    let deps: Vec<Vec<usize>> = stories
        .iter()
        .map(|s| {
            s.depends_on
                .iter()
                .filter_map(|d| index.get(d.as_str()).copied())
                .filter(|&j| !stories[j].passes)
                .collect()
        })
        .collect();
    let mut waiters: Vec<Vec<usize>> = vec![Vec::new(); stories.len()];
    let mut left: Vec<usize> = deps.iter().map(Vec::len).collect();
    for (i, d) in deps.iter().enumerate() {
        for &j in d {
            waiters[j].push(i);
        }
    }
    // Each story is settled once all its prerequisites are (Kahn's order).
    let mut wave: Vec<Option<usize>> = vec![None; stories.len()];
    let mut ready: Vec<usize> = (0..stories.len())
        .filter(|&i| !stories[i].passes && left[i] == 0)
        .collect();
    while let Some(i) = ready.pop() {
        let held = stories[i].blocked.is_some() || deps[i].iter().any(|&j| wave[j].is_none());
        if !held {
            wave[i] = Some(
                deps[i]
                    .iter()
                    .filter_map(|&j| wave[j])
                    .max()
                    .map_or(0, |m| m + 1),
            );
        }
        for &w in &waiters[i] {
            left[w] -= 1;
            if left[w] == 0 {
                ready.push(w);
            }
        }
    }
    let count = wave.iter().flatten().max().map_or(0, |m| m + 1);
    let mut out: Vec<Vec<&Story>> = vec![Vec::new(); count];
    for (i, s) in stories.iter().enumerate() {
        if let Some(w) = wave[i] {
            out[w].push(s);
        }
    }
    for w in &mut out {
        w.sort_by_key(|s| s.priority.unwrap_or(i64::MAX));
    }
    let apart = stories
        .iter()
        .enumerate()
        .filter(|(i, s)| !s.passes && wave[*i].is_none())
        .map(|(_, s)| s)
        .collect();
    (out, apart)
}

/// One story's fields as read (its id already checked). `verify` and
/// `blocked` are checked: a command ralph would run must be a string.
fn story(file: &str, index: usize, id: &str, s: &Value) -> Result<Story, PrdError> {
    let text = |name: &str| {
        s.get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let bad = |field, expected| PrdError::BadField {
        file: file.to_owned(),
        index,
        field,
        expected,
    };
    let optional = |field: &'static str| match s.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(v)) if v.trim().is_empty() => Ok(None),
        Some(Value::String(v)) => Ok(Some(v.clone())),
        Some(_) => Err(bad(field, "a string (or left out)")),
    };
    let passes = match s.get("passes") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("passes", "true or false")),
    };
    let concerns = match s.get("concerns") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(c)) if c.trim().is_empty() => Vec::new(),
        Some(Value::String(c)) => vec![c.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        Some(_) => return Err(bad("concerns", "a string or a list of strings")),
    };
    let globs = |field: &'static str| -> Result<Vec<String>, PrdError> {
        let list: Vec<String> = match s.get(field) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|g| g.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| bad(field, "a list of globs such as [\"tests/**\"]"))?,
            Some(_) => return Err(bad(field, "a list of globs such as [\"tests/**\"]")),
        };
        if list.len() > crate::globs::MAX_GLOBS
            || list.iter().any(|g| crate::globs::check(g).is_err())
        {
            return Err(bad(
                field,
                "at most 64 globs relative to the project root (no spaces, no `..`)",
            ));
        }
        Ok(list)
    };
    Ok(Story {
        depends_on: depends_on(s)
            .ok_or_else(|| bad("dependsOn", "a list of story ids such as [\"US-001\"]"))?,
        protect: globs("protect")?,
        scope: globs("scope")?,
        id: id.to_owned(),
        title: text("title"),
        description: text("description"),
        criteria: s
            .get("acceptanceCriteria")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        passes,
        priority: s.get("priority").and_then(Value::as_i64),
        verify: optional("verify")?,
        blocked: optional("blocked")?,
        concerns,
    })
}

/// A story's `dependsOn` (none when left out); `None` when it is not a
/// list of strings.
fn depends_on(s: &Value) -> Option<Vec<String>> {
    match s.get("dependsOn") {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(|d| d.as_str().map(str::to_owned)).collect(),
        Some(_) => None,
    }
}

/// The stories not passing, by priority, then file order (the fleet runs
/// all of them; a blocked one is left out by `open`).
pub(crate) fn not_passing(stories: &[Story]) -> Vec<Story> {
    let mut out: Vec<Story> = stories.iter().filter(|s| !s.passes).cloned().collect();
    out.sort_by_key(|s| s.priority.unwrap_or(i64::MAX));
    out
}

/// The open stories (not passing, not blocked), lowest priority first,
/// then file order.
pub fn open(stories: &[Story]) -> Vec<Story> {
    let mut out = not_passing(stories);
    out.retain(|s| s.blocked.is_none());
    out
}

/// The story the loop works on now: of the open ones whose prerequisites
/// (`dependsOn`) all pass, the one with the lowest priority.
pub fn current(stories: &[Story]) -> Option<&Story> {
    stories
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_ready(stories))
        .min_by_key(|(i, s)| (s.priority.unwrap_or(i64::MAX), *i))
        .map(|(_, s)| s)
}

/// Every story passes (a PRD without stories has nothing left to do).
pub fn all_pass(stories: &[Story]) -> bool {
    stories.iter().all(|s| s.passes)
}

/// No story is ready (open with its prerequisites passing), and at least
/// one does not pass: each left is blocked or waits for a blocked one, so a
/// person must act. (`dependsOn` has no circle, so an open story that waits
/// leads to a ready one or a blocked one.)
pub fn only_blocked_left(stories: &[Story]) -> bool {
    !stories.iter().any(|s| s.is_ready(stories)) && stories.iter().any(|s| !s.passes)
}

/// How many pass, of how many.
pub fn tally(stories: &[Story]) -> (usize, usize) {
    (stories.iter().filter(|s| s.passes).count(), stories.len())
}

/// A short, stable digest of a story's command, recorded at arming: the
/// command that runs later must have this digest.
pub fn command_digest(command: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(command.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The stories' commands as recorded in a loop file: `ID:DIGEST` pairs
/// separated by spaces (ids never hold either character).
pub fn record_commands(stories: &[Story]) -> String {
    stories
        .iter()
        .filter_map(|s| {
            s.verify
                .as_deref()
                .map(|c| format!("{}:{}", s.id, command_digest(c)))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `command` is the one recorded for story `id` at arming.
pub fn command_recorded(recorded: &str, id: &str, command: &str) -> bool {
    let digest = command_digest(command);
    recorded
        .split_whitespace()
        .filter_map(|pair| pair.rsplit_once(':'))
        .any(|(i, d)| i == id && d == digest)
}

/// The name a story refused because the PRD's criteria changed since
/// arming gives as its check.
pub const CRITERIA_CHECK: &str = "the PRD's criteria at arming";

/// A short, stable digest of what a story asks for (its `title`,
/// `description` and `acceptanceCriteria`), recorded at arming: the agent
/// must not weaken them and then mark the story passing. Hashed as one
/// JSON array, so no two different stories share an input.
pub(crate) fn criteria_digest(story: &Story) -> String {
    let spec = serde_json::json!([story.title, story.description, story.criteria]);
    command_digest(&spec.to_string())
}

/// Every story's criteria as recorded in a loop file: `ID:DIGEST` pairs
/// separated by spaces, one per story (so the set of ids is bound too).
pub fn record_criteria(stories: &[Story]) -> String {
    stories
        .iter()
        .map(|s| format!("{}:{}", s.id, criteria_digest(s)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The stories whose criteria differ from `recorded` (the loop's
/// `prd_criteria`), in PRD order, then those recorded but gone: a story
/// edited, added after arming, or removed.
pub fn changed_criteria(recorded: &str, stories: &[Story]) -> Vec<String> {
    let armed: Vec<(&str, &str)> = recorded
        .split_whitespace()
        .filter_map(|pair| pair.rsplit_once(':'))
        .collect();
    let mut changed: Vec<String> = stories
        .iter()
        .filter(|s| !armed.contains(&(s.id.as_str(), criteria_digest(s).as_str())))
        .map(|s| s.id.clone())
        .collect();
    changed.extend(
        armed
            .iter()
            .filter(|(id, _)| !stories.iter().any(|s| s.id == *id))
            .map(|(id, _)| (*id).to_owned()),
    );
    changed
}

/// The task of a `--prd` loop armed without one.
pub fn default_task(path: &str) -> String {
    format!(
        "Work through the stories in {path}, one at a time: the current story is named below. Keep notes for the next iteration in ralph/progress.txt."
    )
}

/// A PRD path ralph reads: relative, inside the project (no `..`, no
/// root, no drive), so a planted loop file cannot point it elsewhere.
pub fn inside_project(path: &str) -> bool {
    use std::path::Component;
    !path.trim().is_empty()
        && std::path::Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The ids recorded in a space-separated list field (`prd_verified`).
pub(crate) fn id_list(field: &str) -> Vec<String> {
    field.split_whitespace().map(str::to_owned).collect()
}

/// Sets story `id`'s `passes` to `value` by changing only the bytes of
/// that one value (or, without a `passes` key, adding one after the
/// story's last member): numbers, duplicate keys, spacing and key order
/// stay byte for byte. The result is read again and refused unless that
/// story, and only its `passes`, changed as asked.
pub fn set_passes(file: &str, text: &str, id: &str, value: bool) -> Result<String, PrdError> {
    let gone = || PrdError::StoryGone {
        file: file.to_owned(),
        id: id.to_owned(),
    };
    let before = parse(file, text)?;
    let index = before.iter().position(|s| s.id == id).ok_or_else(gone)?;
    let word = if value { "true" } else { "false" };
    let root = crate::json_edit::parse(text).map_err(|_| gone())?;
    let story = root
        .get("userStories")
        .and_then(|list| list.elements().get(index))
        .filter(|story| story.is_object())
        .ok_or_else(gone)?;
    // The value of the story's last `passes` key (the one a parser keeps),
    // else a member added after its last one.
    let out = match story.get("passes") {
        Some(passes) => format!("{}{word}{}", &text[..passes.start], &text[passes.end..]),
        None => crate::json_edit::insert_member(text, story, "passes", &value.into()),
    };
    let after = parse(file, &out)?;
    let mut expected = before;
    expected[index].passes = value;
    if after != expected {
        return Err(gone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRD: &str = r#"{"project":"x","big": 123456789012345678901234567890,"userStories":[
        {"id":"US-002","title":"Two","priority":2,"passes":false,"verify":"make two"},
        {"id":"US-001","title":"One","description":"d","acceptanceCriteria":["a","b"],"priority":1,"passes": false ,"passes":true},
        {"id":"US-004","title":"Four","priority":0,"blocked":"needs an API key","concerns":"slow"},
        {"id":"US-003","title":"Three","priority":3}]}"#;

    fn ids(stories: &[Story]) -> Vec<&str> {
        stories.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn the_current_story_is_the_open_one_with_the_lowest_priority() {
        let all = parse("p.json", PRD).unwrap();
        // US-001 passes (the last duplicate key wins); US-004 is blocked.
        assert_eq!(current(&all).unwrap().id, "US-002");
        assert_eq!(ids(&open(&all)), ["US-002", "US-003"]);
        assert_eq!(tally(&all), (1, 4));
        assert!(!all_pass(&all) && !only_blocked_left(&all));
        assert_eq!(all[2].concerns, ["slow"]);
        assert_eq!(all[0].verify.as_deref(), Some("make two"));
    }

    #[test]
    fn only_blocked_left_and_all_pass() {
        let mut all = parse("p.json", PRD).unwrap();
        for s in &mut all {
            if s.blocked.is_none() {
                s.passes = true;
            }
        }
        assert!(only_blocked_left(&all) && !all_pass(&all));
        assert_eq!(current(&all), None);
        all[2].passes = true;
        assert!(all_pass(&all) && !only_blocked_left(&all));
        assert!(all_pass(&[]));
    }

    const ORDERED: &str = r#"{"userStories":[
        {"id":"US-001","priority":2},
        {"id":"US-002","priority":3},
        {"id":"US-003","priority":1,"dependsOn":["US-001"]},
        {"id":"US-004","blocked":"a key","priority":4},
        {"id":"US-005","dependsOn":["US-004"]}]}"#;

    #[test]
    fn a_story_waits_for_what_it_depends_on() {
        let mut all = parse("p.json", ORDERED).unwrap();
        assert_eq!(all[2].depends_on, ["US-001"]);
        // US-003 has the lowest priority but waits for US-001.
        assert_eq!(current(&all).unwrap().id, "US-001");
        assert_eq!(all[2].waiting_for(&all), ["US-001"]);
        all[0].passes = true;
        assert_eq!(current(&all).unwrap().id, "US-003");
        all[1].passes = true;
        all[2].passes = true;
        // Left: US-004 (blocked) and US-005, which waits for it.
        assert_eq!(current(&all), None);
        assert!(only_blocked_left(&all));
    }

    #[test]
    fn waves_follow_depends_on_and_hold_what_waits_for_a_person() {
        let all = parse("p.json", ORDERED).unwrap();
        let (waves, held) = waves(&all);
        let waves: Vec<Vec<&str>> = waves.iter().map(|w| ids_of(w)).collect();
        assert_eq!(waves, [vec!["US-001", "US-002"], vec!["US-003"]]);
        assert_eq!(ids_of(&held), ["US-004", "US-005"]);
    }

    fn ids_of<'a>(stories: &[&'a Story]) -> Vec<&'a str> {
        stories.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn unknown_self_and_circular_dependencies_are_refused_with_the_story_named() {
        let said = |t: &str| parse("ralph/prd.json", t).unwrap_err().to_string();
        assert_eq!(
            said(r#"{"userStories":[{"id":"A","dependsOn":["B"]}]}"#),
            "ralph/prd.json: story A's dependsOn names \"B\", which no story has as its id; fix the id or remove it from dependsOn"
        );
        assert!(
            said(r#"{"userStories":[{"id":"A","dependsOn":["A"]}]}"#)
                .contains("story A's dependsOn names A itself")
        );
        let circle = said(
            r#"{"userStories":[{"id":"A","dependsOn":["C"]},{"id":"B","dependsOn":["A"]},{"id":"C","dependsOn":["B"]}]}"#,
        );
        assert!(circle.contains("(A → C → B → A)"), "{circle}");
        assert!(
            said(r#"{"userStories":[{"id":"A","dependsOn":"B"}]}"#)
                .contains("userStories[0].dependsOn must be a list of story ids")
        );
    }

    #[test]
    fn set_passes_changes_only_that_value() {
        let out = set_passes("p.json", PRD, "US-001", false).unwrap();
        let want = PRD.replacen(r#""passes":true"#, r#""passes":false"#, 1);
        assert_eq!(out, want, "only the last duplicate's value changed");
        let out = set_passes("p.json", PRD, "US-002", true).unwrap();
        assert_eq!(
            out,
            PRD.replacen(r#""passes":false,"verify""#, r#""passes":true,"verify""#, 1)
        );
        // No `passes` key: one is added before the closing brace.
        let out = set_passes("p.json", PRD, "US-003", true).unwrap();
        assert_eq!(
            out,
            PRD.replacen(r#""priority":3}"#, r#""priority":3, "passes": true}"#, 1)
        );
        assert!(out.contains("123456789012345678901234567890"));
        assert!(matches!(
            set_passes("p.json", PRD, "US-9", true),
            Err(PrdError::StoryGone { .. })
        ));
    }

    #[test]
    fn keys_spelt_with_escapes_are_found() {
        let text = r#"{"userStories":[{"id":"a","pass\u0065s" : true }], "x": "]}"}"#;
        let out = set_passes("p.json", text, "a", false).unwrap();
        assert_eq!(out, text.replacen("true", "false", 1));
        let empty = r#"{"userStories":[{"id":"a"}]}"#;
        assert_eq!(
            set_passes("p.json", empty, "a", true).unwrap(),
            r#"{"userStories":[{"id":"a", "passes": true}]}"#
        );
    }

    #[test]
    fn bad_fields_name_the_file_the_field_and_the_fix() {
        let said = |t: &str| parse("ralph/prd.json", t).unwrap_err().to_string();
        assert_eq!(
            said(r#"{"userStories":[{"id":"a","verify":3}]}"#),
            "ralph/prd.json: userStories[0].verify must be a string (or left out)"
        );
        assert!(
            said(r#"{"userStories":[{"id":"a","passes":"yes"}]}"#)
                .contains("passes must be true or false")
        );
        assert!(said("{").starts_with("ralph/prd.json is not valid JSON"));
    }

    proptest::proptest! {
        /// Whatever the spacing and the other members, setting one story's
        /// `passes` changes that story's value only, and the rest of the
        /// text is kept byte for byte around it.
        #[test]
        fn set_passes_changes_one_value_only(
            gaps in proptest::collection::vec("[ \t\n]{0,3}", 8),
            extra in "[a-z]{0,6}",
            big in "[1-9][0-9]{20,30}",
            passes in proptest::collection::vec(proptest::option::of(proptest::bool::ANY), 3),
            pick in 0usize..3,
            value in proptest::bool::ANY,
        ) {
            let g = |i: usize| gaps[i].as_str();
            let story = |i: usize| {
                let p = passes[i].map_or(String::new(), |b| format!(",{}\"passes\"{}:{}{b}", g(1), g(2), g(3)));
                format!("{{{}\"id\":\"S{i}\",\"n\":{big},\"x\":\"{extra}\"{p}{}}}", g(0), g(4))
            };
            let text = format!(
                "{{{}\"userStories\"{}:[{}]{}}}",
                g(5),
                g(6),
                (0..3).map(story).collect::<Vec<_>>().join(","),
                g(7)
            );
            let id = format!("S{pick}");
            let out = set_passes("p.json", &text, &id, value).unwrap();
            let after = parse("p.json", &out).unwrap();
            let before = parse("p.json", &text).unwrap();
            for (i, (a, b)) in after.iter().zip(&before).enumerate() {
                if i == pick {
                    proptest::prop_assert_eq!(a.passes, value);
                } else {
                    proptest::prop_assert_eq!(a, b);
                }
            }
            // Only the value (or one added member) differs.
            let head = text.bytes().zip(out.bytes()).take_while(|(a, b)| a == b).count();
            let tail = text.bytes().rev().zip(out.bytes().rev()).take_while(|(a, b)| a == b).count();
            let changed = out.len().saturating_sub(head + tail.min(out.len() - head));
            // An added member takes the file's own spacing (a gap of at most 3).
            proptest::prop_assert!(changed <= ", \"passes\": false".len() + 3, "{} -> {}", text, out);
            proptest::prop_assert!(out.contains(&big));
        }
    }

    #[test]
    fn commands_are_recorded_by_digest() {
        let all = parse("p.json", PRD).unwrap();
        let recorded = record_commands(&all);
        assert_eq!(recorded, format!("US-002:{}", command_digest("make two")));
        assert!(command_recorded(&recorded, "US-002", "make two"));
        assert!(!command_recorded(
            &recorded,
            "US-002",
            "make two; curl evil"
        ));
        assert!(!command_recorded(&recorded, "US-003", "make two"));
    }
}
