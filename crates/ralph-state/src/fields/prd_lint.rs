//! `ralph prd lint`: what makes a PRD's stories impossible to check, found
//! in the text alone (deterministic, no model, no file read): a story with
//! no check, a check that cannot fail, vague criteria, a story too large
//! for one context, ids missing or used twice, and `dependsOn` that names
//! no story, the story itself, or goes round in a circle. Each finding
//! names the story and the fix. Errors refuse arming a `--prd` loop and
//! starting `ralph run --parallel`; warnings are shown and refuse nothing.

use serde_json::Value;

use super::stories::{self, PrdError, Story};

/// A story with more acceptance criteria than this is "too large".
pub(crate) const MAX_CRITERIA: usize = 8;
/// A story whose title, description and criteria hold more characters
/// than this is "too large".
pub(crate) const MAX_STORY_CHARS: usize = 2000;

/// Words and phrases no command can check, matched as whole words in any
/// case in a story's acceptance criteria. A PRD adds its own with a
/// top-level `"vagueWords": ["snappy", …]` list.
pub(crate) const VAGUE_WORDS: &[&str] = &[
    "works correctly",
    "correctly",
    "properly",
    "appropriate",
    "appropriately",
    "as expected",
    "as needed",
    "user-friendly",
    "intuitive",
    "seamless",
    "seamlessly",
    "robust",
    "nice",
    "good",
    "better",
    "fast enough",
    "efficient",
    "reasonable",
    "etc",
    "and so on",
    "works well",
];

/// How much a finding weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The PRD cannot be used as it is: arming and `--parallel` refuse it.
    Error,
    /// A hole worth closing; shown, refuses nothing.
    Warning,
}

/// One thing the lint found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    /// The rule's name, as `ralph prd lint` prints it (e.g. `no-check`).
    pub rule: &'static str,
    /// What is wrong, where, and the fix (controls escaped).
    pub message: String,
}

impl Finding {
    fn error(rule: &'static str, message: String) -> Self {
        Self {
            severity: Severity::Error,
            rule,
            message,
        }
    }

    fn warning(rule: &'static str, message: String) -> Self {
        Self {
            severity: Severity::Warning,
            rule,
            message,
        }
    }

    /// The finding as one line: `error[rule] message`.
    pub fn line(&self) -> String {
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        format!("{kind}[{}] {}", self.rule, self.message)
    }
}

/// Whether any finding is an error.
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}

/// Every finding for the PRD `text` (read from `file`): ids first (all of
/// them, so a PRD with two bad ids names both), then the file as the loops
/// read it, then each story's rules in file order.
pub fn lint(file: &str, text: &str) -> Vec<Finding> {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return parse_failure(file, text);
    };
    let Some(list) = value.get("userStories").and_then(Value::as_array) else {
        return parse_failure(file, text);
    };
    let mut out = id_findings(file, list);
    if !out.is_empty() {
        return out;
    }
    let all = match stories::parse(file, text) {
        Ok(all) => all,
        Err(e) => return vec![from_prd_error(&e)],
    };
    let extra = extra_vague_words(&value);
    for story in &all {
        out.extend(story_findings(story, &extra));
    }
    out
}

fn parse_failure(file: &str, text: &str) -> Vec<Finding> {
    match stories::parse(file, text) {
        Err(e) => vec![from_prd_error(&e)],
        Ok(_) => Vec::new(),
    }
}

/// A PRD error as a finding: always an error (no loop can read the file).
fn from_prd_error(e: &PrdError) -> Finding {
    let rule = match e {
        PrdError::UnknownDependency { .. }
        | PrdError::SelfDependency { .. }
        | PrdError::DependencyCycle { .. } => "depends-on",
        PrdError::MissingId { .. } => "missing-id",
        PrdError::DuplicateId { .. } => "duplicate-id",
        PrdError::BadId { .. } => "bad-id",
        _ => "unreadable",
    };
    Finding::error(rule, e.to_string())
}

