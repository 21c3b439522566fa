//! What the user typed after a ralph slash command, carried past the shell.
//!
//! A skill's `!` block is shell text, and Claude Code pastes `$ARGUMENTS` into it raw: no
//! quoting (not even a quoted heredoc, whose delimiter is public) survives every input. So the
//! skills never put `$ARGUMENTS` in a block. The `UserPromptSubmit` hook (`ralph hook prompt`)
//! gets the prompt as JSON before any block runs; [`recognise`] tells it which of ralph's
//! commands it is (`/ralph-loop …`, `/ralph:ralph-loop …`, `/ralph-cancel …`, …), and the hook
//! answers it itself (the binary's `cmd/prompt.rs`), so the plugin's skills run no block at all.
//! Nothing typed is kept anywhere: the hook acts on the text as the event carries it.
//!
//! Here too: the command an event asks for ([`invocation`]) and the answer's shape
//! ([`Reply`]); the binary runs the command and fills the answer with what it printed.

use serde_json::json;

/// The skills whose arguments travel this way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlashCommand {
    Loop,
    Cancel,
    Pause,
    Resume,
    Init,
    Status,
    Say,
}

impl SlashCommand {
    pub const ALL: [SlashCommand; 7] = [
        Self::Loop,
        Self::Cancel,
        Self::Pause,
        Self::Resume,
        Self::Init,
        Self::Status,
        Self::Say,
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
            Self::Say => "ralph-say",
        }
    }
}

/// A prompt that invokes one of the skills: the command and the raw text after its name
/// (leading blanks and the line break after the name removed, nothing else).
pub(crate) fn recognise(prompt: &str) -> Option<(SlashCommand, &str)> {
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

/// One of ralph's commands, as a UserPromptSubmit event asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub command: SlashCommand,
    /// The text typed after the command's name, verbatim.
    pub text: String,
    /// The session the event names (none when blank).
    pub session: Option<String>,
}

/// The command `input` (the UserPromptSubmit event's JSON) asks for when its prompt is one
/// of ralph's; `None` for every other prompt, and for input that is not an event.
pub fn invocation(input: &[u8]) -> Option<Invocation> {
    let event = serde_json::from_slice::<serde_json::Value>(input).ok()?;
    let (command, text) = event["prompt"].as_str().and_then(recognise)?;
    let session = event["session_id"]
        .as_str()
        .filter(|s| !s.trim().is_empty())
        .map(str::to_owned);
    Some(Invocation {
        command,
        text: text.to_owned(),
        session,
    })
}

/// `/ralph-loop`'s answer when the event names no session to bind the loop to.
pub const NO_SESSION: &str = "ralph: the prompt event names no session, so /ralph-loop cannot bind a loop to it; nothing was armed.";

/// The hook's answer to one of ralph's commands.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Nothing goes to the model; `reason` is shown to the user.
    Answered(String),
    /// The prompt goes on to the model with `context`; `notice` is shown to the user.
    Proceed { notice: String, context: String },
}

impl Reply {
    /// A command's answer: what it printed, and its error as the terminal shows it
    /// (`ralph: …`, escaped), trimmed.
    pub fn answered(output: String, error: Option<&str>) -> Self {
        Self::Answered(report(output, error))
    }

    /// `/ralph-loop` armed a loop: the user is told so, and the prompt goes on with the
    /// activation text as printed (`output`) as context, so that turn is the loop's first
    /// iteration.
    pub fn armed(loop_armed: &crate::arming::Activation, output: &str) -> Self {
        let (name, armed) = (&loop_armed.name, &loop_armed.armed);
        Self::Proceed {
            notice: ralph_state::messages::armed(name, &armed.state, armed.kept),
            context: output.trim_end().to_owned(),
        }
    }

    /// `/ralph-resume` resumed loops: the prompt goes on with the report and their `tasks`.
    pub fn resumed(output: &str, tasks: &str) -> Self {
        let output = output.trim_end();
        // `--add-*`'s report has its glyph already; a plain resume's has none.
        let notice = if output.starts_with('▶') {
            output.to_owned()
        } else {
            format!("▶ {output}")
        };
        Self::Proceed {
            notice,
            context: format!("{output}\n\n{tasks}"),
        }
    }

    /// The answer as the hook prints it: one JSON object and a line break.
    pub fn render(&self) -> String {
        let value = match self {
            Self::Answered(reason) => json!({ "decision": "block", "reason": reason }),
            Self::Proceed { notice, context } => json!({
                "systemMessage": notice,
                "hookSpecificOutput": {
                    "hookEventName": "UserPromptSubmit",
                    "additionalContext": context,
                },
            }),
        };
        format!("{value}\n")
    }
}

/// What a command printed, then its error as the terminal shows it.
fn report(output: String, error: Option<&str>) -> String {
    let mut text = output;
    if let Some(message) = error.filter(|m| !m.is_empty()) {
        text.push_str(&format!("ralph: {}\n", ralph_fs::display::block(message)));
    }
    text.trim_end().to_owned()
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
    fn an_event_names_the_command_its_text_and_session() {
        let event = |prompt: &str, session: &str| {
            serde_json::json!({ "prompt": prompt, "session_id": session })
                .to_string()
                .into_bytes()
        };
        assert_eq!(
            invocation(&event("/ralph-cancel docs", "s-1")),
            Some(Invocation {
                command: SlashCommand::Cancel,
                text: "docs".into(),
                session: Some("s-1".into()),
            })
        );
        let blank = invocation(&event("/ralph-loop x", " ")).unwrap();
        assert_eq!(blank.session, None);
        assert_eq!(invocation(&event("hello", "s")), None);
        assert_eq!(invocation(b"not json"), None);
    }

    #[test]
    fn a_reply_blocks_or_goes_on_with_context() {
        let v = |r: &Reply| serde_json::from_str::<serde_json::Value>(&r.render()).unwrap();
        let answered = Reply::answered("done\n\n".into(), Some("bad\u{1b}[2J"));
        assert_eq!(
            answered,
            Reply::Answered("done\n\nralph: bad\\x1b[2J".into())
        );
        assert_eq!(v(&answered)["decision"], "block");
        assert_eq!(
            Reply::answered("out\n".into(), Some("")),
            Reply::Answered("out".into())
        );
        assert_eq!(
            Reply::answered("out\n".into(), None),
            Reply::Answered("out".into())
        );
        let resumed = Reply::resumed("Resumed loop `a`.\n", "Your task");
        assert_eq!(
            resumed,
            Reply::Proceed {
                notice: "▶ Resumed loop `a`.".into(),
                context: "Resumed loop `a`.\n\nYour task".into(),
            }
        );
        let json = v(&resumed);
        assert_eq!(json["systemMessage"], "▶ Resumed loop `a`.");
        assert_eq!(
            json["hookSpecificOutput"]["hookEventName"],
            "UserPromptSubmit"
        );
        assert!(resumed.render().ends_with("}\n"));
    }
}
