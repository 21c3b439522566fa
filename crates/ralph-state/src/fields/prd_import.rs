//! `ralph prd import FILE.md`: a Markdown PRD in the common shape, one
//! heading a story (`## US-001: Title`, or `###`/`####`), turned into the
//! text of a `prd.json` (pure: the reading and writing are `control`'s).
//! Under a story's heading: `**Description:**` or plain paragraphs (its
//! description), the list after an "Acceptance criteria" line (its criteria,
//! `- [ ]` boxes dropped), and `**Priority:**`, `**Verify:**` (a command, in
//! backticks or not) and `**Depends on:**` (ids) lines. Stories take their
//! file order as priority when none is given; none passes.

use serde_json::{Value, json};

use super::stories;

/// The `prd.json` text of the Markdown PRD `text` (`name` is the project's
/// name when the file has no `# Title`), or `None` when no heading names a
/// story.
pub fn from_markdown(name: &str, text: &str) -> Option<String> {
    let mut project = None;
    let mut stories: Vec<Draft> = Vec::new();
    let mut level = 0;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some((depth, heading)) = heading(trimmed) {
            if depth == 1 && project.is_none() {
                project = Some(heading.to_owned());
            }
            if let Some(draft) = Draft::from_heading(heading) {
                level = depth;
                stories.push(draft);
                continue;
            }
            if depth <= level {
                // A heading at the story's level or above ends it.
                level = 0;
            }
        }
        if level > 0
            && let Some(story) = stories.last_mut()
        {
            story.read(trimmed);
        }
    }
    if stories.is_empty() {
        return None;
    }
    let list: Vec<Value> = stories.iter().enumerate().map(|(i, s)| s.json(i)).collect();
    let prd = json!({
        "project": project.unwrap_or_else(|| name.to_owned()),
        "userStories": list,
    });
    serde_json::to_string_pretty(&prd).ok().map(|t| t + "\n")
}

/// `## Heading` as its depth and text.
fn heading(line: &str) -> Option<(usize, &str)> {
    let depth = line.chars().take_while(|c| *c == '#').count();
    let rest = line.get(depth..)?;
    (depth > 0 && rest.starts_with(' ')).then(|| (depth, rest.trim()))
}

/// One story as read so far.
#[derive(Default)]
struct Draft {
    id: String,
    title: String,
    description: Vec<String>,
    criteria: Vec<String>,
    priority: Option<i64>,
    verify: Option<String>,
    depends_on: Vec<String>,
    /// The lines read are the acceptance criteria's list.
    in_criteria: bool,
}

impl Draft {
    /// A heading that starts with a story id (`US-001: Title`,
    /// `US-001 - Title`, `US-001 Title`): a letter first, then a digit
    /// somewhere, so "Overview" or "Goals" are not stories.
    fn from_heading(heading: &str) -> Option<Self> {
        let end = heading
            .find(|c: char| c.is_whitespace() || c == ':')
            .unwrap_or(heading.len());
        let id = heading[..end].trim_end_matches(['.', ')']);
        let looks_like_id = id.starts_with(|c: char| c.is_ascii_alphabetic())
            && id.contains(|c: char| c.is_ascii_digit())
            && stories::valid_id(id);
        if !looks_like_id {
            return None;
        }
        let title = heading[end..]
            .trim_start_matches(|c: char| c.is_whitespace() || matches!(c, ':' | '-' | '–' | '—'))
            .trim();
        Some(Self {
            id: id.to_owned(),
            title: title.to_owned(),
            ..Self::default()
        })
    }

