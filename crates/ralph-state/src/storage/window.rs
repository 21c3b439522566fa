//! The plan's 5-hour usage window as `ralph statusline` last saw it
//! (Claude Code's status-line input: `rate_limits.five_hour.used_percentage`
//! and `resets_at`, unix seconds), kept per user beside the registry
//! (`$XDG_STATE_HOME/ralph/window.json`), never in a project. Stop hooks
//! get no such figure, so `--max-window` reads it from here. Likewise each
//! session's context window (`context-windows.json`), which the context
//! fill is a share of.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::time::Timestamp;

/// The most the file may hold.
const MAX_BYTES: u64 = 4096;

/// The 5-hour window at one status-line refresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// Whole percent used, rounded up (0–100).
    pub used_percentage: u64,
    /// When the window resets (unix seconds), when the client said.
    pub resets_at: Option<i64>,
    /// When the status line saw it (unix seconds).
    pub seen_at: i64,
}

impl Window {
    /// The window in a status-line input, when it carries one (only
    /// subscription plans do).
    pub fn from_statusline(input: &Value, now: Timestamp) -> Option<Self> {
        let five = input.get("rate_limits")?.get("five_hour")?;
        let used = five.get("used_percentage")?.as_f64()?;
        if !used.is_finite() || used < 0.0 {
            return None;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "finite and not negative, checked above; `as` saturates, then min(100)"
        )]
        let used_percentage = (used.ceil() as u64).min(100);
        Some(Self {
            used_percentage,
            resets_at: five.get("resets_at").and_then(Value::as_i64),
            seen_at: now.0,
        })
    }

    /// The share used now: what was seen, or 0 once the window has reset.
    pub fn used_now(&self, now: Timestamp) -> u64 {
        match self.resets_at {
            Some(reset) if now.0 >= reset => 0,
            _ => self.used_percentage,
        }
    }

    /// `resets 2026-12-01T23:00:00Z`, when known.
    pub fn reset_words(&self) -> String {
        self.resets_at
            .map(|r| format!(", resets {}", Timestamp(r)))
            .unwrap_or_default()
    }
}

/// The context window of each session, as the status line last reported it
/// (`context_window.context_window_size`), newest first, at most
/// [`MAX_SESSIONS`]: what the Stop hook divides the context fill by. Kept
/// per session because sessions run different models (200k and 1M windows).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextWindows {
    pub sessions: Vec<SessionWindow>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionWindow {
    pub session: String,
    /// Tokens.
    pub size: u64,
    /// When the status line saw it (unix seconds).
    pub seen_at: i64,
}

/// The sessions [`ContextWindows`] remembers.
const MAX_SESSIONS: usize = 32;
/// The most its file may hold.
const MAX_WINDOWS_BYTES: u64 = 16 * 1024;
/// A session id longer than this is not kept.
const MAX_SESSION_ID: usize = 128;

impl ContextWindows {
    /// The window the status line last reported for `session`.
    pub fn of(&self, session: &str) -> Option<u64> {
        self.sessions
            .iter()
            .find(|s| s.session == session)
            .map(|s| s.size)
    }

    /// `session`'s window set to `size`, first in the list; whether it changed.
    pub(crate) fn set(&mut self, session: &str, size: u64, now: Timestamp) -> bool {
        if session.len() > MAX_SESSION_ID || size == 0 {
            return false;
        }
        if self
            .sessions
            .first()
            .is_some_and(|s| s.session == session && s.size == size)
        {
            return false;
        }
        self.sessions.retain(|s| s.session != session);
        self.sessions.insert(
            0,
            SessionWindow {
                session: session.to_owned(),
                size,
                seen_at: now.0,
            },
        );
        self.sessions.truncate(MAX_SESSIONS);
        true
    }
}

/// The session's context window in a status-line input, when it says.
pub fn context_window_size(input: &Value) -> Option<u64> {
    input
        .get("context_window")?
        .get("context_window_size")?
        .as_u64()
        .filter(|&n| n > 0)
}

fn windows_path(registry_dir: &Path) -> PathBuf {
    registry_dir.join("context-windows.json")
}

