//! ralph's own slash commands, answered in the UserPromptSubmit hook (`ralph hook prompt`).
//!
//! A command the hook answers costs no model turn: Claude Code shows a `decision: "block"`
//! answer's `reason` to the user and sends nothing to the model, so there is no Stop, no
//! iteration counted, no task fed back, and no skill's `model:` switching the model the loop
//! works with. The user reads exactly what the same command prints in a terminal
//! (`capture.rs`), not a model's retelling of it.
//!
//! - `/ralph-status`, `/ralph-cancel`, `/ralph-pause`, `/ralph-init`, `/ralph-say`: run
//!   here, answered with their output.
//! - `/ralph-loop ARGS`: the loop is armed here, from the text as the event carries it
//!   (never through a shell); the prompt then goes on to the model with ralph's activation
//!   text as context, so that turn is the loop's first iteration. A refusal (a typo, a busy
//!   session) is answered here and nothing reaches the model. So is a `--prd` loop whose
//!   story commands the user has not approved: the answer lists them, for the user only,
//!   with the one line to send that approves exactly them (`--approve-commands CODE`).
//! - `/ralph-resume`: resumed here; when a loop was resumed the prompt goes on with the task as
//!   context (that turn works on it), otherwise the answer is the report. With `--add-*` the
//!   loop's bounds are raised and one that ended at a limit or budget is armed again, for
//!   this session, and goes on the same way.
//!
//! The skills themselves run no command and are granted no tool: their text reaches the
//! model only when this hook did not run, and tells it to say so.

use ralph_control::revive::Raise;
use ralph_control::typed::{self, Reply, SlashCommand};
use ralph_control::{self as control, arguments};

use super::capture::captured;
use super::{init, loops, status};
use crate::exit::Failure;
use ralph_cli::StatusArgs;

/// The answer to `input` (the UserPromptSubmit event) when its prompt is one of ralph's
/// commands; `None` for every other prompt.
pub(super) fn answer(input: &[u8]) -> Option<Reply> {
    let call = typed::invocation(input)?;
    Some(run(call.command, &call.text, call.session))
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
            loops::cancel_as(&arguments::selection(text)?, session)
        })),
        SlashCommand::Pause => answered(captured(|| {
            loops::pause_or_resume_as(&arguments::selection(text)?, false, session).map(|_| ())
        })),
        SlashCommand::Init => answered(captured(|| init::init_typed(text))),
        SlashCommand::Say => answered(captured(|| say_typed(text, session.as_deref()))),
        SlashCommand::Resume => resume(text, session),
        SlashCommand::Loop => arm(text, session),
    }
}

/// `/ralph-say [--name NAME | --story ID | --all] [--gate] TEXT`: the flags first, the rest
/// verbatim as the guidance; answered with what `ralph say` prints.
fn say_typed(text: &str, session: Option<&str>) -> Result<(), Failure> {
    let args = say_arguments(text).map_err(Failure::usage)?;
    for line in super::say::say_as(&crate::env::project(), &args, "/ralph-say", session)? {
        say!("{line}");
    }
    Ok(())
}

/// `/ralph-say`'s typed text as `ralph say`'s arguments (`guidance::typed_say`).
fn say_arguments(text: &str) -> Result<ralph_cli::SayArgs, String> {
    let typed = ralph_control::guidance::typed_say(text)?;
    Ok(ralph_cli::SayArgs {
        text: typed.text,
        name: typed.name,
        story: typed.story,
        all: typed.all,
        gate: typed.gate,
    })
}

/// A command's output, and its error as the terminal shows it (`ralph: …`).
fn answered((result, output): (Result<(), Failure>, String)) -> Reply {
    Reply::answered(output, result.err().as_ref().map(|f| f.message.as_str()))
}

fn arm(text: &str, session: Option<String>) -> Reply {
    let Some(session) = session else {
        return Reply::Answered(typed::NO_SESSION.to_owned());
    };
    let (result, output) = captured(|| loops::start_typed(text, &session));
    match result {
        Ok(loops::Typed::Armed(activation)) => {
            let mut reply = Reply::armed(&activation, &output);
            // The commands a pasted code approved, on the user's screen (the notice).
            if let (Reply::Proceed { notice, .. }, Some(commands)) =
                (&mut reply, loops::approved_notice(&activation))
            {
                notice.push_str(&format!("\n{commands}"));
            }
            reply
        }
        // The story commands go to the user only: a block's reason never reaches the model.
        Ok(loops::Typed::Approve(list)) => Reply::Answered(list),
        Err(failure) => answered((Err(failure), output)),
    }
}

fn resume(text: &str, session: Option<String>) -> Reply {
    let (raise, rest) = match Raise::take_from(text) {
        Ok(taken) => taken,
        Err(why) => return answered((Err(Failure::usage(why)), String::new())),
    };
    let (result, output) = if raise.any() {
        // `--add-*`: the bounds raised, an ended loop armed again, for this session.
        captured(|| {
            let selection = arguments::selection(&rest)?;
            loops::revive_as(selection.name.as_deref(), &raise, session.clone()).map(|n| vec![n])
        })
    } else {
        captured(|| loops::pause_or_resume_as(&arguments::selection(text)?, true, session.clone()))
    };
    match result {
        Ok(names) if !names.is_empty() => {
            let tasks = control::tasks_of(
                &crate::env::project(),
                crate::env::registry().as_ref(),
                &names,
            );
            Reply::resumed(&output, &tasks)
        }
        other => answered((other.map(|_| ()), output)),
    }
}
