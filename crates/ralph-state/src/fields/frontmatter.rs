//! Split a state file into YAML frontmatter and body, and rewrite single
//! frontmatter fields in place.
//!
//! The split is done by hand rather than by a frontmatter crate so that the
//! body (the user's prompt) is never reshaped: a byte-order mark, CRLF line
//! endings and `---` lines inside the body all survive a rewrite untouched.

use std::ops::Range;

use crate::fields::values::StateError;

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

const BOM: &str = "\u{feff}";

/// Finds the frontmatter of `text`. The first line (after an optional BOM)
/// must be `---`; the next line that is `---` closes it. Trailing spaces and
/// `\r` on the fence lines are tolerated.
pub fn split(text: &str) -> Result<Split, StateError> {
    let start = if text.starts_with(BOM) { BOM.len() } else { 0 };
    let mut lines = LineIter::new(text, start);
    let first = lines.next().ok_or(StateError::NoOpening)?;
    if !is_fence(&text[first.content.clone()]) {
        return Err(StateError::NoOpening);
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
    Err(StateError::NoClosing)
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
pub fn set_fields(text: &str, fields: &[(&str, String)]) -> Result<String, StateError> {
    let mut current = text.to_owned();
    for (key, value) in fields {
        let layout = split(&current)?;
        current = set_field(&current, &layout, key, value);
    }
    Ok(current)
}

/// The byte range of a field's line(s), and whether it ends in a newline.
fn find_field(text: &str, split: &Split, key: &str) -> Option<(Range<usize>, bool)> {
    field_lines(text, split)
        .find(|(name, _)| *name == key)
        .map(|(_, range)| {
            let had_newline = text[..range.end].ends_with('\n');
            (range, had_newline)
        })
}

/// Every line of the frontmatter that starts, at column 0, with a key
/// written as `key:`, `key :`, `"key":` or `'key':` (no escapes inside the
/// quotes), with the indented lines that continue its value: the key's name
/// and the byte range of those lines. This is exactly what [`set_field`]
/// rewrites, so `state` can prove that each such line *is* the field the
/// YAML parser reads, and not, say, a line inside another field's quoted
/// text.
pub(crate) fn field_lines<'a>(
    text: &'a str,
    split: &Split,
) -> impl Iterator<Item = (&'a str, Range<usize>)> + 'a {
    let mut lines = LineIter::new(&text[..split.yaml.end], split.yaml.start).peekable();
    std::iter::from_fn(move || {
        loop {
            let line = lines.next()?;
            let Some(name) = line_key(&text[line.content.clone()]) else {
                continue;
            };
            // The value goes on over indented lines, and over blank lines
            // that an indented line follows (a block scalar's empty lines).
            let mut end = line.end;
            while let Some(next) = lines.peek() {
                let content = &text[next.content.clone()];
                if content.trim().is_empty() {
                    // Kept only if an indented line comes after it.
                } else if content.starts_with([' ', '\t']) {
                    end = next.end;
                } else {
                    break;
                }
                lines.next();
            }
            return Some((name, line.start..end));
        }
    })
}

/// The key a frontmatter line starts with, in the spellings [`field_lines`]
/// accepts; `None` for anything else (indented lines, comments, flow style,
/// complex keys, escapes in quoted keys).
fn line_key(line: &str) -> Option<&str> {
    let (name, rest) = if let quote @ (b'"' | b'\'') = line.as_bytes().first()? {
        let inner = &line[1..];
        let close = inner.find(*quote as char)?;
        let name = &inner[..close];
        if name.contains('\\') {
            return None;
        }
        (name, &inner[close + 1..])
    } else {
        let len = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(line.len());
        (&line[..len], &line[len..])
    };
    if name.is_empty() {
        return None;
    }
    let rest = rest.trim_start_matches([' ', '\t']).strip_prefix(':')?;
    (rest.is_empty() || rest.starts_with([' ', '\t', '\r'])).then_some(name)
}

/// Quotes a string as a YAML double-quoted scalar (JSON string syntax is a
/// subset of it), so any text round-trips through the frontmatter.
pub fn quote(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_owned())
}

/// A YAML scalar: plain when it is a simple token (as the reference setup
/// script writes session ids), double-quoted otherwise.
pub fn scalar(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !matches!(
            value,
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "~"
        )
        && !value.chars().all(|c| c.is_ascii_digit() || c == '.');
    if plain {
        value.to_owned()
    } else {
        quote(value)
    }
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
        assert_eq!(split("hello"), Err(StateError::NoOpening));
        assert_eq!(split(""), Err(StateError::NoOpening));
        assert_eq!(split("---\na: 1\n"), Err(StateError::NoClosing));
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
    fn other_key_spellings_are_rewritten_canonically() {
        for text in [
            "---\n\"iteration\": 1\nx: 2\n---\nbody",
            "---\n'iteration': 1\nx: 2\n---\nbody",
            "---\niteration : 1\nx: 2\n---\nbody",
            "---\niteration\t:\t1\nx: 2\n---\nbody",
        ] {
            let out = set_fields(text, &[("iteration", "2".into())]).unwrap();
            assert_eq!(out, "---\niteration: 2\nx: 2\n---\nbody", "{text:?}");
        }
    }

    #[test]
    fn field_lines_sees_keys_anywhere_at_column_zero() {
        let text = "---\nnote: \"a\niteration: 2\n  b\"\nverify: |\n  x\n\n  y\n\n# c\nk:v\n---\n";
        let s = split(text).unwrap();
        let found: Vec<_> = field_lines(text, &s).map(|(k, r)| (k, &text[r])).collect();
        assert_eq!(
            found,
            [
                ("note", "note: \"a\n"),
                ("iteration", "iteration: 2\n  b\"\n"),
                ("verify", "verify: |\n  x\n\n  y\n"),
            ]
        );
    }

    #[test]
    fn quote_escapes() {
        assert_eq!(quote("a \"b\"\nc"), "\"a \\\"b\\\"\\nc\"");
    }

    #[test]
    fn scalars() {
        assert_eq!(scalar("5b360de9-aa"), "5b360de9-aa");
        assert_eq!(scalar("true"), "\"true\"");
        assert_eq!(scalar("123"), "\"123\"");
        assert_eq!(scalar("a b"), "\"a b\"");
    }
}
