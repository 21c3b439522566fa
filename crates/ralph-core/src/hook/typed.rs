//! What the user typed after a ralph slash command, carried past the shell.
//!
//! A skill's `!` block is shell text, and Claude Code pastes `$ARGUMENTS` into it raw: no
//! quoting (not even a quoted heredoc, whose delimiter is public) survives every input. So the
//! skills never put `$ARGUMENTS` in a block. The `UserPromptSubmit` hook (`ralph hook prompt`)
//! gets the prompt as JSON before any block runs; [`recognise`] tells it which of ralph's
//! commands it is (`/ralph-loop …`, `/ralph:ralph-loop …`, `/ralph-cancel …`, …), and the hook
//! answers it itself (the binary's `cmd/prompt.rs`), so the plugin's skills run no block at all.
//!
//! [`keep`] and [`take`] remain behind the CLI's `--typed-arguments` flags (text kept per user
//! and session, taken once); the plugin's hook no longer keeps anything for them.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The skills whose arguments travel this way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlashCommand {
    Loop,
    Cancel,
    Pause,
    Resume,
    Init,
    Status,
}

impl SlashCommand {
    pub const ALL: [SlashCommand; 6] = [
        Self::Loop,
        Self::Cancel,
        Self::Pause,
        Self::Resume,
        Self::Init,
        Self::Status,
    ];

    /// The skill's name, as the user types it (`/ralph-loop`).
    pub fn skill(self) -> &'static str {
        match self {
            Self::Loop => "ralph-loop",
            Self::Cancel => "ralph-cancel",
            Self::Pause => "ralph-pause",
            Self::Resume => "ralph-resume",
            Self::Init => "ralph-init",
            Self::Status => "ralph-status",
        }
    }
}

/// A prompt that invokes one of the skills: the command and the raw text after its name
/// (leading blanks and the line break after the name removed, nothing else).
pub fn recognise(prompt: &str) -> Option<(SlashCommand, &str)> {
    let prompt = prompt.trim_start();
    // Codex names a skill with `$` (`$ralph-loop TASK`); it has only that one.
    if let Some(rest) = prompt.strip_prefix("$ralph-loop") {
        return match rest.chars().next() {
            None => Some((SlashCommand::Loop, "")),
            Some(c) if c.is_whitespace() => Some((SlashCommand::Loop, rest.trim_start())),
            Some(_) => None,
        };
    }
    let rest = prompt.strip_prefix('/')?;
    let rest = rest.strip_prefix("ralph:").unwrap_or(rest);
    SlashCommand::ALL.into_iter().find_map(|command| {
        let after = rest.strip_prefix(command.skill())?;
        match after.chars().next() {
            None => Some((command, "")),
            Some(c) if c.is_whitespace() => Some((command, after.trim_start())),
            Some(_) => None,
        }
    })
}

/// A session id safe to use in a file name (Claude Code's are UUIDs).
pub fn valid_session(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Text older than this is never used: the skill's block runs seconds after the hook.
pub const MAX_AGE_SECS: i64 = 600;
/// Prompts past this size are refused rather than copied.
pub const MAX_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TypedError {
    #[error("no per-user state folder: neither XDG_STATE_HOME nor HOME is set to an absolute path")]
    NoStateDir,
    #[error("session id {0:?} is not usable as a file name")]
    BadSession(String),
    #[error("{0} is a symlink or not a folder; remove it")]
    NotAFolder(PathBuf),
    #[error(
        "the text typed after /{0} did not reach ralph: the plugin's UserPromptSubmit hook did not record it (are hooks disabled? With Codex, `ralph install codex` again adds the prompt hook that $ralph-loop needs). Nothing was done."
    )]
    Missing(&'static str),
    #[error("the text typed after /{0} is too long (over {MAX_BYTES} bytes)")]
    TooLong(&'static str),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl crate::error::Exit for TypedError {}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TypedError + '_ {
    move |source| TypedError::Io {
        path: path.to_owned(),
        source,
    }
}

/// `$XDG_STATE_HOME/ralph/typed`, else `$HOME/.local/state/ralph/typed`: per user, outside
/// every project, so a repository can never plant text there.
pub fn default_dir() -> Result<PathBuf, TypedError> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let state = absolute("XDG_STATE_HOME")
        .or_else(|| {
            crate::loop_file::registry::home_from_env()
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".local/state"))
        })
        .ok_or(TypedError::NoStateDir)?;
    Ok(state.join("ralph/typed"))
}

#[derive(Serialize, Deserialize)]
struct Record {
    /// Unix seconds when the hook saw the prompt.
    at: i64,
    text: String,
}

fn file(dir: &Path, session: &str, command: SlashCommand) -> Result<PathBuf, TypedError> {
    if !valid_session(session) {
        return Err(TypedError::BadSession(session.to_owned()));
    }
    Ok(dir.join(format!("{session}.{}.json", command.skill())))
}

fn ensure_dir(dir: &Path) -> Result<(), TypedError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(io(dir))?;
    let meta = std::fs::symlink_metadata(dir).map_err(io(dir))?;
    if !meta.is_dir() {
        return Err(TypedError::NotAFolder(dir.to_owned()));
    }
    Ok(())
}

