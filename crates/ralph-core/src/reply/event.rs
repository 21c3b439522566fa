//! The turn-end event a host sends on stdin: Claude Code's `Stop`, and the
//! same event as Codex (`Stop`), Gemini (`AfterAgent`) and Copilot
//! (`agentStop`, camelCase) send it. Unknown fields are ignored; the fields
//! only one host sends are here so that `host::Host::detect` is a field check.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StopEvent {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub transcript_path: Option<PathBuf>,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    #[serde(default)]
    pub hook_event_name: Option<String>,
    #[serde(default)]
    pub stop_hook_active: Option<bool>,
    /// The text of the reply that just finished (Claude Code 2.1.47+);
    /// absent when that reply had no text.
    #[serde(default)]
    pub last_assistant_message: Option<String>,
    /// The marketer plugin's payload shape: a list of messages whose last
    /// item's `content` is the reply.
    #[serde(default)]
    pub transcript: Option<Vec<Value>>,
    /// Copilot's camelCase payload (`agentStop`) names the session `sessionId`.
    #[serde(default, rename = "sessionId")]
    pub session_id_camel: Option<String>,
    /// Copilot's camelCase `transcriptPath`.
    #[serde(default, rename = "transcriptPath")]
    pub transcript_path_camel: Option<PathBuf>,
    /// Codex only: the turn that ended.
    #[serde(default)]
    pub turn_id: Option<Value>,
    /// Copilot only: why the agent stopped (`stop_reason` or `stopReason`).
    #[serde(default)]
    pub stop_reason: Option<Value>,
    #[serde(default, rename = "stopReason")]
    pub stop_reason_camel: Option<Value>,
    /// Gemini only: the agent's text for the whole prompt so far (it grows
    /// across hook-forced continuations, so the transcript is read instead).
    #[serde(default)]
    pub prompt_response: Option<String>,
    /// Copilot: milliseconds since the epoch; Gemini: an RFC 3339 string.
    #[serde(default)]
    pub timestamp: Option<Value>,
    /// Claude Code 2.1.328: background work in flight that will wake the
    /// session (`[{"id","type":"shell","status":"running","description","command"}]`).
    #[serde(default)]
    pub background_tasks: Option<Vec<Value>>,
    /// Claude Code 2.1.328: scheduled wake-ups (CronCreate, ScheduleWakeup, /loop).
    #[serde(default)]
    pub session_crons: Option<Vec<Value>>,
}

#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("the Stop event on stdin is empty")]
    Empty,
    #[error("the Stop event on stdin is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("could not read the Stop event on stdin: {0}")]
    Read(String),
}

impl StopEvent {
    /// The work that will wake the session, in words (`1 background task
    /// (bg)`), or `None` when nothing is in flight or scheduled.
    pub fn pending_work(&self) -> Option<String> {
        let named = |items: &[Value]| {
            let names: Vec<String> = items
                .iter()
                .take(3)
                .filter_map(|t| {
                    ["description", "prompt", "command", "id"]
                        .iter()
                        .find_map(|k| t.get(k).and_then(Value::as_str))
                })
                .map(|n| {
                    ralph_fs::display::line(&n.chars().take(40).collect::<String>()).into_owned()
                })
                .collect();
            if names.is_empty() {
                String::new()
            } else {
                format!(" ({})", names.join(", "))
            }
        };
        let mut parts = Vec::new();
        if let Some(tasks) = self.background_tasks.as_deref().filter(|t| !t.is_empty()) {
            let s = if tasks.len() == 1 { "" } else { "s" };
            parts.push(format!(
                "{} background task{s}{}",
                tasks.len(),
                named(tasks)
            ));
        }
        if let Some(crons) = self.session_crons.as_deref().filter(|c| !c.is_empty()) {
            let s = if crons.len() == 1 { "" } else { "s" };
            parts.push(format!(
                "{} scheduled wake-up{s}{}",
                crons.len(),
                named(crons)
            ));
        }
        (!parts.is_empty()).then(|| parts.join(" and "))
    }

