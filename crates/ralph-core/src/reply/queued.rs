//! Whether the user has a message waiting in Claude Code's queue.
//!
//! A message typed while the agent works waits ("Queued · ctrl+x ctrl+s to send now") until
//! the turn ends; while a Stop hook keeps the turn going, it waits for ever. Claude Code
//! writes each queue change to the transcript at once, as one short line:
//! `{"type":"queue-operation","operation":"enqueue","content":"…",…}`, then `dequeue` when it
//! sends the message, `remove` or `popAll` when the user takes it back (checked on 2.1.328:
//! the `enqueue` line is written as the message is queued, long before the turn ends). The
//! Stop event itself says nothing of it.
//!
//! Only the transcript's new part is read (from the offset the previous stop reached,
//! bounded by [`MAX_SCAN`]), as a stream: a line that is not a queue operation is skipped
//! without being kept, so a huge tool result costs one pass and no memory.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// The most read at one stop: queue lines are written during the turn that just ended.
pub const MAX_SCAN: u64 = 2 * 1024 * 1024;
/// Every queue line starts so (the client writes `type` first).
const PREFIX: &[u8] = b"{\"type\":\"queue-operation\"";
/// A queue line longer than this (a pasted essay) is judged by its operation alone.
const KEEP: usize = 64 * 1024;

/// How many messages the lines in `text` leave waiting, starting from `waiting`.
fn apply(waiting: u64, line: &[u8]) -> u64 {
    let op = serde_json::from_slice::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v["operation"].as_str().map(str::to_owned))
        .or_else(|| operation_of_cut_line(line));
    match op.as_deref() {
        Some("enqueue") => waiting.saturating_add(1),
        Some("dequeue" | "remove") => waiting.saturating_sub(1),
        Some("popAll") => 0,
        _ => waiting,
    }
}

/// The operation of a line kept only in part (its start: `"operation"` comes second).
fn operation_of_cut_line(line: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(line);
    let rest = text.split_once("\"operation\":\"")?.1;
    Some(rest.split('"').next()?.to_owned())
}

/// Whether the transcript at `path`, read from byte `from` on, leaves a message of the user
/// waiting in the queue.
pub fn message_waiting(path: &Path, from: u64) -> std::io::Result<bool> {
    let mut file = crate::fs::safe_fs::open_read_following(path).map_err(|e| match e {
        crate::fs::safe_fs::FsError::Io { source, .. } => source,
        other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
    })?;
    let len = file.metadata()?.len();
    let start = from.min(len).max(len.saturating_sub(MAX_SCAN));
    // Starting mid-line (the bound cut a line): that line is not read.
    let mut at_line_start = start == 0;
    if start > 0 {
        file.seek(SeekFrom::Start(start - 1))?;
        let mut before = [0u8; 1];
        file.read_exact(&mut before)?;
        at_line_start = before[0] == b'\n';
    }
    Ok(scan(BufReader::with_capacity(64 * 1024, file), at_line_start)? > 0)
}

/// Messages left waiting by the queue lines in `reader`.
fn scan(mut reader: impl BufRead, mut at_line_start: bool) -> std::io::Result<u64> {
    let mut waiting = 0u64;
    // The current line's first bytes, while it may still be a queue line.
    let mut line: Vec<u8> = Vec::new();
    let mut keeping = at_line_start;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        let newline = chunk.iter().position(|&b| b == b'\n');
        let part = &chunk[..newline.unwrap_or(chunk.len())];
        if keeping {
            let room = KEEP.saturating_sub(line.len());
            line.extend_from_slice(&part[..part.len().min(room)]);
            let known = line.len().min(PREFIX.len());
            if line[..known] != PREFIX[..known] {
                keeping = false;
                line.clear();
            }
        }
        let used = newline.map_or(chunk.len(), |i| i + 1);
        reader.consume(used);
        if newline.is_some() {
            if keeping && at_line_start && line.starts_with(PREFIX) {
                waiting = apply(waiting, &line);
            }
            line.clear();
            keeping = true;
            at_line_start = true;
        }
    }
    if keeping && at_line_start && line.starts_with(PREFIX) {
        waiting = apply(waiting, &line);
    }
    Ok(waiting)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENQUEUE: &str = r#"{"type":"queue-operation","operation":"enqueue","timestamp":"2026-12-01T21:15:07.241Z","sessionId":"s","content":"/ralph-cancel"}"#;
    const DEQUEUE: &str = r#"{"type":"queue-operation","operation":"dequeue","timestamp":"2026-12-01T21:15:29.465Z","sessionId":"s"}"#;

    fn waiting(text: &str) -> u64 {
        scan(text.as_bytes(), true).unwrap()
    }

    #[test]
    fn an_enqueue_without_its_dequeue_is_waiting() {
        let reply =
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"working"}]}}"#;
        assert_eq!(waiting(&format!("{reply}\n{ENQUEUE}\n{reply}\n")), 1);
        assert_eq!(waiting(&format!("{ENQUEUE}\n{DEQUEUE}\n{reply}\n")), 0);
        assert_eq!(
            waiting(&format!("{DEQUEUE}\n{reply}\n")),
            0,
            "never below zero"
        );
        let pop = r#"{"type":"queue-operation","operation":"popAll","sessionId":"s"}"#;
        assert_eq!(waiting(&format!("{ENQUEUE}\n{ENQUEUE}\n{pop}\n")), 0);
        assert_eq!(
            waiting(ENQUEUE),
            1,
            "a last line without its newline counts"
        );
    }

    #[test]
    fn other_lines_never_count_whatever_they_hold() {
        // A reply or a tool result quoting a queue line is not one.
        let quoted = serde_json::json!({"type": "user", "message": {"content": ENQUEUE}});
        assert_eq!(waiting(&format!("{quoted}\n")), 0);
        assert_eq!(waiting(&format!("  {ENQUEUE}\n")), 0);
        // A line cut by the scan's start is not judged.
        assert_eq!(scan(format!("{ENQUEUE}\n").as_bytes(), false).unwrap(), 0);
    }

    #[test]
    fn a_huge_queued_message_is_judged_by_its_operation() {
        let big = format!(
            r#"{{"type":"queue-operation","operation":"enqueue","content":"{}"}}"#,
            "x".repeat(KEEP * 3)
        );
        assert_eq!(waiting(&format!("{big}\n")), 1);
    }

    #[test]
    fn only_the_new_part_of_the_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let old = format!("{ENQUEUE}\n");
        std::fs::write(&path, format!("{old}{{\"type\":\"assistant\"}}\n")).unwrap();
        assert!(message_waiting(&path, 0).unwrap());
        assert!(!message_waiting(&path, old.len() as u64).unwrap());
        assert!(
            !message_waiting(&path, 5).unwrap(),
            "mid-line: the cut line is skipped"
        );
        assert!(!message_waiting(&path, u64::MAX).unwrap());
    }
}
