//! Edits of a JSON document (comments allowed, as Gemini CLI and VS Code-style
//! settings files carry them) that change exactly the bytes they mean to:
//! the document is parsed into spans, never re-serialised, so numbers keep
//! their digits, duplicate keys stay, comments and indentation stay. An
//! insertion adds one member or element after the last one, in the file's
//! own indentation; removing that member or element again takes out exactly
//! the bytes the insertion added.

use serde_json::Value;

/// The deepest nesting parsed: a hostile file cannot exhaust the stack.
const MAX_DEPTH: usize = 128;

/// A value and where it is in the text: `start..end` are byte offsets.
#[derive(Debug)]
pub struct Node {
    pub start: usize,
    pub end: usize,
    pub kind: NodeKind,
}

#[derive(Debug)]
pub enum NodeKind {
    Object(Vec<Member>),
    Array(Vec<Node>),
    /// A string, decoded.
    Str(String),
    /// A number, `true`, `false` or `null`, kept as written.
    Scalar,
}

#[derive(Debug)]
pub struct Member {
    pub key: String,
    /// Where the key's opening quote is.
    pub key_start: usize,
    pub value: Node,
}

impl Node {
    pub fn members(&self) -> &[Member] {
        match &self.kind {
            NodeKind::Object(m) => m,
            _ => &[],
        }
    }

    pub fn elements(&self) -> &[Node] {
        match &self.kind {
            NodeKind::Array(e) => e,
            _ => &[],
        }
    }

    /// The value of the last member named `key` (the one a JSON reader
    /// that keeps one value per key sees).
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.members()
            .iter()
            .rev()
            .find(|m| m.key == key)
            .map(|m| &m.value)
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_object(&self) -> bool {
        matches!(self.kind, NodeKind::Object(_))
    }

    pub fn is_array(&self) -> bool {
        matches!(self.kind, NodeKind::Array(_))
    }

    /// The value as data (comments dropped; for a duplicate key, the last).
    pub fn to_value(&self, text: &str) -> Value {
        match &self.kind {
            NodeKind::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|m| (m.key.clone(), m.value.to_value(text)))
                    .collect(),
            ),
            NodeKind::Array(elements) => {
                Value::Array(elements.iter().map(|e| e.to_value(text)).collect())
            }
            NodeKind::Str(s) => Value::String(s.clone()),
            NodeKind::Scalar => {
                serde_json::from_str(&text[self.start..self.end]).unwrap_or(Value::Null)
            }
        }
    }
}

/// Parses a whole document: one value, with whitespace and `//` or `/* */`
/// comments around and inside it.
pub fn parse(text: &str) -> Result<Node, String> {
    let mut p = Parser { text, at: 0 };
    p.skip()?;
    let node = p.value(0)?;
    p.skip()?;
    if p.at != text.len() {
        return Err(p.error("text after the value"));
    }
    Ok(node)
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> String {
        let line = self.text[..self.at].matches('\n').count() + 1;
        format!("{what} at line {line}")
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// Whitespace and comments.
    fn skip(&mut self) -> Result<(), String> {
        loop {
            let rest = &self.text[self.at..];
            let trimmed = rest.trim_start_matches([' ', '\t', '\n', '\r']);
            self.at += rest.len() - trimmed.len();
            if trimmed.starts_with("//") {
                self.at += trimmed.find('\n').unwrap_or(trimmed.len());
            } else if let Some(body) = trimmed.strip_prefix("/*") {
                let end = body
                    .find("*/")
                    .ok_or_else(|| self.error("an unclosed /* comment"))?;
                self.at += end + 4;
            } else {
                return Ok(());
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, String> {
        if depth > MAX_DEPTH {
            return Err(self.error("nesting too deep"));
        }
        let start = self.at;
        let kind = match self.peek() {
            Some(b'{') => NodeKind::Object(self.object(depth)?),
            Some(b'[') => NodeKind::Array(self.array(depth)?),
            Some(b'"') => NodeKind::Str(self.string()?),
            Some(_) => {
                let len = self.text[self.at..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.')))
                    .unwrap_or(self.text.len() - self.at);
                let token = &self.text[self.at..self.at + len];
                if !is_scalar(token) {
                    return Err(self.error("not a JSON value"));
                }
                self.at += len;
                NodeKind::Scalar
            }
            None => return Err(self.error("a value missing")),
        };
        Ok(Node {
            start,
            end: self.at,
            kind,
        })
    }

    fn string(&mut self) -> Result<String, String> {
        let bytes = self.text.as_bytes();
        let mut i = self.at + 1;
        while i < bytes.len() && bytes[i] != b'"' {
            i += if bytes[i] == b'\\' { 2 } else { 1 };
        }
        if i >= bytes.len() {
            return Err(self.error("an unclosed string"));
        }
        let decoded = serde_json::from_str::<String>(&self.text[self.at..=i])
            .map_err(|_| self.error("a bad string"))?;
        self.at = i + 1;
        Ok(decoded)
    }

    fn object(&mut self, depth: usize) -> Result<Vec<Member>, String> {
        self.at += 1;
        let mut members = Vec::new();
        self.skip()?;
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(members);
        }
        loop {
            self.skip()?;
            if self.peek() != Some(b'"') {
                return Err(self.error("a key expected"));
            }
            let key_start = self.at;
            let key = self.string()?;
            self.skip()?;
            if self.peek() != Some(b':') {
                return Err(self.error("`:` expected"));
            }
            self.at += 1;
            self.skip()?;
            let value = self.value(depth + 1)?;
            members.push(Member {
                key,
                key_start,
                value,
            });
            self.skip()?;
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(members);
                }
                _ => return Err(self.error("`,` or `}` expected")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Vec<Node>, String> {
        self.at += 1;
        let mut elements = Vec::new();
        self.skip()?;
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(elements);
        }
        loop {
            self.skip()?;
            elements.push(self.value(depth + 1)?);
            self.skip()?;
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(elements);
                }
                _ => return Err(self.error("`,` or `]` expected")),
            }
        }
    }
}

/// `true`, `false`, `null` or a JSON number (of any size: its digits are
/// kept as written, never converted).
fn is_scalar(token: &str) -> bool {
    if matches!(token, "true" | "false" | "null") {
        return true;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let rest = token.strip_prefix('-').unwrap_or(token);
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (mantissa, None),
    };
    digits(int)
        && (int == "0" || !int.starts_with('0'))
        && frac.is_none_or(digits)
        && exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)))
}

