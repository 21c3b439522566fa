//! `ralph say`, `/ralph-say` and `ralph watch`'s `s`: guidance queued for a
//! loop's next iteration (`loop_file/storage/guidance.rs` keeps it, the turn
//! that goes on delivers it), and the answer to the question its agent asked,
//! which resumes the loop.

use crate::commands::{self, CommandError};
use ralph_state::scan::Scan;
use ralph_state::storage::guidance::{self, MAX_TEXT_BYTES, Mailbox};
use ralph_state::storage::registry::{Registry, RegistryError};
use ralph_state::storage::store::Project;
use ralph_state::time::Timestamp;

/// What the user says, and to which loop.
#[derive(Debug, Clone, Copy)]
pub struct Say<'a> {
    pub text: &'a str,
    /// The loop named; else this session's, else the only one.
    pub name: Option<&'a str>,
    /// Every loop armed here.
    pub all: bool,
    /// `--gate`: the first promise after delivery is refused once.
    pub gate: bool,
    /// `ralph say`, `/ralph-say`, `ralph watch`.
    pub by: &'a str,
    pub session: Option<&'a str>,
}

/// What was queued: the loops, and the lines to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    pub names: Vec<String>,
    pub lines: Vec<String>,
}

/// Queues `say.text` for the next iteration of the loops it names (armed
/// here only). A loop paused on its agent's question takes it as the answer
/// and is resumed, through the same change `ralph resume` makes.
pub fn say(
    project: &Project,
    registry: Option<&Registry>,
    say: Say<'_>,
    now: Timestamp,
) -> Result<Said, CommandError> {
    let text = say.text.trim();
    if text.is_empty() {
        return Err(CommandError::Recover(
            "the guidance is empty: give it as an argument, e.g. ralph say \"check auth.rs, not auth_old.rs\"".into(),
        ));
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(CommandError::Recover(format!(
            "the guidance is {} bytes; ralph takes at most {MAX_TEXT_BYTES} (a sentence or a paragraph: point at a file for more)",
            text.len()
        )));
    }
    let registry = registry.ok_or(CommandError::Registry(RegistryError::NoHome))?;
    let scan = Scan::read(project, Some(registry))?;
    let names: Vec<String> = if say.all {
        scan.ours().map(|l| l.file.name.clone()).collect()
    } else {
        let ours: Vec<_> = scan
            .entries
            .iter()
            .filter(|e| e.ours().is_some())
            .cloned()
            .collect();
        commands::pick_entries(&ours, say.name, say.session)?
    };
    if names.is_empty() {
        return Err(CommandError::Recover(match say.name {
            Some(name) => format!(
                "no loop named `{}` is armed here (see `ralph status`); nothing was queued",
                ralph_fs::display::line(name)
            ),
            None => "no loop armed here to guide (see `ralph status`); nothing was queued".into(),
        }));
    }
    let mut lines = Vec::new();
    for name in &names {
        lines.push(say_to(project, registry, name, text, &say, now)?);
    }
    Ok(Said { names, lines })
}

/// Queues the guidance for one loop; answers its open question.
fn say_to(
    project: &Project,
    registry: &Registry,
    name: &str,
    text: &str,
    say: &Say<'_>,
    now: Timestamp,
) -> Result<String, CommandError> {
    let root = ralph_state::storage::registry::canonical_root(project)?;
    let mailbox = Mailbox::of(registry, &root, name);
    let mut entry = guidance::guidance(text, say.gate, say.by);
    entry.at = now.to_string();
    let question = mailbox.answer();
    entry.answers = question.as_ref().map(|q| q.text.clone());
    mailbox.post(&entry)?;
    let shown = ralph_fs::display::line(name);
    let gate = if say.gate {
        " (--gate: the first promise after it is refused once)"
    } else {
        ""
    };
    if let Some(q) = question {
        let resumed = commands::set_active(
            project,
            Some(registry),
            Some(name),
            false,
            say.session,
            true,
            now,
        )?;
        let how = if resumed.is_empty() {
            "the loop was not paused; it goes into its next iteration"
        } else {
            "the loop resumes and its next iteration carries the answer"
        };
        return Ok(format!(
            "💬 Answered `{shown}`'s question ({}){gate}: {how}.",
            ralph_fs::display::line(&q.text)
        ));
    }
    Ok(format!(
        "💬 Guidance queued for `{shown}`{gate}: it goes into the next iteration's prompt, once."
    ))
}

/// The guidance queued for a loop and not yet delivered, and its open
/// question, for `ralph status` and `ralph watch`.
pub fn waiting(project: &Project, registry: Option<&Registry>, name: &str) -> Waiting {
    let Some(mailbox) = registry.and_then(|r| Mailbox::of_project(r, project, name)) else {
        return Waiting::default();
    };
    Waiting {
        pending: mailbox.pending().into_iter().map(|g| g.text).collect(),
        question: mailbox.question().map(|q| q.text),
        delivered: mailbox
            .delivered()
            .into_iter()
            .map(|d| DeliveredGuidance {
                iteration: d.iteration,
                text: d.guidance.text,
                gate: d.guidance.gate,
            })
            .collect(),
    }
}

/// A loop's mailbox as the user is shown it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiting {
    pub pending: Vec<String>,
    pub question: Option<String>,
    /// Delivered guidance, oldest first, with the iteration that carried it.
    pub delivered: Vec<DeliveredGuidance>,
}

