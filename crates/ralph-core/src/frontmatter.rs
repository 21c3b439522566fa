//! Split a state file into YAML frontmatter and body, and rewrite single
//! frontmatter fields in place.
//!
//! The split is done by hand rather than by a frontmatter crate so that the
//! body (the user's prompt) is never reshaped: a byte-order mark, CRLF line
//! endings and `---` lines inside the body all survive a rewrite untouched.

use std::ops::Range;

/// Where the parts of a frontmatter document lie, as byte ranges of the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The YAML between the opening and closing `---` lines.
    pub yaml: Range<usize>,
    /// Everything after the closing `---` line.
    pub body: Range<usize>,
    /// The line ending the document uses (`"\r\n"` or `"\n"`), taken from its first line.
    pub newline: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    #[error("the file does not start with a `---` line (expected YAML frontmatter)")]
    NoOpening,
    #[error("the frontmatter has no closing `---` line")]
    NoClosing,
}

const BOM: &str = "\u{feff}";

/// Finds the frontmatter of `text`. The first line (after an optional BOM)
/// must be `---`; the next line that is `---` closes it. Trailing spaces and
/// `\r` on the fence lines are tolerated.
pub fn split(text: &str) -> Result<Split, SplitError> {
    let start = if text.starts_with(BOM) { BOM.len() } else { 0 };
    let mut lines = LineIter::new(text, start);
    let first = lines.next().ok_or(SplitError::NoOpening)?;
    if !is_fence(&text[first.content.clone()]) {
        return Err(SplitError::NoOpening);
    }
    let newline = if text[first.content.end..first.end].starts_with("\r\n")
        || text[first.content.clone()].ends_with('\r')
    {
        "\r\n"
    } else {
        "\n"
    };
    let yaml_start = first.end;
    for line in lines {
        if is_fence(&text[line.content.clone()]) {
            return Ok(Split {
                yaml: yaml_start..line.start,
                body: line.end..text.len(),
                newline,
            });
        }
    }
    Err(SplitError::NoClosing)
}

fn is_fence(line: &str) -> bool {
    line.trim_end_matches([' ', '\t', '\r']) == "---"
}

/// One line of text: `start..end` includes the line ending, `content` does not.
struct Line {
    start: usize,
    content: Range<usize>,
    end: usize,
}

struct LineIter<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> LineIter<'a> {
    fn new(text: &'a str, pos: usize) -> Self {
        Self { text, pos }
    }
}

impl Iterator for LineIter<'_> {
    type Item = Line;
    fn next(&mut self) -> Option<Line> {
        if self.pos >= self.text.len() {
            return None;
        }
        let start = self.pos;
        let rest = &self.text[start..];
        let (content_end, end) = match rest.find('\n') {
            Some(i) => (start + i, start + i + 1),
            None => (self.text.len(), self.text.len()),
        };
        self.pos = end;
        Some(Line {
            start,
            content: start..content_end,
            end,
        })
    }
}

/// Returns `text` with the top-level frontmatter field `key` set to the YAML
/// scalar `value` (already quoted as needed). Only that field's line (and its
/// indented continuation lines, if any) changes; a missing field is appended
/// at the end of the frontmatter. Everything else stays byte-for-byte.
pub fn set_field(text: &str, split: &Split, key: &str, value: &str) -> String {
    let (range, had_newline) = match find_field(text, split, key) {
        Some(found) => found,
        None => (split.yaml.end..split.yaml.end, true),
    };
    let mut out = String::with_capacity(text.len() + key.len() + value.len() + 4);
    out.push_str(&text[..range.start]);
    out.push_str(key);
    out.push_str(": ");
    out.push_str(value);
    if had_newline {
        out.push_str(split.newline);
    }
    out.push_str(&text[range.end..]);
    out
}

