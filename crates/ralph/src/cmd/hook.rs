//! `ralph hook stop`: read the event, answer, exit 0 — whatever happens.

use std::io::{Read, Write};
use std::process::ExitCode;

use ralph_core::hook::{self, HookContext};
use ralph_core::typed;

pub fn stop() -> ExitCode {
    let mut input = Vec::new();
    let answer = match std::io::stdin().read_to_end(&mut input) {
        Ok(_) => hook::stop(&input, &HookContext::from_env()),
        Err(e) => ralph_core::answer::Answer::Notice(format!(
            "⚠ ralph: could not read the Stop event on stdin: {e}. The stop was allowed."
        )),
    };
    let rendered = answer.render();
    if let ralph_core::answer::Answer::Notice(message) = &answer {
        eprintln!("{message}");
    }
    // A closed stdout leaves nothing to tell; the exit code stays 0 either way.
    let _ = std::io::stdout().write_all(rendered.as_bytes());
    ExitCode::SUCCESS
}

/// `ralph hook prompt`: the UserPromptSubmit hook. For `/ralph-loop …` and the other skills
/// that take arguments it keeps the typed text, from the event's JSON, for the skill's
/// `--typed-arguments`; every other prompt costs one JSON parse. It prints nothing (stdout
/// of this hook would reach the model) except a `systemMessage` when it could not keep the
/// text, and always exits 0.
pub fn prompt() -> ExitCode {
    let mut input = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut input);
    let Ok(event) = serde_json::from_slice::<serde_json::Value>(&input) else {
        return ExitCode::SUCCESS;
    };
    let Some((command, text)) = event["prompt"].as_str().and_then(typed::recognise) else {
        return ExitCode::SUCCESS;
    };
    let session = event["session_id"].as_str().unwrap_or_default();
    let kept = typed::default_dir().and_then(|dir| {
        typed::keep(
            &dir,
            session,
            command,
            text,
            ralph_core::time::Timestamp::now().0,
        )
    });
    if let Err(e) = kept {
        let answer = serde_json::json!({
            "systemMessage": format!("⚠ ralph: could not keep the text typed after /{}: {e}", command.skill())
        });
        let _ = writeln!(std::io::stdout(), "{answer}");
    }
    ExitCode::SUCCESS
}