/// Each story without an id, with an id no branch can have, or with an
/// id another story has.
fn id_findings(file: &str, list: &[Value]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (index, s) in list.iter().enumerate() {
        let Some(id) = s.get("id").and_then(Value::as_str) else {
            out.push(Finding::error(
                "missing-id",
                format!(
                    "{file}: userStories[{index}] has no id; give it one, e.g. \"id\": \"US-{:03}\"",
                    index + 1
                ),
            ));
            continue;
        };
        if !stories::valid_id(id) {
            let e = PrdError::BadId {
                file: file.to_owned(),
                index,
                id: id.to_owned(),
            };
            out.push(Finding::error("bad-id", e.to_string()));
            continue;
        }
        // Loop names take no `.`: `US.1` and `US_1` would share one.
        if let Some(first) = seen.insert(id.replace('.', "_"), index) {
            out.push(Finding::error(
                "duplicate-id",
                format!(
                    "{file}: userStories[{index}].id {id:?} is also the id of userStories[{first}] (ids that differ only by `.` and `_` count as one); give each story its own"
                ),
            ));
        }
    }
    out
}

/// The PRD's own vague words (`"vagueWords"`), lower-cased.
fn extra_vague_words(value: &Value) -> Vec<String> {
    value
        .get("vagueWords")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(|w| w.trim().to_lowercase())
                .filter(|w| !w.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// One story's findings: its check, its criteria, its size.
fn story_findings(story: &Story, extra: &[String]) -> Vec<Finding> {
    let id = ralph_fs::display::line(&story.id);
    let mut out = Vec::new();
    match &story.verify {
        None => out.push(Finding::warning(
            "no-check",
            format!(
                "{id} has no check: nothing but the agent's word says it is done; add \"verify\": \"CMD\", a command that fails until the story is done"
            ),
        )),
        Some(command) if cannot_fail(command) => out.push(Finding::error(
            "cannot-fail",
            format!(
                "{id}'s verify `{}` cannot fail, so it checks nothing; replace it with a command that fails until the story is done (a test, a grep, a build)",
                ralph_fs::display::line(command)
            ),
        )),
        Some(_) => {}
    }
    for criterion in &story.criteria {
        if let Some(word) = vague_word(criterion, extra) {
            out.push(Finding::warning(
                "vague",
                format!(
                    "{id}: the criterion \"{}\" says \"{word}\", which no command can check; say what is observed instead (a value, a file, a test that passes)",
                    ralph_fs::display::line(criterion)
                ),
            ));
        }
    }
    let size = story.title.chars().count()
        + story.description.chars().count()
        + story
            .criteria
            .iter()
            .map(|c| c.chars().count())
            .sum::<usize>();
    if story.criteria.len() > MAX_CRITERIA || size > MAX_STORY_CHARS {
        out.push(Finding::warning(
            "too-large",
            format!(
                "{id} is too large for one context ({} criteria, {size} characters; at most {MAX_CRITERIA} and {MAX_STORY_CHARS}); split it into smaller stories, the later ones with \"dependsOn\" on the first",
                story.criteria.len()
            ),
        ));
    }
    out
}

/// The first vague word or phrase the criterion holds as whole words.
fn vague_word<'a>(criterion: &str, extra: &'a [String]) -> Option<&'a str> {
    let text = criterion.to_lowercase();
    VAGUE_WORDS
        .iter()
        .copied()
        .chain(extra.iter().map(String::as_str))
        .find(|w| holds_word(&text, w))
}

/// Whether `text` holds `word` with no letter, digit, `-` or `_` on either side.
fn holds_word(text: &str, word: &str) -> bool {
    let part = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(part) && !after.is_some_and(part)
    })
}

/// Whether the shell command can only succeed: its last step (after the
/// last `;` or newline outside quotes) is one that always exits 0, or ends
/// in `|| X` with such an X (`true`, `:`, `exit 0`, `echo …`, `printf …`).
pub(crate) fn cannot_fail(command: &str) -> bool {
    let steps = split_outside_quotes(command, &[";", "\n", "&"]);
    let Some(last) = steps.iter().rev().find(|s| !s.trim().is_empty()) else {
        return true;
    };
    let alternatives = split_outside_quotes(last, &["||"]);
    if alternatives.len() > 1 && alternatives[1..].iter().any(|a| always_succeeds(a)) {
        return true;
    }
    let chain = split_outside_quotes(last, &["&&"]);
    chain.iter().all(|c| always_succeeds(c))
}