/// Sets several fields, one after the other.
pub fn set_fields(text: &str, fields: &[(&str, String)]) -> Result<String, SplitError> {
    let mut current = text.to_owned();
    for (key, value) in fields {
        let layout = split(&current)?;
        current = set_field(&current, &layout, key, value);
    }
    Ok(current)
}

/// The byte range of a field's line(s), and whether it ends in a newline.
fn find_field(text: &str, split: &Split, key: &str) -> Option<(Range<usize>, bool)> {
    let mut lines = LineIter::new(&text[..split.yaml.end], split.yaml.start).peekable();
    while let Some(line) = lines.next() {
        let content = &text[line.content.clone()];
        let Some(rest) = content.strip_prefix(key) else {
            continue;
        };
        if !rest.starts_with(':') {
            continue;
        }
        let mut end = line.end;
        while let Some(next) = lines.peek() {
            let next_content = &text[next.content.clone()];
            if next_content.starts_with([' ', '\t']) {
                end = next.end;
                lines.next();
            } else {
                break;
            }
        }
        let had_newline = text[..end].ends_with('\n');
        return Some((line.start..end, had_newline));
    }
    None
}

/// Quotes a string as a YAML double-quoted scalar (JSON string syntax is a
/// subset of it), so any text round-trips through the frontmatter.
pub fn quote(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_reference_layout() {
        let text = "---\nactive: true\niteration: 1\n---\n\nDo the thing\n";
        let s = split(text).unwrap();
        assert_eq!(&text[s.yaml.clone()], "active: true\niteration: 1\n");
        assert_eq!(&text[s.body.clone()], "\nDo the thing\n");
        assert_eq!(s.newline, "\n");
    }

    #[test]
    fn body_may_contain_fences() {
        let text = "---\na: 1\n---\nbefore\n---\nb: 2\n---\nafter";
        let s = split(text).unwrap();
        assert_eq!(&text[s.body.clone()], "before\n---\nb: 2\n---\nafter");
    }

    #[test]
    fn handles_bom_and_crlf() {
        let text = "\u{feff}---\r\niteration: 2\r\n---\r\nbody\r\n";
        let s = split(text).unwrap();
        assert_eq!(&text[s.yaml.clone()], "iteration: 2\r\n");
        assert_eq!(s.newline, "\r\n");
        let out = set_field(text, &s, "iteration", "3");
        assert_eq!(out, "\u{feff}---\r\niteration: 3\r\n---\r\nbody\r\n");
    }

    #[test]
    fn missing_fences_are_errors() {
        assert_eq!(split("hello"), Err(SplitError::NoOpening));
        assert_eq!(split(""), Err(SplitError::NoOpening));
        assert_eq!(split("---\na: 1\n"), Err(SplitError::NoClosing));
    }

    #[test]
    fn set_field_touches_only_its_line() {
        let text = "---\niteration: 1\nx-custom: keep me\n---\niteration: 99 in body\n";
        let out = set_fields(text, &[("iteration", "2".into())]).unwrap();
        assert_eq!(
            out,
            "---\niteration: 2\nx-custom: keep me\n---\niteration: 99 in body\n"
        );
    }

    #[test]
    fn set_field_matches_whole_key() {
        let text = "---\niteration_note: a\niteration: 1\n---\n";
        let out = set_fields(text, &[("iteration", "5".into())]).unwrap();
        assert_eq!(out, "---\niteration_note: a\niteration: 5\n---\n");
    }

    #[test]
    fn set_field_appends_missing_and_replaces_block_values() {
        let text = "---\nprompt: |\n  line one\n  line two\nother: 1\n---\nbody";
        let out = set_fields(text, &[("prompt", "x".into()), ("new", "\"v\"".into())]).unwrap();
        assert_eq!(out, "---\nprompt: x\nother: 1\nnew: \"v\"\n---\nbody");
    }

    #[test]
    fn quote_escapes() {
        assert_eq!(quote("a \"b\"\nc"), "\"a \\\"b\\\"\\nc\"");
    }
}