    pub fn parse(input: &[u8]) -> Result<Self, EventError> {
        if input.iter().all(u8::is_ascii_whitespace) {
            return Err(EventError::Empty);
        }
        Ok(serde_json::from_slice(input)?)
    }

    /// The session, when Claude Code named one.
    /// Parses the event straight from a reader, so the raw payload is never
    /// held in memory next to the parsed reply (a huge reply is held about
    /// twice while it is parsed, once afterwards).
    pub(crate) fn from_reader(reader: impl std::io::Read) -> Result<Self, EventError> {
        let mut tracked = Tracked {
            inner: reader,
            content: false,
        };
        let parsed = serde_json::from_reader(&mut tracked);
        match parsed {
            Ok(event) => Ok(event),
            Err(e) if e.is_io() => Err(EventError::Read(e.to_string())),
            Err(_) if !tracked.content => Err(EventError::Empty),
            Err(e) => Err(EventError::Json(e)),
        }
    }

    pub fn session(&self) -> Option<&str> {
        self.session_id
            .as_deref()
            .or(self.session_id_camel.as_deref())
            .filter(|s| !s.trim().is_empty())
    }

    /// The reply carried by the event itself, if any: `last_assistant_message`,
    /// or else the marketer shape's last `transcript` item.
    /// Moves the reply out of the event (see `reply_in_payload`), so a huge
    /// reply is held once, not copied.
    pub(crate) fn take_reply(&mut self) -> Option<String> {
        match self.last_assistant_message.take() {
            Some(text) => Some(text),
            None => self.reply_in_payload(),
        }
    }

    pub fn reply_in_payload(&self) -> Option<String> {
        if let Some(text) = &self.last_assistant_message {
            return Some(text.clone());
        }
        let last = self.transcript.as_ref()?.last()?;
        let content = last
            .get("content")
            .or_else(|| last.get("message")?.get("content"))?;
        Some(content_text(content))
    }
}

/// The text of a message `content`: a string, or the `text` blocks of a list
/// joined by a blank line (as Claude Code joins them).
/// A reader that notes whether anything but whitespace went through it.
struct Tracked<R> {
    inner: R,
    content: bool,
}

impl<R: std::io::Read> std::io::Read for Tracked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if !self.content {
            self.content = buf[..n].iter().any(|b| !b.is_ascii_whitespace());
        }
        Ok(n)
    }
}

pub(crate) fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_real_payload_and_ignores_unknown_fields() {
        let raw = br#"{"session_id":"s1","transcript_path":"/t.jsonl","cwd":"/p","prompt_id":"x","permission_mode":"default","effort":{"level":"medium"},"hook_event_name":"Stop","stop_hook_active":false,"last_assistant_message":"hi","background_tasks":[],"session_crons":[]}"#;
        let e = StopEvent::parse(raw).unwrap();
        assert_eq!(e.session(), Some("s1"));
        assert_eq!(e.reply_in_payload().as_deref(), Some("hi"));
    }

    #[test]
    fn reads_from_a_reader_like_from_bytes() {
        let raw: &[u8] = br#"{"session_id":"s1","last_assistant_message":"a\nb"}"#;
        let mut e = StopEvent::from_reader(raw).unwrap();
        assert_eq!(e.take_reply().as_deref(), Some("a\nb"));
        assert!(matches!(
            StopEvent::from_reader(&b" \n"[..]),
            Err(EventError::Empty)
        ));
        assert!(matches!(
            StopEvent::from_reader(&b"{"[..]),
            Err(EventError::Json(_))
        ));
    }

    #[test]
    fn marketer_shape() {
        let raw = br#"{"session_id":"s","transcript":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"text","text":"x"},{"type":"tool_use"},{"type":"text","text":"y"}]}]}"#;
        let e = StopEvent::parse(raw).unwrap();
        assert_eq!(e.reply_in_payload().as_deref(), Some("x\n\ny"));
    }

    #[test]
    fn empty_and_invalid() {
        assert!(matches!(StopEvent::parse(b" \n"), Err(EventError::Empty)));
        assert!(matches!(StopEvent::parse(b"{"), Err(EventError::Json(_))));
        assert!(StopEvent::parse(b"[1]").is_err());
    }
}
