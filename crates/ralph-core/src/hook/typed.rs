//! What the user typed after a ralph slash command, carried past the shell.
//!
//! A skill's `!` block is shell text, and Claude Code pastes `$ARGUMENTS` into it raw: no
//! quoting (not even a quoted heredoc, whose delimiter is public) survives every input. So the
//! skills never put `$ARGUMENTS` in a block. The `UserPromptSubmit` hook (`ralph hook prompt`)
//! gets the prompt as JSON before any block runs; [`recognise`] tells it which of ralph's
//! commands it is (`/ralph-loop …`, `/ralph:ralph-loop …`, `/ralph-cancel …`, …), and the hook
//! answers it itself (the binary's `cmd/prompt.rs`), so the plugin's skills run no block at all.
//! Nothing typed is kept anywhere: the hook acts on the text as the event carries it.

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
}
