//! The coding agents that run `ralph hook stop` at a turn's end, told apart
//! by their event, and the exact answer each of them accepts.
//!
//! The engine (state, promise, guards, gate, log, history) is the same for
//! every host; only the event's shape, where the reply is found and the
//! answer's shape differ. docs/hosts.md records what was verified against
//! each pinned client.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::hook::answer::Answer;
use crate::reply::event::StopEvent;
use crate::reply::transcript::{BackwardLines, MAX_SCAN};
use ralph_state::time::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// Claude Code: `Stop`, the reference protocol.
    Claude,
    /// OpenAI Codex CLI: `Stop` with `turn_id`; a strict answer schema.
    Codex,
    /// Google Gemini CLI: `AfterAgent`.
    Gemini,
    /// GitHub Copilot CLI: `agentStop` (camelCase) or `Stop` with `stop_reason`.
    Copilot,
}

impl Host {
    pub const ALL: [Host; 4] = [Host::Claude, Host::Codex, Host::Gemini, Host::Copilot];

    pub fn name(self) -> &'static str {
        match self {
            Host::Claude => "claude",
            Host::Codex => "codex",
            Host::Gemini => "gemini",
            Host::Copilot => "copilot",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "claude" | "claude-code" => Some(Host::Claude),
            "codex" => Some(Host::Codex),
            "gemini" => Some(Host::Gemini),
            "copilot" => Some(Host::Copilot),
            _ => None,
        }
    }

    /// Which host sent this event: a check of fields already parsed, so
    /// Claude Code's path costs nothing more.
    pub fn detect(event: &StopEvent) -> Self {
        match event.hook_event_name.as_deref() {
            Some("AfterAgent") => Host::Gemini,
            Some("agentStop") => Host::Copilot,
            _ if event.turn_id.is_some() => Host::Codex,
            _ if event.session_id_camel.is_some()
                || event.stop_reason.is_some()
                || event.stop_reason_camel.is_some() =>
            {
                Host::Copilot
            }
            _ => Host::Claude,
        }
    }

    /// The event as the engine reads it. The reply is put where the engine
    /// looks first (`last_assistant_message`), taken from the host's own
    /// transcript where the payload lacks it or cannot be trusted (Gemini's
    /// `prompt_response` grows across continuations). The transcript path is
    /// dropped: its format is Claude Code's alone, so the token and tool
    /// figures read from it do not apply to other hosts.
    pub fn normalise(self, event: &StopEvent, not_before: Option<Timestamp>) -> StopEvent {
        let mut out = event.clone();
        let path = event
            .transcript_path
            .clone()
            .or_else(|| event.transcript_path_camel.clone())
            .filter(|p| !p.as_os_str().is_empty());
        match self {
            Host::Claude => return out,
            Host::Codex => {}
            Host::Gemini => {
                out.last_assistant_message = path
                    .as_deref()
                    .and_then(|p| last_reply(p, TranscriptKind::Gemini, not_before, None).0)
                    .or_else(|| event.prompt_response.clone());
            }
            Host::Copilot => {
                let hook_started = event.timestamp.as_ref().and_then(Value::as_i64);
                out.last_assistant_message = path
                    .as_deref()
                    .and_then(|p| copilot_reply(p, not_before, hook_started));
            }
        }
        out.transcript_path = None;
        out.transcript = None;
        out
    }

    /// The exact bytes for stdout, in the shape this host accepts: empty,
    /// or one JSON object and a newline. `fresh_context` asks Gemini to
    /// clear the model's history for the next turn (no other host can).
    pub fn render(self, answer: &Answer, fresh_context: bool) -> String {
        let value = match (self, answer) {
            (_, Answer::Silent) => return String::new(),
            // Claude Code and Codex share the shape; Codex rejects any key
            // beyond continue, stopReason, suppressOutput, systemMessage,
            // decision and reason, and this uses only three of them.
            (Host::Claude | Host::Codex, _) => return answer.render(),
            (
                Host::Gemini,
                Answer::Notice(message)
                | Answer::Context {
                    status: message, ..
                },
            ) => {
                json!({ "systemMessage": message })
            }
            (Host::Gemini, Answer::Block { reason, status }) => {
                let mut object = Map::new();
                object.insert("decision".into(), json!("block"));
                object.insert("reason".into(), json!(reason));
                object.insert("systemMessage".into(), json!(status));
                if fresh_context {
                    // Read only under hookSpecificOutput: at the top level
                    // Gemini ignores it.
                    object.insert(
                        "hookSpecificOutput".into(),
                        json!({ "hookEventName": "AfterAgent", "clearContext": true }),
                    );
                }
                Value::Object(object)
            }
            // Copilot reads decision and reason only; a notice goes to
            // stderr (printed by the caller), stdout stays empty.
            (Host::Copilot, Answer::Notice(_) | Answer::Context { .. }) => return String::new(),
            (Host::Copilot, Answer::Block { reason, .. }) => {
                json!({ "decision": "block", "reason": reason })
            }
        };
        format!("{value}\n")
    }

    /// The environment variable naming the session in the shell commands
    /// this host's agent runs (`ralph start` reads it). Gemini 0.61 sets
    /// `GEMINI_SESSION_ID` for hooks only, not for its shell tool: a loop
    /// armed there is claimed by the first session that stops.
    pub fn session_variable(self) -> Option<&'static str> {
        match self {
            Host::Claude => Some("CLAUDE_CODE_SESSION_ID"),
            Host::Codex => Some("CODEX_THREAD_ID"),
            Host::Gemini => Some("GEMINI_SESSION_ID"),
            Host::Copilot => Some("COPILOT_AGENT_SESSION_ID"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum TranscriptKind {
    /// `~/.gemini/tmp/<project>/chats/session-*.jsonl`: records
    /// `{"type":"gemini","content":…,"timestamp":…}` and `"type":"user"`.
    Gemini,
    /// `~/.copilot/session-state/<id>/events.jsonl`: events
    /// `{"type":"assistant.message","data":{"content":…},"timestamp":…}`.
    Copilot,
}

#[derive(Deserialize)]
struct Record {
    #[serde(rename = "type")]
    kind: Option<String>,
    timestamp: Option<String>,
    content: Option<Value>,
    data: Option<Value>,
}

/// How long the hook waits for Copilot to write the turn's events.
const COPILOT_FLUSH_WAIT: Duration = Duration::from_secs(5);

/// Copilot writes its events file asynchronously: when the hook starts, the
/// turn's last message may not be on disk yet. The `hook.start` event of
/// this very invocation (its input carries the payload's `timestamp`)
/// comes after that message, so the file is read again, briefly, until
/// that event is there.
fn copilot_reply(
    path: &Path,
    not_before: Option<Timestamp>,
    hook_started: Option<i64>,
) -> Option<String> {
    let deadline = Instant::now() + COPILOT_FLUSH_WAIT;
    loop {
        let (reply, synced) = last_reply(path, TranscriptKind::Copilot, not_before, hook_started);
        if synced || hook_started.is_none() || Instant::now() >= deadline {
            return reply;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The text of the agent's last reply in a host transcript, read backward
/// from the end (at most `MAX_SCAN` bytes), stopping at the turn's prompt
/// and at the first record older than `not_before`. `None` when the turn
/// has no text or nothing readable is there. The flag says whether a
/// Copilot `hook.start` event for `hook_started` was seen after the reply.
fn last_reply(
    path: &Path,
    kind: TranscriptKind,
    not_before: Option<Timestamp>,
    hook_started: Option<i64>,
) -> (Option<String>, bool) {
    let mut synced = false;
    let reply = (|| {
        let Some(mut file) = open_regular(path) else {
            // A file not written yet is worth waiting for; anything else is not.
            synced = std::fs::symlink_metadata(path).is_ok();
            return None;
        };
        let len = file.metadata().ok()?.len();
        let mut lines = BackwardLines::new(&mut file, len.saturating_sub(MAX_SCAN), len);
        while let Some(raw) = lines.next_line().ok()? {
            let Ok(record) = serde_json::from_slice::<Record>(&raw) else {
                continue;
            };
            if record.kind.as_deref() == Some("hook.start")
                && hook_started.is_some()
                && record
                    .data
                    .as_ref()
                    .and_then(|d| d.pointer("/input/timestamp"))
                    .and_then(Value::as_i64)
                    == hook_started
            {
                synced = true;
            }
            if let Some(text) = reply_in(record, kind, not_before)? {
                return Some(text);
            }
        }
        None
    })();
    (reply, synced)
}

/// One record, read backward: `Some(Some(text))` the reply, `Some(None)`
/// keep looking, `None` stop (the turn's prompt, or older than the loop).
fn reply_in(
    record: Record,
    kind: TranscriptKind,
    not_before: Option<Timestamp>,
) -> Option<Option<String>> {
    {
        if let (Some(limit), Some(stamp)) = (not_before, record.timestamp.as_deref())
            && Timestamp::parse_rfc3339(stamp).is_some_and(|t| t < limit)
        {
            return None;
        }
        let (reply, prompt) = match kind {
            TranscriptKind::Gemini => ("gemini", "user"),
            TranscriptKind::Copilot => ("assistant.message", "user.message"),
        };
        match record.kind.as_deref() {
            Some(k) if k == reply => {
                let content = match kind {
                    TranscriptKind::Gemini => record.content,
                    TranscriptKind::Copilot => record.data.and_then(|d| d.get("content").cloned()),
                };
                let text = content.as_ref().map(parts_text).unwrap_or_default();
                if !text.trim().is_empty() {
                    return Some(Some(text));
                }
            }
            Some(k) if k == prompt => return None,
            _ => {}
        }
    }
    Some(None)
}

/// A transcript is the host's file, but its path came on stdin: open it only
/// if it is a regular file, never a FIFO or device that could hang the hook.
fn open_regular(path: &Path) -> Option<File> {
    // Opened without blocking, then checked regular (safe_fs): a FIFO swapped
    // in between a check and the open cannot hang the hook.
    ralph_fs::safe_fs::open_read_following(path).ok()
}

/// A content value: a string, or a list of parts whose `text` fields are
/// joined by a blank line.
fn parts_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn event(raw: &str) -> StopEvent {
        StopEvent::parse(raw.as_bytes()).unwrap()
    }

    // Payloads as the pinned clients sent them (docs/hosts.md), trimmed.
    const CLAUDE: &str = r#"{"session_id":"s1","transcript_path":"/t.jsonl","cwd":"/p","prompt_id":"x","permission_mode":"default","hook_event_name":"Stop","stop_hook_active":false,"last_assistant_message":"hi"}"#;
    const CODEX: &str = r#"{"session_id":"01a2","turn_id":"01a3","transcript_path":"/c/rollout.jsonl","cwd":"/p","hook_event_name":"Stop","model":"mock","permission_mode":"bypassPermissions","stop_hook_active":false,"last_assistant_message":"reply 0"}"#;
    const GEMINI: &str = r#"{"session_id":"42b5","transcript_path":"/g/session.jsonl","cwd":"/p","hook_event_name":"AfterAgent","timestamp":"2026-11-30T14:54:20.246Z","prompt":"do the task","prompt_response":"reply two","stop_hook_active":false}"#;
    const COPILOT: &str = r#"{"sessionId":"b874","timestamp":1796050518330,"cwd":"/p","transcriptPath":"/c/events.jsonl","stopReason":"end_turn","stop_hook_active":false}"#;
    const COPILOT_SNAKE: &str = r#"{"hook_event_name":"Stop","session_id":"b874","timestamp":1796050518330,"cwd":"/p","transcript_path":"/c/events.jsonl","stop_reason":"end_turn"}"#;

    #[test]
    fn detects_each_host_from_its_payload() {
        assert_eq!(Host::detect(&event(CLAUDE)), Host::Claude);
        assert_eq!(Host::detect(&event(CODEX)), Host::Codex);
        assert_eq!(Host::detect(&event(GEMINI)), Host::Gemini);
        assert_eq!(Host::detect(&event(COPILOT)), Host::Copilot);
        assert_eq!(Host::detect(&event(COPILOT_SNAKE)), Host::Copilot);
        assert_eq!(Host::detect(&event("{}")), Host::Claude);
        assert_eq!(event(COPILOT).session(), Some("b874"));
    }

    #[test]
    fn names_round_trip() {
        for host in Host::ALL {
            assert_eq!(Host::from_name(host.name()), Some(host));
        }
        assert_eq!(Host::from_name("Claude-Code"), Some(Host::Claude));
        assert_eq!(Host::from_name("cursor"), None);
    }

    fn block() -> Answer {
        Answer::Block {
            reason: "Do it \"now\"\n$HOME".into(),
            status: "🔄 2/5".into(),
        }
    }

    fn golden(host: Host, answer: &Answer, fresh: bool) -> Value {
        let out = host.render(answer, fresh);
        assert!(
            out.ends_with('\n') && out.matches('\n').count() == 1,
            "{out:?}"
        );
        serde_json::from_str(&out).unwrap()
    }

    #[test]
    fn golden_answers_per_host() {
        let claude =
            json!({"decision":"block","reason":"Do it \"now\"\n$HOME","systemMessage":"🔄 2/5"});
        assert_eq!(golden(Host::Claude, &block(), false), claude);
        // fresh context is Gemini's alone; the others never send an unknown key
        assert_eq!(golden(Host::Codex, &block(), true), claude);
        assert_eq!(
            golden(Host::Gemini, &block(), false),
            json!({"decision":"block","reason":"Do it \"now\"\n$HOME","systemMessage":"🔄 2/5"})
        );
        assert_eq!(
            golden(Host::Gemini, &block(), true),
            json!({"decision":"block","reason":"Do it \"now\"\n$HOME","systemMessage":"🔄 2/5",
                   "hookSpecificOutput":{"hookEventName":"AfterAgent","clearContext":true}})
        );
        assert_eq!(
            golden(Host::Copilot, &block(), true),
            json!({"decision":"block","reason":"Do it \"now\"\n$HOME"})
        );
        let notice = Answer::Notice("m".into());
        for host in [Host::Claude, Host::Codex, Host::Gemini] {
            assert_eq!(golden(host, &notice, false), json!({"systemMessage":"m"}));
        }
        assert_eq!(Host::Copilot.render(&notice, false), "");
        for host in Host::ALL {
            assert_eq!(host.render(&Answer::Silent, true), "");
        }
    }

    #[test]
    fn codex_answers_use_only_the_allowed_keys() {
        const ALLOWED: [&str; 6] = [
            "continue",
            "stopReason",
            "suppressOutput",
            "systemMessage",
            "decision",
            "reason",
        ];
        for answer in [block(), Answer::Notice("n".into())] {
            for fresh in [false, true] {
                let v = golden(Host::Codex, &answer, fresh);
                assert!(
                    v.as_object()
                        .unwrap()
                        .keys()
                        .all(|k| ALLOWED.contains(&k.as_str()))
                );
            }
        }
    }

    #[test]
    fn gemini_never_sends_stop_reason_with_a_block() {
        let v = golden(Host::Gemini, &block(), true);
        assert!(v.get("stopReason").is_none() && v.get("continue").is_none());
        assert!(
            v.get("clearContext").is_none(),
            "only under hookSpecificOutput"
        );
    }

    fn file(lines: &[&str]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        f
    }

    #[test]
    fn gemini_reply_is_the_last_turn_not_the_accumulated_response() {
        let t = file(&[
            r#"{"sessionId":"42b5","startTime":"2026-11-30T14:54:20.195Z","kind":"main"}"#,
            r#"{"id":"a","timestamp":"2026-11-30T14:54:20.239Z","type":"user","content":[{"text":"do the task"}]}"#,
            r#"{"id":"b","timestamp":"2026-11-30T14:54:20.245Z","type":"gemini","content":"<promise>DONE</promise>"}"#,
            r#"{"$set":{"lastUpdated":"2026-11-30T14:54:20.245Z"}}"#,
            r#"{"id":"c","timestamp":"2026-11-30T14:54:21.264Z","type":"user","content":[{"text":"CONTINUE"}]}"#,
            r#"{"id":"d","timestamp":"2026-11-30T14:54:21.267Z","type":"gemini","content":[{"text":"still"},{"text":"working"}]}"#,
        ]);
        let mut e = event(GEMINI);
        e.transcript_path = Some(t.path().to_owned());
        e.prompt_response = Some("<promise>DONE</promise>\nstill\n\nworking".into());
        let n = Host::Gemini.normalise(&e, None);
        assert_eq!(
            n.last_assistant_message.as_deref(),
            Some("still\n\nworking")
        );
        assert_eq!(n.transcript_path, None);
        // nothing since the loop began: no reply from an earlier turn
        let later = Timestamp::parse_rfc3339("2026-11-30T14:54:21Z");
        let n = Host::Gemini.normalise(&e, later.map(|t| Timestamp(t.0 + 5)));
        assert_eq!(
            n.last_assistant_message, e.prompt_response,
            "falls back to the payload"
        );
    }

    #[test]
    fn copilot_reply_comes_from_its_events_never_before_the_loop() {
        let t = file(&[
            r#"{"type":"user.message","data":{"content":"do it"},"timestamp":"2026-11-30T14:55:18.210Z"}"#,
            r#"{"type":"assistant.message","data":{"content":"reply 1","toolRequests":[]},"timestamp":"2026-11-30T14:55:18.300Z"}"#,
            r#"{"type":"assistant.turn_end","data":{"turnId":"0"},"timestamp":"2026-11-30T14:55:18.329Z"}"#,
            r#"{"type":"hook.start","data":{"hookType":"agentStop","input":{"timestamp":1796050518330}},"timestamp":"2026-11-30T14:55:18.330Z"}"#,
        ]);
        let mut e = event(COPILOT);
        e.transcript_path_camel = Some(t.path().to_owned());
        let n = Host::Copilot.normalise(&e, Timestamp::parse_rfc3339("2026-11-30T14:55:18Z"));
        assert_eq!(n.last_assistant_message.as_deref(), Some("reply 1"));
        let n = Host::Copilot.normalise(&e, Timestamp::parse_rfc3339("2026-11-30T14:56:00Z"));
        assert_eq!(n.last_assistant_message, None);
        // a turn with no text since its prompt has no reply
        let t = file(&[
            r#"{"type":"assistant.message","data":{"content":"old"},"timestamp":"2026-11-30T14:55:18.300Z"}"#,
            r#"{"type":"user.message","data":{"content":"go"},"timestamp":"2026-11-30T14:55:19.000Z"}"#,
            r#"{"type":"assistant.message","data":{"content":"","toolRequests":[{}]},"timestamp":"2026-11-30T14:55:19.300Z"}"#,
            r#"{"type":"hook.start","data":{"input":{"timestamp":1796050518330}},"timestamp":"2026-11-30T14:55:19.330Z"}"#,
        ]);
        e.transcript_path_camel = Some(t.path().to_owned());
        assert_eq!(
            Host::Copilot.normalise(&e, None).last_assistant_message,
            None
        );
    }

    #[test]
    fn copilot_waits_for_its_events_to_reach_the_file() {
        let t = file(&[
            r#"{"type":"user.message","data":{"content":"go"},"timestamp":"2026-11-30T14:55:18.210Z"}"#,
        ]);
        let path = t.path().to_owned();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            writeln!(f, r#"{{"type":"assistant.message","data":{{"content":"late"}},"timestamp":"2026-11-30T14:55:18.300Z"}}"#).unwrap();
            writeln!(f, r#"{{"type":"hook.start","data":{{"input":{{"timestamp":1796050518330}}}},"timestamp":"2026-11-30T14:55:18.330Z"}}"#).unwrap();
        });
        let mut e = event(COPILOT);
        e.transcript_path_camel = Some(t.path().to_owned());
        let started = Instant::now();
        assert_eq!(
            Host::Copilot
                .normalise(&e, None)
                .last_assistant_message
                .as_deref(),
            Some("late")
        );
        assert!(started.elapsed() < COPILOT_FLUSH_WAIT);
        writer.join().unwrap();
    }

    #[test]
    fn codex_keeps_its_payload_reply() {
        let n = Host::Codex.normalise(&event(CODEX), None);
        assert_eq!(n.last_assistant_message.as_deref(), Some("reply 0"));
        assert_eq!(n.transcript_path, None);
    }

    #[test]
    fn a_transcript_that_is_not_a_regular_file_is_not_read() {
        let mut e = event(COPILOT);
        e.transcript_path_camel = Some(std::path::PathBuf::from("/dev/zero"));
        assert_eq!(
            Host::Copilot.normalise(&e, None).last_assistant_message,
            None
        );
    }
}