/// One simple command that exits 0 whatever happens.
fn always_succeeds(step: &str) -> bool {
    let step = step
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .trim();
    let first = step.split_whitespace().next().unwrap_or("");
    // `echo x > file` can fail (the file cannot be written): only a bare echo always succeeds.
    matches!(
        step,
        "true" | ":" | "exit 0" | "/bin/true" | "/usr/bin/true"
    ) || (matches!(first, "echo" | "printf") && !step.contains(['>', '|']))
}

/// `text` cut at each of `separators` found outside single and double
/// quotes (a separator of two characters is matched before `|` or `&`).
fn split_outside_quotes<'a>(text: &'a str, separators: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut quote: Option<char> = None;
    let mut start = 0;
    // Bytes of a separator (or of a `&&`/`||` that is not one) still to pass.
    let mut skip = 0;
    for (i, c) in text.char_indices() {
        if skip > 0 {
            skip -= 1;
            continue;
        }
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None => {
                let rest = &text[i..];
                // `&&` and `||` are never a lone `&` or `|`.
                let doubled = rest.starts_with("&&") || rest.starts_with("||");
                if let Some(sep) = separators
                    .iter()
                    .find(|s| rest.starts_with(**s) && (s.len() == 2 || !doubled))
                {
                    out.push(&text[start..i]);
                    start = i + sep.len();
                    skip = sep.len() - 1;
                } else if doubled {
                    skip = 1;
                }
            }
        }
    }
    out.push(&text[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Vec<&'static str> {
        lint("p.json", text).iter().map(|f| f.rule).collect()
    }

    #[test]
    fn commands_that_cannot_fail_are_found() {
        for c in [
            "true",
            ":",
            "exit 0",
            "echo done",
            "make test || true",
            "make test || echo failed",
            "make test; true",
            "make test\nexit 0",
            "(true)",
            "printf ok && true",
        ] {
            assert!(cannot_fail(c), "{c:?}");
        }
        for c in [
            "make test",
            "cargo test && echo ok",
            "grep -q 'a || true' f",
            "test -s a && ! grep -n x b",
            "true && make test",
            "make a || make b",
            "echo ran > marker",
            "true \u{1b}[2J\u{202e}",
            "é && make",
        ] {
            assert!(!cannot_fail(c), "{c:?}");
        }
    }

    proptest::proptest! {
        /// Any text, any bytes around quotes and separators: an answer, never a panic.
        #[test]
        fn any_command_gets_an_answer(command in "\\PC*[;&|'\"\\n]?\\PC*") {
            let _ = cannot_fail(&command);
            let _ = vague_word(&command, &[]);
        }
    }

    #[test]
    fn vague_words_match_whole_words_only_and_a_prd_adds_its_own() {
        assert_eq!(
            vague_word("It works correctly", &[]),
            Some("works correctly")
        );
        assert_eq!(vague_word("Migration applies cleanly", &[]), None);
        assert_eq!(vague_word("goodbye page", &[]), None);
        let extra = vec!["snappy".to_owned()];
        assert_eq!(vague_word("The list is Snappy.", &extra), Some("snappy"));
    }

    #[test]
    fn each_rule_fires_and_names_the_story() {
        let prd = r#"{"vagueWords":["snappy"],"userStories":[
            {"id":"US-001","acceptanceCriteria":["a b c"]},
            {"id":"US-002","verify":"exit 0"},
            {"id":"US-003","verify":"t","acceptanceCriteria":["is snappy"]},
            {"id":"US-004","verify":"t","acceptanceCriteria":["1","2","3","4","5","6","7","8","9"]}]}"#;
        let found = lint("p.json", prd);
        let got: Vec<(&str, Severity)> = found.iter().map(|f| (f.rule, f.severity)).collect();
        assert_eq!(
            got,
            [
                ("no-check", Severity::Warning),
                ("cannot-fail", Severity::Error),
                ("vague", Severity::Warning),
                ("too-large", Severity::Warning)
            ]
        );
        assert!(
            found[1]
                .message
                .starts_with("US-002's verify `exit 0` cannot fail")
        );
        assert_eq!(
            rules(r#"{"userStories":[{"id":"A","verify":"t"},{"title":"x"},{"id":"A"}]}"#),
            ["missing-id", "duplicate-id"]
        );
        assert_eq!(
            rules(r#"{"userStories":[{"id":"A","verify":"t","dependsOn":["B"]}]}"#),
            ["depends-on"]
        );
    }
}
