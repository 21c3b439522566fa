//! The backward reader: the last assistant reply in the transcript.
//!
//! Only used when the Stop event carries no reply text. The scan reads from
//! the end in blocks and stops at the first line that is older than what may
//! count.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::backward::open;
use super::backward::{BackwardLines, MAX_SCAN};
use crate::reply::event::content_text;
use ralph_state::time::Timestamp;

/// The last assistant reply found in a transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastReply {
    pub message_id: Option<String>,
    /// The reply's text blocks joined by a blank line (empty for a tool call).
    pub text: String,
}

#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(rename = "isSidechain", default)]
    is_sidechain: bool,
    #[serde(rename = "isMeta", default)]
    is_meta: bool,
    timestamp: Option<String>,
    message: Option<Message>,
}

#[derive(Deserialize)]
struct Message {
    id: Option<String>,
    role: Option<String>,
    content: Option<Value>,
}

/// Finds the text of the last assistant message in the transcript, looking
/// only at bytes after `after_offset` and at lines stamped no earlier than
/// `not_before`, so that a promise from an earlier turn or an earlier loop
/// never counts. Returns `None` when no such message is there.
pub fn last_reply(
    path: &Path,
    after_offset: u64,
    not_before: Option<Timestamp>,
) -> std::io::Result<Option<LastReply>> {
    let mut file = open(path)?;
    let len = file.metadata()?.len();
    let floor = after_offset.min(len).max(len.saturating_sub(MAX_SCAN));
    let mut lines = BackwardLines::new(&mut file, floor, len);
    let mut found: Option<LastReply> = None;
    while let Some(raw) = lines.next_line()? {
        let Some(line) = parse_line(&raw) else {
            continue;
        };
        if let (Some(limit), Some(stamp)) = (not_before, line.timestamp.as_deref())
            && Timestamp::parse_rfc3339(stamp).is_some_and(|t| t < limit)
        {
            break;
        }
        let Some(message) = line.message else {
            continue;
        };
        match line.kind.as_deref() {
            Some("assistant") if message.role.as_deref() != Some("user") => {
                let text = message
                    .content
                    .as_ref()
                    .map(content_text)
                    .unwrap_or_default();
                match &mut found {
                    None => {
                        found = Some(LastReply {
                            message_id: message.id,
                            text,
                        });
                    }
                    Some(reply) if reply.message_id.is_some() && reply.message_id == message.id => {
                        if !text.is_empty() {
                            reply.text = if reply.text.is_empty() {
                                text
                            } else {
                                format!("{text}\n\n{}", reply.text)
                            };
                        }
                    }
                    Some(_) => break,
                }
            }
            Some("user") if found.is_some() => break,
            _ => {}
        }
    }
    Ok(found)
}

/// Parses a conversation line; `None` for anything that is not one (other
/// line types, sidechains, meta lines, request blobs, broken JSON).
fn parse_line(raw: &[u8]) -> Option<Line> {
    let line: Line = serde_json::from_slice(raw).ok()?;
    if line.is_sidechain || line.is_meta {
        return None;
    }
    match line.kind.as_deref() {
        Some("assistant" | "user") => Some(line),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::transcript::backward::BLOCK;
    use std::io::Write;

    fn assistant(id: &str, content: &str, ts: &str) -> String {
        format!(
            r#"{{"type":"assistant","isSidechain":false,"timestamp":"{ts}","message":{{"id":"{id}","role":"assistant","content":{content}}}}}"#
        )
    }

    fn write(lines: &[String]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        f
    }

    const T: &str = "2026-11-30T01:00:00Z";

    #[test]
    fn joins_the_blocks_of_the_last_message() {
        let f = write(&[
            assistant(
                "m1",
                r#"[{"type":"text","text":"old <promise>DONE</promise>"}]"#,
                T,
            ),
            r#"{"type":"user","message":{"role":"user","content":"go on"}}"#.into(),
            assistant("m2", r#"[{"type":"text","text":"a"}]"#, T),
            assistant("m2", r#"[{"type":"tool_use","name":"Bash"}]"#, T),
            assistant("m2", r#"[{"type":"text","text":"b"}]"#, T),
            r#"{"type":"api-request-blob","message":{"role":"assistant","content":"x"}}"#.into(),
        ]);
        let r = last_reply(f.path(), 0, None).unwrap().unwrap();
        assert_eq!(r.text, "a\n\nb");
        assert_eq!(r.message_id.as_deref(), Some("m2"));
    }

    #[test]
    fn tool_only_reply_has_no_text_and_hides_older_promises() {
        let f = write(&[
            assistant(
                "m1",
                r#"[{"type":"text","text":"<promise>DONE</promise>"}]"#,
                T,
            ),
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result"}]}}"#
                .into(),
            assistant("m2", r#"[{"type":"tool_use","name":"Bash"}]"#, T),
        ]);
        let r = last_reply(f.path(), 0, None).unwrap().unwrap();
        assert_eq!(r.text, "");
    }

    #[test]
    fn skips_sidechains_and_meta() {
        let f = write(&[
            assistant("m1", r#""main""#, T),
            r#"{"type":"assistant","isSidechain":true,"message":{"id":"s","role":"assistant","content":"side"}}"#.into(),
            r#"{"type":"user","isMeta":true,"message":{"role":"user","content":"Stop hook feedback:\nx"}}"#.into(),
        ]);
        assert_eq!(last_reply(f.path(), 0, None).unwrap().unwrap().text, "main");
    }

    #[test]
    fn nothing_before_the_offset_or_the_start_counts() {
        let first = assistant("m1", r#""<promise>DONE</promise>""#, T);
        let f = write(std::slice::from_ref(&first));
        let offset = first.len() as u64 + 1;
        assert_eq!(last_reply(f.path(), offset, None).unwrap(), None);
        let later = Timestamp::parse_rfc3339("2026-11-30T02:00:00Z");
        assert_eq!(last_reply(f.path(), 0, later).unwrap(), None);
    }

    #[test]
    fn reads_across_block_boundaries() {
        let big = "x".repeat(BLOCK * 2 + 17);
        let f = write(&[
            assistant("m0", &format!(r#""{big}""#), T),
            assistant("m1", r#""tail""#, T),
        ]);
        assert_eq!(last_reply(f.path(), 0, None).unwrap().unwrap().text, "tail");
        let f = write(&[assistant("m1", &format!(r#""{big}""#), T)]);
        assert_eq!(last_reply(f.path(), 0, None).unwrap().unwrap().text, big);
    }

    #[test]
    fn missing_file_is_an_error() {
        assert!(last_reply(Path::new("/nonexistent/t.jsonl"), 0, None).is_err());
    }
}