/// The windows kept, or none (no file, or not ralph's).
pub fn load_context_windows(registry_dir: &Path) -> ContextWindows {
    ralph_fs::safe_fs::read_text(&windows_path(registry_dir), MAX_WINDOWS_BYTES)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Keeps `session`'s window when it changed (read, set, replaced whole; two
/// status lines at once may lose one write, which the next refresh makes).
pub fn keep_context_window(
    registry_dir: &Path,
    session: &str,
    size: u64,
    now: Timestamp,
) -> std::io::Result<()> {
    let mut windows = load_context_windows(registry_dir);
    if !windows.set(session, size, now) {
        return Ok(());
    }
    ensure_dir(registry_dir)?;
    let bytes = serde_json::to_vec(&windows).unwrap_or_default();
    ralph_fs::safe_fs::replace(&windows_path(registry_dir), &bytes).map_err(std::io::Error::other)
}

/// Where the last window seen is kept: beside the registry's records.
pub fn path(registry_dir: &Path) -> PathBuf {
    registry_dir.join("window.json")
}

/// Keeps `window` for the hooks (through `safe_fs`: an exclusive temp
/// file renamed over the old one, never through a link).
pub fn save(registry_dir: &Path, window: &Window) -> std::io::Result<()> {
    ensure_dir(registry_dir)?;
    let bytes = serde_json::to_vec(window).unwrap_or_default();
    ralph_fs::safe_fs::replace(&path(registry_dir), &bytes).map_err(std::io::Error::other)
}

/// The registry's folder, made private when missing; refused when not a folder.
fn ensure_dir(registry_dir: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(registry_dir).is_err() {
        // Private, like the registry's own folders.
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(registry_dir)?;
    }
    if !std::fs::symlink_metadata(registry_dir)?.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a folder",
            registry_dir.display()
        )));
    }
    Ok(())
}

/// The window last seen, or `None` when the status line never saw one (or
/// the file is not ralph's: a link, too large, not this shape).
pub fn load(registry_dir: &Path) -> Option<Window> {
    let text = ralph_fs::safe_fs::read_text(&path(registry_dir), MAX_BYTES).ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_lines_window_is_read_kept_and_read_back() {
        let input = serde_json::json!({"rate_limits": {"five_hour": {"used_percentage": 41.2, "resets_at": 2000}}});
        let w = Window::from_statusline(&input, Timestamp(1000)).unwrap();
        assert_eq!(
            w,
            Window {
                used_percentage: 42,
                resets_at: Some(2000),
                seen_at: 1000
            }
        );
        assert_eq!(
            (w.used_now(Timestamp(1999)), w.used_now(Timestamp(2000))),
            (42, 0)
        );
        assert_eq!(
            Window::from_statusline(&serde_json::json!({}), Timestamp(0)),
            None
        );
        let dir = tempfile::tempdir().unwrap();
        let reg = dir.path().join("ralph");
        assert_eq!(load(&reg), None);
        save(&reg, &w).unwrap();
        assert_eq!(load(&reg), Some(w));
    }

    #[test]
    fn each_sessions_context_window_is_kept_apart() {
        let input = serde_json::json!({"context_window": {"context_window_size": 1_000_000, "used_percentage": 19}});
        assert_eq!(context_window_size(&input), Some(1_000_000));
        assert_eq!(context_window_size(&serde_json::json!({})), None);
        let dir = tempfile::tempdir().unwrap();
        let reg = dir.path().join("ralph");
        assert_eq!(load_context_windows(&reg).of("a"), None);
        keep_context_window(&reg, "a", 200_000, Timestamp(1)).unwrap();
        keep_context_window(&reg, "b", 1_000_000, Timestamp(2)).unwrap();
        let kept = load_context_windows(&reg);
        assert_eq!(
            (kept.of("a"), kept.of("b")),
            (Some(200_000), Some(1_000_000))
        );
        let mut many = kept;
        for i in 0..40 {
            many.set(&format!("s{i}"), 5, Timestamp(i));
        }
        assert_eq!(many.sessions.len(), MAX_SESSIONS);
        assert_eq!(many.of("a"), None, "the oldest forgotten");
    }
}
