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
//! The forward scan (`appended.rs`) reads every line appended since the previous stop once
//! and hands each queue line here, so the queue costs no read of its own. At a loop's first
//! look (no offset yet) it also looks at the last [`FIRST_LOOK`] bytes before where it
//! starts counting, by this prefix alone: a message queued before the scan's start.

/// How far back from the end a first look checks for queue lines.
pub(super) const FIRST_LOOK: u64 = 2 * 1024 * 1024;
/// Every queue line starts so (the client writes `type` first): a reply or a tool result
/// quoting a queue line is not one.
pub(super) const PREFIX: &[u8] = b"{\"type\":\"queue-operation\"";

/// Messages left waiting, fed the queue lines in the order they were written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Queue {
    pub waiting: u64,
}

impl Queue {
    /// One queue operation (`None`: a queue line whose operation is unknown).
    pub(super) fn apply(&mut self, operation: Option<&str>) {
        self.waiting = match operation {
            Some("enqueue") => self.waiting.saturating_add(1),
            Some("dequeue" | "remove") => self.waiting.saturating_sub(1),
            Some("popAll") => 0,
            _ => self.waiting,
        };
    }

    /// A queue line known only by its first bytes (too long to keep, or not parsed):
    /// judged by its operation (`"operation"` comes second).
    pub(super) fn apply_cut(&mut self, start: &[u8]) {
        if !start.starts_with(PREFIX) {
            return;
        }
        let text = String::from_utf8_lossy(start);
        let operation = text
            .split_once("\"operation\":\"")
            .and_then(|(_, rest)| rest.split('"').next());
        self.apply(operation);
    }
}

#[cfg(test)]
mod tests {
    use super::super::appended::scan_appended;
    use super::*;
    use std::io::Write;

    const ENQUEUE: &str = r#"{"type":"queue-operation","operation":"enqueue","timestamp":"2026-12-01T21:15:07.241Z","sessionId":"s","content":"/ralph-cancel"}"#;
    const DEQUEUE: &str = r#"{"type":"queue-operation","operation":"dequeue","timestamp":"2026-12-01T21:15:29.465Z","sessionId":"s"}"#;

    /// Messages left waiting by `text`, appended after a baseline line and read by the
    /// forward scan as a later stop reads it.
    fn waiting(text: &str) -> u64 {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"{\"type\":\"user\"}\n").unwrap();
        let base = scan_appended(f.path(), 0, None).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        scan_appended(f.path(), base.end_offset, None)
            .unwrap()
            .queued
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
        // A line cut by the first look's start is not judged.
        let mut q = Queue::default();
        q.apply_cut(&ENQUEUE.as_bytes()[1..]);
        assert_eq!(q.waiting, 0);
    }

    #[test]
    fn a_huge_queued_message_is_judged_by_its_operation() {
        let big = format!(
            r#"{{"type":"queue-operation","operation":"enqueue","content":"{}"}}"#,
            "x".repeat(1024 * 1024)
        );
        assert_eq!(waiting(&format!("{big}\n")), 1);
        let mut q = Queue::default();
        q.apply_cut(&big.as_bytes()[..64]);
        assert_eq!(q.waiting, 1, "its first bytes are enough");
    }

    #[test]
    fn a_first_look_sees_a_message_queued_before_the_loop_started() {
        use ralph_state::time::Timestamp;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, format!("{ENQUEUE}\n")).unwrap();
        let scan = |started| {
            let started = Timestamp::parse_rfc3339(started);
            super::super::appended::scan_loop(&path, 0, None, started).unwrap()
        };
        let after = scan("2026-12-31T00:00:00Z");
        assert_eq!(
            (after.queued, after.tokens),
            (1, 0),
            "stamped before the start"
        );
        assert_eq!(scan("2026-01-01T00:00:00Z").queued, 1, "stamped after it");
    }

    #[test]
    fn only_the_new_part_of_the_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let old = format!("{ENQUEUE}\n");
        std::fs::write(&path, format!("{old}{{\"type\":\"assistant\"}}\n")).unwrap();
        let queued = |from| scan_appended(&path, from, None).unwrap().queued;
        assert_eq!(queued(0), 1, "a first look reads the recent lines");
        assert_eq!(queued(old.len() as u64), 0);
        assert_eq!(queued(5), 0, "mid-line: the cut line is skipped");
        assert_eq!(queued(u64::MAX), 0);
    }
}