/// The whitespace that starts the line `at` is on.
fn line_indent(text: &str, at: usize) -> &str {
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = &text[line_start..];
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

/// One level of the file's indentation: the first indented line's
/// whitespace, else two spaces.
fn indent_unit(text: &str) -> String {
    text.lines()
        .map(|l| &l[..l.len() - l.trim_start_matches([' ', '\t']).len()])
        .find(|w| !w.is_empty())
        .unwrap_or("  ")
        .to_owned()
}

/// `value` as JSON, pretty in the file's indentation, each line after the
/// first starting with `base`.
fn render(value: &Value, unit: &str, base: &str) -> String {
    use serde::Serialize;
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    let _ = value.serialize(&mut ser);
    String::from_utf8_lossy(&out).replace('\n', &format!("\n{base}"))
}

fn splice(text: &str, from: usize, to: usize, with: &str) -> String {
    format!("{}{with}{}", &text[..from], &text[to..])
}

/// Adds `"key": value` as the object's last member.
pub fn insert_member(text: &str, object: &Node, key: &str, value: &Value) -> String {
    let quoted = Value::String(key.to_owned()).to_string();
    insert_last(
        text,
        object,
        object.members().last().map(|m| (m.key_start, m.value.end)),
        |unit, base| format!("{quoted}: {}", render(value, unit, base)),
    )
}

/// Adds `value` as the array's last element.
pub fn push_element(text: &str, array: &Node, value: &Value) -> String {
    insert_last(
        text,
        array,
        array.elements().last().map(|e| (e.start, e.end)),
        |unit, base| render(value, unit, base),
    )
}

/// `last`: where the container's last item starts and ends.
fn insert_last(
    text: &str,
    container: &Node,
    last: Option<(usize, usize)>,
    item: impl Fn(&str, &str) -> String,
) -> String {
    let unit = indent_unit(text);
    let outer = line_indent(text, container.start);
    match last {
        None => {
            let inner = format!("{outer}{unit}");
            let add = format!("\n{inner}{}\n{outer}", item(&unit, &inner));
            splice(text, container.start + 1, container.start + 1, &add)
        }
        Some((start, end)) if !text[container.start..start].contains('\n') => {
            // A one-line container stays on one line.
            let add = format!(", {}", item("", "").replace('\n', " "));
            splice(text, end, end, &add)
        }
        Some((start, end)) => {
            let inner = line_indent(text, start).to_owned();
            let add = format!(",\n{inner}{}", item(&unit, &inner));
            splice(text, end, end, &add)
        }
    }
}

/// Takes out the object's member `index`, with the separator before it
/// (or after it, for the first of several): what [`insert_member`] added.
pub fn remove_member(text: &str, object: &Node, index: usize) -> String {
    let spans: Vec<(usize, usize)> = object
        .members()
        .iter()
        .map(|m| (m.key_start, m.value.end))
        .collect();
    remove_item(text, object, &spans, index)
}

/// Takes out the array's element `index`, as [`remove_member`] does.
pub fn remove_element(text: &str, array: &Node, index: usize) -> String {
    let spans: Vec<(usize, usize)> = array.elements().iter().map(|e| (e.start, e.end)).collect();
    remove_item(text, array, &spans, index)
}

fn remove_item(text: &str, container: &Node, spans: &[(usize, usize)], index: usize) -> String {
    let Some(&(start, end)) = spans.get(index) else {
        return text.to_owned();
    };
    if spans.len() == 1 {
        // Back to empty; the line break and indent before the closing
        // bracket that an insertion into an empty container added go too.
        let outer = line_indent(text, container.start);
        let tail = format!("\n{outer}");
        let close = container.end - 1;
        let to = if text[end..close].starts_with(&tail)
            && text[end + tail.len()..close].trim().is_empty()
        {
            end + tail.len()
        } else {
            end
        };
        let from = if text[container.start + 1..start].trim().is_empty() {
            container.start + 1
        } else {
            start
        };
        return splice(text, from, to, "");
    }
    if index > 0 {
        splice(text, spans[index - 1].1, end, "")
    } else {
        splice(text, start, spans[1].0, "")
    }
}

/// Replaces a value with `value`, written compactly.
pub fn replace(text: &str, node: &Node, value: &Value) -> String {
    splice(text, node.start, node.end, &value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_comments_big_numbers_and_duplicate_keys_as_written() {
        let text = "// settings\n{\n  /* a */ \"n\": 12345678901234567890123, \"k\": 1, \"k\": 2,\n  \"s\": \"a\\\"b\" // end\n}\n";
        let doc = parse(text).unwrap();
        let n = doc.get("n").unwrap();
        assert_eq!(&text[n.start..n.end], "12345678901234567890123");
        assert_eq!(doc.members().len(), 4);
        assert_eq!(doc.get("k").unwrap().to_value(text), json!(2));
        assert_eq!(doc.get("s").unwrap().as_str(), Some("a\"b"));
        for bad in [
            "{",
            "{\"a\" 1}",
            "[1,]",
            "{} x",
            "/* open",
            "\"open",
            "[01]",
            "[1.]",
            "[+1]",
            "[nul]",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let deep = "[".repeat(100_000);
        assert!(
            parse(&deep).is_err(),
            "deep nesting is refused, not a crash"
        );
    }

    /// Inserting then removing gives back every byte, in every layout.
    #[test]
    fn an_insertion_removed_again_leaves_the_text_as_it_was() {
        for text in [
            "{}",
            "{}\n",
            "{ }\n",
            "{\n  \"a\": 1\n}\n",
            "{\n\t\"a\": [1, 2], // why\n\t\"b\": {\"c\": 1e400}\n}",
            "{\"a\": 1}",
            "// top\n{\n    \"a\": 1 /* trailing */\n}\n",
        ] {
            let doc = parse(text).unwrap();
            let added = insert_member(text, &doc, "hooks", &json!({"Stop": [{"x": 1}]}));
            let again = parse(&added).unwrap_or_else(|e| panic!("{added}: {e}"));
            assert_eq!(
                again.get("hooks").unwrap().to_value(&added),
                json!({"Stop": [{"x": 1}]})
            );
            let index = again.members().len() - 1;
            assert_eq!(remove_member(&added, &again, index), text, "{added}");
        }
        for text in ["[]", "[1]", "[\n  1,\n  2\n]", "[ {\"a\": 1} ]"] {
            let doc = parse(text).unwrap();
            let added = push_element(text, &doc, &json!({"y": [2]}));
            let again = parse(&added).unwrap_or_else(|e| panic!("{added}: {e}"));
            let index = again.elements().len() - 1;
            assert_eq!(remove_element(&added, &again, index), text, "{added}");
        }
    }

    #[test]
    fn insertions_follow_the_files_indentation() {
        let text = "{\n\t\"a\": 1\n}\n";
        let doc = parse(text).unwrap();
        assert_eq!(
            insert_member(text, &doc, "b", &json!({"c": [1]})),
            "{\n\t\"a\": 1,\n\t\"b\": {\n\t\t\"c\": [\n\t\t\t1\n\t\t]\n\t}\n}\n"
        );
        let first = "{\n  \"a\": 1,\n  \"b\": 2\n}";
        assert_eq!(
            remove_member(first, &parse(first).unwrap(), 0),
            "{\n  \"b\": 2\n}"
        );
    }
}