/// One delivered guidance as `ralph status --json` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeliveredGuidance {
    pub iteration: u64,
    pub text: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gate: bool,
}

/// The lines `ralph status` shows of a loop's mailbox (escaped).
pub(crate) fn status_lines(
    pending: &[String],
    question: Option<&str>,
    delivered: &[DeliveredGuidance],
) -> Vec<String> {
    let line = |t: &str| ralph_fs::display::line(t).into_owned();
    let mut out = Vec::new();
    if let Some(q) = question {
        out.push(format!(
            "  ❓ the agent asks: {} (answer with ralph say)",
            line(q)
        ));
    }
    for text in pending {
        out.push(format!(
            "  💬 guidance for the next iteration: {}",
            line(text)
        ));
    }
    if let Some(last) = delivered.last() {
        out.push(format!(
            "  💬 last guidance, in iteration {}'s prompt: {}",
            last.iteration,
            line(&last.text)
        ));
    }
    out
}

/// What `/ralph-say` was typed with, as `ralph say`'s flags give it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TypedSay {
    pub text: String,
    pub name: Option<String>,
    pub story: Option<String>,
    pub all: bool,
    pub gate: bool,
}

/// `/ralph-say [--name NAME | --story ID | --all] [--gate] TEXT` as typed: the flags first,
/// the rest verbatim as the guidance.
pub fn typed_say(text: &str) -> Result<TypedSay, String> {
    let mut args = TypedSay::default();
    let mut rest = text.trim_start();
    while rest.starts_with("--") {
        let (word, after) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let after = after.trim_start();
        let value = || {
            let (v, tail) = after.split_once(char::is_whitespace).unwrap_or((after, ""));
            (!v.is_empty()).then(|| (v.to_owned(), tail.trim_start()))
        };
        rest = match word {
            "--gate" => {
                args.gate = true;
                after
            }
            "--all" => {
                args.all = true;
                after
            }
            "--name" | "--story" => {
                let Some((v, tail)) = value() else {
                    return Err(format!("{word} needs a value: /ralph-say {word} X TEXT"));
                };
                if word == "--name" {
                    args.name = Some(v);
                } else {
                    args.story = Some(v);
                }
                tail
            }
            other => {
                return Err(format!(
                    "/ralph-say takes --name NAME, --story ID, --all and --gate before the text, not `{other}`"
                ));
            }
        };
    }
    if rest.trim().is_empty() {
        return Err(
            "/ralph-say needs the guidance: /ralph-say check auth.rs, not auth_old.rs".into(),
        );
    }
    args.text = rest.trim_end().to_owned();
    Ok(args)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ralph_say_takes_its_flags_first_and_the_rest_verbatim() {
        let args = typed_say("--gate --story US-2  run `make test` -- first").unwrap();
        assert!(args.gate);
        assert_eq!(args.story.as_deref(), Some("US-2"));
        assert_eq!(args.text, "run `make test` -- first");
        assert!(typed_say("--name").is_err());
        assert!(typed_say("--bogus x").is_err());
        assert!(typed_say("  ").is_err());
    }

    use super::*;
    use crate::ArmRequest;
    use crate::test_support::project;

    fn arm_one(project: &Project, registry: &Registry) {
        let request = ArmRequest {
            name: "l".into(),
            prompt: "task".into(),
            ..ArmRequest::default()
        };
        commands::arm(project, registry, &request, Timestamp(0)).unwrap();
    }

    fn say_text(text: &str) -> Say<'_> {
        Say {
            text,
            name: None,
            all: false,
            gate: false,
            by: "ralph say",
            session: None,
        }
    }

    #[test]
    fn guidance_goes_to_the_only_loop_and_waits_for_its_next_iteration() {
        let (_d, project, registry) = project();
        arm_one(&project, &registry);
        let said = say(
            &project,
            Some(&registry),
            say_text("look at auth.rs"),
            Timestamp(5),
        )
        .unwrap();
        assert_eq!(said.names, ["l"]);
        let waiting = waiting(&project, Some(&registry), "l");
        assert_eq!(waiting.pending, ["look at auth.rs"]);
        let err = say(&project, Some(&registry), say_text("  "), Timestamp(5)).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }

    #[test]
    fn an_answer_resumes_a_loop_paused_on_its_question() {
        let (_d, project, registry) = project();
        arm_one(&project, &registry);
        commands::set_active(
            &project,
            Some(&registry),
            Some("l"),
            false,
            None,
            false,
            Timestamp(1),
        )
        .unwrap();
        let mailbox = Mailbox::of_project(&registry, &project, "l").unwrap();
        mailbox
            .ask(&guidance::Question {
                text: "A or B?".into(),
                at: "t".into(),
                iteration: 1,
            })
            .unwrap();
        let said = say(&project, Some(&registry), say_text("B"), Timestamp(5)).unwrap();
        assert!(said.lines[0].contains("Answered"), "{:?}", said.lines);
        let scan = Scan::read(&project, Some(&registry)).unwrap();
        assert!(scan.ours().next().unwrap().state.active, "resumed");
        assert!(mailbox.question().is_none());
        assert_eq!(mailbox.pending()[0].answers.as_deref(), Some("A or B?"));
    }
}