/// Keeps `text` for the session's next `command` (replacing any earlier one), written to a
/// fresh private file and renamed into place.
pub fn keep(
    dir: &Path,
    session: &str,
    command: SlashCommand,
    text: &str,
    now: i64,
) -> Result<(), TypedError> {
    if text.len() > MAX_BYTES {
        return Err(TypedError::TooLong(command.skill()));
    }
    let target = file(dir, session, command)?;
    ensure_dir(dir)?;
    let body = serde_json::to_vec(&Record {
        at: now,
        text: text.to_owned(),
    })
    .map_err(|e| io(&target)(e.into()))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for attempt in 0u32..100 {
        let temp = dir.join(format!(".tmp-{}-{nanos:x}-{attempt}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut out = match options.open(&temp) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(&temp)(e)),
        };
        let written = out.write_all(&body).and_then(|()| out.sync_all());
        if let Err(e) = written.and_then(|()| std::fs::rename(&temp, &target)) {
            let _ = std::fs::remove_file(&temp);
            return Err(io(&target)(e));
        }
        return Ok(());
    }
    Err(io(dir)(std::io::Error::other(
        "could not create a temporary file",
    )))
}

/// Takes (reads and removes) the text the session typed after `command`, if the hook kept it
/// less than [`MAX_AGE_SECS`] ago.
pub fn take(
    dir: &Path,
    session: &str,
    command: SlashCommand,
    now: i64,
) -> Result<String, TypedError> {
    use std::io::Read;
    let path = file(dir, session, command)?;
    let missing = || TypedError::Missing(command.skill());
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
        Err(e) => return Err(io(&path)(e)),
    };
    if !meta.is_file() {
        return Err(TypedError::NotAFolder(path));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_BYTES as u64 * 2 + 64).read_to_end(&mut bytes))
        .map_err(io(&path))?;
    // Once taken, never again: a later command must come with its own typed text.
    std::fs::remove_file(&path).map_err(io(&path))?;
    let record: Record = serde_json::from_slice(&bytes).map_err(|_| missing())?;
    let age = now.saturating_sub(record.at);
    if !(0..=MAX_AGE_SECS).contains(&age) {
        return Err(missing());
    }
    Ok(record.text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_both_names_and_keeps_the_rest_verbatim() {
        let text = "Fix it\nRALPH_ARGS_7f3a\n$(touch x) `y` \"q\" 'r'  ";
        for prefix in [
            "/ralph-loop ",
            "/ralph:ralph-loop ",
            "/ralph-loop\n",
            "  /ralph-loop  ",
            "$ralph-loop ",
        ] {
            let prompt = format!("{prefix}{text}");
            assert_eq!(
                recognise(&prompt),
                Some((SlashCommand::Loop, text)),
                "{prompt:?}"
            );
        }
        assert_eq!(recognise("/ralph-cancel"), Some((SlashCommand::Cancel, "")));
        assert_eq!(
            recognise("/ralph:ralph-status\n"),
            Some((SlashCommand::Status, ""))
        );
        assert_eq!(
            recognise("/ralph:ralph-resume docs"),
            Some((SlashCommand::Resume, "docs"))
        );
    }

    #[test]
    fn ignores_other_prompts() {
        for prompt in [
            "",
            "hello /ralph-loop x",
            "/ralph-loops x",
            "/ralph-statuses",
            "/other:ralph-loop x",
            "ralph-loop x",
            "$ralph-loops x",
            "$ralph-cancel",
        ] {
            assert_eq!(recognise(prompt), None, "{prompt:?}");
        }
    }

    #[test]
    fn session_ids_are_checked() {
        assert!(valid_session("5b360de9-0000-4000-8000-00000000abcd"));
        for bad in ["", "../x", "a/b", "a.b", &"x".repeat(129)] {
            assert!(!valid_session(bad), "{bad:?}");
        }
    }

    #[test]
    fn kept_text_is_taken_once_and_byte_identical() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().join("typed");
        let text = "a\nRALPH_ARGS_7f3a\n$(x) `y` 'z' \"w\"\n\u{1F600}";
        keep(&dir, "s-1", SlashCommand::Loop, text, 1000).unwrap();
        assert!(matches!(
            take(&dir, "s-1", SlashCommand::Cancel, 1000),
            Err(TypedError::Missing(_))
        ));
        assert!(matches!(
            take(&dir, "s-2", SlashCommand::Loop, 1000),
            Err(TypedError::Missing(_))
        ));
        assert_eq!(take(&dir, "s-1", SlashCommand::Loop, 1001).unwrap(), text);
        assert!(matches!(
            take(&dir, "s-1", SlashCommand::Loop, 1001),
            Err(TypedError::Missing(_))
        ));
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(names.is_empty(), "no file left behind: {names:?}");
    }

    #[test]
    fn stale_text_is_never_used() {
        let dir = tempfile::tempdir().unwrap();
        keep(dir.path(), "s", SlashCommand::Loop, "old", 0).unwrap();
        assert!(matches!(
            take(dir.path(), "s", SlashCommand::Loop, MAX_AGE_SECS + 1),
            Err(TypedError::Missing(_))
        ));
        keep(dir.path(), "s", SlashCommand::Loop, "future", 10_000).unwrap();
        assert!(take(dir.path(), "s", SlashCommand::Loop, 0).is_err());
    }

    #[test]
    fn a_bad_session_id_never_names_a_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            keep(dir.path(), "../evil", SlashCommand::Loop, "x", 0),
            Err(TypedError::BadSession(_))
        ));
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        assert!(matches!(
            keep(&dir.path().join("link"), "s", SlashCommand::Loop, "x", 0),
            Err(TypedError::NotAFolder(_))
        ));
    }
}
