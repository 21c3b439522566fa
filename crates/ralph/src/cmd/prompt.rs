//! ralph's own slash commands, answered in the UserPromptSubmit hook (`ralph hook prompt`).
//!
//! A command the hook answers costs no model turn: Claude Code shows a `decision: "block"`
//! answer's `reason` to the user and sends nothing to the model, so there is no Stop, no
//! iteration counted, no task fed back, and no skill's `model:` switching the model the loop
//! works with. The user reads exactly what the same command prints in a terminal
//! (`capture.rs`), not a model's retelling of it.
//!
//! - `/ralph-status`, `/ralph-cancel`, `/ralph-pause`, `/ralph-init`: run here, answered
//!   with their output.
//! - `/ralph-loop ARGS`: the loop is armed here, from the text as the event carries it
//!   (never through a shell); the prompt then goes on to the model with ralph's activation
//!   text as context, so that turn is the loop's first iteration. A refusal (a typo, a busy
//!   session) is answered here and nothing reaches the model.
//! - `/ralph-resume`: resumed here; when a loop was resumed the prompt goes on with the task as
//!   context (that turn works on it), otherwise the answer is the report.
//!
//! The skills themselves run no command and are granted no tool: their text reaches the
//! model only when this hook did not run, and tells it to say so.

use serde_json::json;

use ralph_core::display;
use ralph_core::hook::typed::{self, SlashCommand};

use super::capture::captured;
use super::{init, loops, status};
use crate::cli::StatusArgs;
use crate::exit::Failure;

/// The hook's answer to one of ralph's commands.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Nothing goes to the model; `reason` is shown to the user.
    Answered(String),
    /// The prompt goes on to the model with `context`; `notice` is shown to the user.
    Proceed { notice: String, context: String },
}

impl Reply {
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

/// The answer to `input` (the UserPromptSubmit event) when its prompt is one of ralph's
/// commands; `None` for every other prompt.
pub fn answer(input: &[u8]) -> Option<Reply> {
    let event = serde_json::from_slice::<serde_json::Value>(input).ok()?;
    let (command, text) = event["prompt"].as_str().and_then(typed::recognise)?;
    let session = event["session_id"]
        .as_str()
        .filter(|s| !s.trim().is_empty())
        .map(str::to_owned);
    Some(run(command, text, session))
}

fn run(command: SlashCommand, text: &str, session: Option<String>) -> Reply {
    match command {
        SlashCommand::Status => answered(captured(|| {
            status::status(StatusArgs {
                json: false,
                history: 5,
            })
        })),
        SlashCommand::Cancel => answered(captured(|| {
            loops::cancel_as(loops::typed_selection(text)?, session)
        })),
        SlashCommand::Pause => answered(captured(|| {
            loops::pause_or_resume_as(loops::typed_selection(text)?, false, session).map(|_| ())
        })),
        SlashCommand::Init => answered(captured(|| init::init_typed(text))),
        SlashCommand::Resume => resume(text, session),
        SlashCommand::Loop => arm(text, session),
    }
}

/// A command's output, and its error as the terminal shows it (`ralph: …`).
fn report(result: Result<(), Failure>, output: String) -> String {
    let mut text = output;
    if let Err(failure) = result
        && !failure.message.is_empty()
    {
        text.push_str(&format!("ralph: {}\n", display::block(&failure.message)));
    }
    text.trim_end().to_owned()
}

fn answered((result, output): (Result<(), Failure>, String)) -> Reply {
    Reply::Answered(report(result, output))
}

fn arm(text: &str, session: Option<String>) -> Reply {
    let Some(session) = session else {
        return Reply::Answered(
            "ralph: the prompt event names no session, so /ralph-loop cannot bind a loop to it; nothing was armed.".to_owned(),
        );
    };
    let (result, output) = captured(|| loops::start_typed(text, &session));
    match result {
        Ok((name, armed)) => Reply::Proceed {
            notice: ralph_core::loop_file::messages::armed(&name, &armed.state, armed.kept),
            context: output.trim_end().to_owned(),
        },
        Err(failure) => Reply::Answered(report(Err(failure), output)),
    }
}

fn resume(text: &str, session: Option<String>) -> Reply {
    let (result, output) = captured(|| {
        loops::pause_or_resume_as(loops::typed_selection(text)?, true, session.clone())
    });
    match result {
        Ok(names) if !names.is_empty() => {
            let tasks = loops::tasks_of(&names);
            Reply::Proceed {
                notice: format!("▶ {}", output.trim_end()),
                context: format!("{}\n\n{tasks}", output.trim_end()),
            }
        }
        other => answered((other.map(|_| ()), output)),
    }
}
