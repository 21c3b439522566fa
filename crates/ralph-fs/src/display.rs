//! Text from a loop file, a log or a reply, made safe to print to a
//! terminal: control characters (C0, DEL, C1) and the bidirectional
//! overrides and isolates are shown as visible escapes (`\r`, `\x1b`,
//! `\u{202e}`), so a file can neither move the cursor, recolour or clear
//! the screen, nor show `verify cargo test` while its real command reads
//! otherwise. A backslash is left as it is: the escapes are for reading,
//! not for parsing back.
//!
//! Only what people see goes through here. The prompt fed back to the
//! model is the user's text as written.

use std::borrow::Cow;
use std::fmt::Write as _;

/// For one-line places (a name, a command, a status line): every control
/// character is escaped, newlines included (`\n`).
pub fn line(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// For multi-line places (an output tail, a prompt shown to the user):
/// newlines and tabs stay, every other control character is escaped.
pub fn block(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

fn escape(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| needs_escape(c) && !(keep_newlines && matches!(c, '\n' | '\t'));
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !unsafe_char(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// For JSON text that goes to a terminal: `serde_json` escapes C0 controls
/// but writes C1 controls and bidirectional marks as they are. They can
/// only occur inside JSON strings, so a `\uXXXX` escape keeps the value
/// (and the JSON valid) while making them visible.
pub fn json(text: &str) -> Cow<'_, str> {
    // Raw line breaks are only ever the layout of pretty-printed JSON.
    let unsafe_char = |c: char| needs_escape(c) && c != '\n';
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Whether `c` could steer a terminal, reorder what is shown or hide a
/// word: C0, DEL and C1 controls, the bidirectional marks, embeddings,
/// overrides and isolates, the zero-width characters, the line and
/// paragraph separators, and the byte-order mark. A tab is escaped too: it
/// is harmless on its own but hides how text is spaced.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(line("cargo test — ✓ ünïcode"), Cow::Borrowed(_)));
    }

    #[test]
    fn control_characters_are_visible() {
        assert_eq!(line("a\rb\x1b[2Jc\x7f\u{9b}d"), "a\\rb\\x1b[2Jc\\x7f\\x9bd");
        assert_eq!(line("one\ntwo\tthree"), "one\\ntwo\\tthree");
        assert_eq!(block("one\n\ttwo\r\n"), "one\n\ttwo\\r\n");
    }

    #[test]
    fn json_stays_json() {
        let raw =
            serde_json::to_string_pretty(&serde_json::json!({"why": "a\u{202e}b\u{9b}c\x1b\n"}))
                .unwrap();
        let shown = json(&raw);
        assert!(
            !shown.contains('\u{202e}') && !shown.contains('\u{9b}'),
            "{shown}"
        );
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back["why"], "a\u{202e}b\u{9b}c\x1b\n");
    }

    #[test]
    fn bidi_overrides_are_visible() {
        assert_eq!(
            line("cargo test\u{202e}hs | lruc"),
            "cargo test\\u{202e}hs | lruc"
        );
        assert_eq!(line("\u{2066}x\u{2069}"), "\\u{2066}x\\u{2069}");
    }
}