    /// One line under the story's heading.
    fn read(&mut self, line: &str) {
        if line.is_empty() {
            return;
        }
        let plain = line.replace("**", "").replace("__", "");
        let plain = plain.trim_start_matches('#').trim();
        let lower = plain.to_lowercase();
        if lower.starts_with("acceptance criteria") {
            self.in_criteria = true;
            return;
        }
        if let Some(value) = labelled(plain, &["description"]) {
            self.in_criteria = false;
            self.description.push(value.to_owned());
        } else if let Some(value) = labelled(plain, &["priority"]) {
            self.in_criteria = false;
            self.priority = value.trim().parse().ok();
        } else if let Some(value) = labelled(plain, &["verify", "check"]) {
            self.in_criteria = false;
            let command = value.trim().trim_matches('`').trim();
            self.verify = (!command.is_empty()).then(|| command.to_owned());
        } else if let Some(value) = labelled(plain, &["depends on", "dependencies", "dependson"]) {
            self.in_criteria = false;
            self.depends_on = value
                .split(|c: char| c == ',' || c.is_whitespace())
                .map(|w| w.trim_matches(|c: char| !c.is_ascii_alphanumeric()))
                .filter(|w| stories::valid_id(w) && w.contains(|c: char| c.is_ascii_digit()))
                .map(str::to_owned)
                .collect();
        } else if let Some(item) = list_item(line) {
            if self.in_criteria {
                self.criteria.push(item.to_owned());
            } else {
                self.description.push(item.to_owned());
            }
        } else {
            self.in_criteria = false;
            self.description.push(plain.to_owned());
        }
    }

    fn json(&self, index: usize) -> Value {
        let mut story = json!({
            "id": self.id,
            "title": self.title,
            "description": self.description.join(" "),
            "acceptanceCriteria": self.criteria,
            "priority": self.priority.unwrap_or(i64::try_from(index).unwrap_or(i64::MAX - 1).saturating_add(1)),
            "passes": false,
        });
        if let Some(verify) = &self.verify {
            story["verify"] = json!(verify);
        }
        if !self.depends_on.is_empty() {
            story["dependsOn"] = json!(self.depends_on);
        }
        story
    }
}

/// `Label: value` for one of `labels` (any case), as its value.
fn labelled<'a>(line: &'a str, labels: &[&str]) -> Option<&'a str> {
    let (label, value) = line.split_once(':')?;
    let label = label.trim().to_lowercase();
    labels.contains(&label.as_str()).then(|| value.trim())
}

/// A list item's text (`- x`, `* x`, `1. x`), a check box dropped.
fn list_item(line: &str) -> Option<&str> {
    let rest = line
        .strip_prefix("- ")
        .or_else(|| line.strip_prefix("* "))
        .or_else(|| {
            let digits = line.chars().take_while(char::is_ascii_digit).count();
            (digits > 0)
                .then(|| line[digits..].strip_prefix(". "))
                .flatten()
        })?;
    let rest = rest.trim();
    Some(
        ["[ ] ", "[x] ", "[X] "]
            .iter()
            .find_map(|b| rest.strip_prefix(b))
            .unwrap_or(rest)
            .trim(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MD: &str = "# Note tags

## Overview
Tags for notes.

## User Stories

### US-001: Add tags to the model
**Description:** As a developer, I want tags on notes.

**Acceptance Criteria:**
- [ ] The Note model has a tags field
- [ ] Typecheck passes

**Verify:** `npm test -- tags`

### US-002 - Show tags
Each note shows its tags.

Acceptance criteria
1. Tags are shown as labels
**Priority:** 5
**Depends on:** US-001

## Non-Goals
- No tag colours
";

    #[test]
    fn a_markdown_prd_becomes_stories_in_order() {
        let text = from_markdown("x", MD).unwrap();
        let all = stories::parse("prd.json", &text).unwrap();
        assert_eq!(all.len(), 2);
        let (one, two) = (&all[0], &all[1]);
        assert_eq!(
            (one.id.as_str(), one.title.as_str()),
            ("US-001", "Add tags to the model")
        );
        assert_eq!(one.description, "As a developer, I want tags on notes.");
        assert_eq!(
            one.criteria,
            ["The Note model has a tags field", "Typecheck passes"]
        );
        assert_eq!(one.verify.as_deref(), Some("npm test -- tags"));
        assert_eq!(one.priority, Some(1));
        assert_eq!(two.title, "Show tags");
        assert_eq!(two.description, "Each note shows its tags.");
        assert_eq!(two.criteria, ["Tags are shown as labels"]);
        assert_eq!(
            (two.priority, two.depends_on.as_slice()),
            (Some(5), &["US-001".to_owned()][..])
        );
        assert!(text.contains("\"project\": \"Note tags\""));
        // "No tag colours" is under a heading that ends the story.
        assert!(!text.contains("colours"));
    }

    #[test]
    fn a_file_without_story_headings_gives_nothing() {
        assert_eq!(from_markdown("x", "# Plan\n\n## Goals\n- fast\n"), None);
    }
}
