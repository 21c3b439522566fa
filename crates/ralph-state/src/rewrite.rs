//! Proven rewrites of a loop file: set some fields with the in-place line
//! edit (`frontmatter::set_fields`), then read the new text again and check
//! that every field written reads back with the value just set, that every
//! other known field reads as before, and that the body is the same bytes.
//! A rewrite that fails the check is refused: nothing is written.
//!
//! The line edit stays (rather than regenerating the frontmatter) because it
//! keeps unknown fields, comments and the user's layout byte-for-byte; the
//! proof makes sure an edit never lands somewhere the YAML parser does not
//! read.

use std::path::Path;

use crate::error::LoopFileError;
use crate::fields::frontmatter;
use crate::fields::state::{self, KNOWN_FIELDS, LoopState, RawFields, StateError};
use crate::fields::values::FieldSource;

/// Returns `text` (the loop file at `path`, which only names it in a
/// refusal) with `fields` set (values are YAML scalars, already quoted as
/// needed), or refuses when the result does not prove right.
pub fn set_fields(
    path: &Path,
    text: &str,
    fields: &[(&str, String)],
) -> Result<String, LoopFileError> {
    let unreadable = |source: StateError| LoopFileError::NoLongerALoop {
        path: path.to_owned(),
        source,
    };
    let before_layout = frontmatter::split(text).map_err(unreadable)?;
    let before = state::raw_fields(text, &before_layout).map_err(unreadable)?;
    let updated = frontmatter::set_fields(text, fields).map_err(unreadable)?;
    let after_layout = frontmatter::split(&updated).map_err(unreadable)?;
    let after = state::raw_fields(&updated, &after_layout).map_err(unreadable)?;
    // The typed reading must still hold (a value past its cap, say); built
    // from the fields just read, so the new text is parsed once, not twice.
    LoopState::from_raw(after.clone(), &updated[after_layout.body.clone()]).map_err(unreadable)?;
    if text[before_layout.body.clone()] != updated[after_layout.body.clone()] {
        return Err(LoopFileError::BodyChanged {
            path: path.to_owned(),
        });
    }
    let expected = expected_values(fields).map_err(unreadable)?;
    for field in KNOWN_FIELDS.iter().copied() {
        let written = fields.iter().any(|(key, _)| *key == field);
        let now = after.get(field);
        if written {
            let want = expected.get(field);
            if now != want {
                return Err(LoopFileError::NotReadBack {
                    path: path.to_owned(),
                    field,
                    expected: want.unwrap_or("").to_owned(),
                    found: now.unwrap_or("").to_owned(),
                });
            }
        } else if now != before.get(field) {
            return Err(LoopFileError::SideEffect {
                path: path.to_owned(),
                field,
                before: before.get(field).unwrap_or("").to_owned(),
                after: now.unwrap_or("").to_owned(),
            });
        }
    }
    Ok(updated)
}

/// What each written value reads as, by the same parser.
fn expected_values(fields: &[(&str, String)]) -> Result<RawFields, StateError> {
    let mut yaml = String::new();
    for (key, value) in fields {
        yaml.push_str(key);
        yaml.push_str(": ");
        yaml.push_str(value);
        yaml.push('\n');
    }
    state::parse_raw(&yaml)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "l.md";

    const LOOP: &str =
        "---\nactive: true\niteration: 1\nmax_iterations: 3\nx-note: keep\n---\n\nPrompt\n";

    #[test]
    fn a_plain_rewrite_is_proven() {
        let out = set_fields(Path::new(FILE), LOOP, &[("iteration", "2".into())]).unwrap();
        assert_eq!(out, LOOP.replace("iteration: 1", "iteration: 2"));
        let out = set_fields(Path::new(FILE), LOOP, &[("session_id", "\"s 1\"".into())]).unwrap();
        assert!(out.contains("session_id: \"s 1\"\n---"), "{out}");
    }

    #[test]
    fn quoted_and_spaced_keys_are_rewritten_canonically() {
        for spelling in ["\"iteration\": 1", "'iteration': 1", "iteration : 1"] {
            let text = LOOP.replace("iteration: 1", spelling);
            assert_eq!(LoopState::parse(&text).unwrap().iteration, 1, "{spelling}");
            let out = set_fields(Path::new(FILE), &text, &[("iteration", "2".into())]).unwrap();
            assert_eq!(LoopState::parse(&out).unwrap().iteration, 2, "{spelling}");
        }
    }

    #[test]
    fn a_value_that_does_not_read_back_is_refused() {
        // A multi-line plain scalar: the line edit leaves its second line.
        let text = "---\niteration: 1\nverify: cargo\n  test\n---\nP";
        assert!(set_fields(Path::new(FILE), text, &[("iteration", "2".into())]).is_ok());
        assert!(set_fields(Path::new(FILE), text, &[("iteration", "\"1".into())]).is_err());
    }

    #[test]
    fn a_value_past_its_cap_is_never_written() {
        let err =
            set_fields(Path::new(FILE), LOOP, &[("iteration", "1000000001".into())]).unwrap_err();
        assert!(err.to_string().contains("iteration"), "{err}");
    }
}
