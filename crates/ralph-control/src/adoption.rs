//! `ralph adopt`'s choice: which loop file, not armed on this machine, is
//! the one to adopt (the one named, or the only one), and whether it can be.
//! Showing it, asking and recording it are the CLI's and `commands::adopt`'s.

use crate::{CommandError, approval};
use ralph_fs::display;
use ralph_state::fields::state::{self, LoopState};
use ralph_state::lifecycle::Loop;
use ralph_state::scan::{LoopEntry, Scan};
use ralph_state::storage::registry::{Arming, Registry};
use ralph_state::storage::store::Project;

/// What `ralph adopt` found to do.
pub enum Choice {
    /// Every loop here is armed on this machine.
    Nothing,
    /// The loop named is armed on this machine already.
    AlreadyArmed(String),
    /// This loop is not armed here, and why not.
    Candidate { live: Box<Loop>, arming: Arming },
}

/// The loop to adopt: `name`, or the only loop here not armed on this machine.
pub fn choose(
    project: &Project,
    registry: &Registry,
    name: Option<&str>,
) -> Result<Choice, CommandError> {
    let mut entries = Scan::read(project, Some(registry))
        .map_err(CommandError::from)?
        .entries;
    // A file that does not read was not armed here either: it is a candidate,
    // refused below with why.
    let armed = |entry: &LoopEntry| entry.arming() == Some(Arming::Armed);
    let index = match name {
        Some(name) => entries
            .iter()
            .position(|e| e.file().name == name)
            .ok_or_else(|| CommandError::NotHere(name.to_owned()))?,
        None => {
            let unarmed: Vec<usize> = (0..entries.len())
                .filter(|&i| !armed(&entries[i]))
                .collect();
            match unarmed.as_slice() {
                [] => return Ok(Choice::Nothing),
                [only] => *only,
                several => {
                    let names = several
                        .iter()
                        .map(|&i| display::line(&entries[i].file().name).into_owned())
                        .collect();
                    return Err(CommandError::SeveralUnarmed(names));
                }
            }
        }
    };
    match entries.swap_remove(index) {
        LoopEntry::Unreadable { file, why, .. } => Err(CommandError::UnreadableToAdopt {
            path: file.path.display().to_string(),
            why,
            name: file.name,
        }),
        LoopEntry::Armed(live) | LoopEntry::Paused(live) => {
            Ok(Choice::AlreadyArmed(live.file.name))
        }
        LoopEntry::Foreign { live, why } => Ok(Choice::Candidate {
            live: Box::new(live),
            arming: Arming::Unarmed(why),
        }),
    }
}

/// What `ralph adopt` shows of a loop before the user accepts it, one line
/// per value, every value escaped to one line: a newline in a name, a path or
/// a command is `\n`, so it cannot fake a line. `shown_path` is the file's
/// path as the CLI shows it. The settings shown are every field the arming
/// record binds (`state::bound_values`, the same list `binding` hashes), so a
/// field ralph learns later is shown as soon as it is bound; the dangerous
/// ones in plain words.
pub fn describe(project: &Project, shown_path: &str, live: &Loop, status: &Arming) -> Vec<String> {
    let one = |text: &str| display::line(text).into_owned();
    let state = &live.state;
    let mut lines = vec![
        format!(
            "Loop `{}` in {} is not armed on this machine: {}.",
            one(&live.file.name),
            one(shown_path),
            status.why_not()
        ),
        "Read what it would do before you adopt it:".to_owned(),
        String::new(),
        format!(
            "  owner:              {}",
            state.session_id.as_deref().map_or_else(
                || "none yet (the first session that stops in this project takes it)".to_owned(),
                one
            )
        ),
        format!("  iteration:          {}", state.iteration_label()),
        "  Adopting binds these settings as the file holds them (a setting it does not hold keeps its default):"
            .to_owned(),
    ];
    // The file parsed already (it is a `Loop`), so its fields read.
    for (field, value) in state::bound_values(&live.text).unwrap_or_default() {
        lines.extend(setting(project, state, field, &value));
    }
    lines.push("  prompt:".to_owned());
    lines.extend(
        state
            .prompt
            .lines()
            .map(|line| format!("  │ {}", one(line))),
    );
    lines.push(String::new());
    lines
}

/// Runs as you: said after every command a loop holds.
const AS_YOU: &str = "← runs as you (sh -c, in the project root)";

/// One bound setting, `  field: value` and what it does; a story command list takes a
/// line per command.
fn setting(project: &Project, state: &LoopState, field: &str, value: &str) -> Vec<String> {
    let one = |text: &str| display::line(text).into_owned();
    let words = match field {
        "verify" if state.gate_alone() => format!(
            "{}   {AS_YOU} at each turn end that changed the work tree or HEAD",
            one(value)
        ),
        "verify" => format!("{}   {AS_YOU} when the promise comes", one(value)),
        "check" => format!("{}   {AS_YOU} at every stop that goes on", one(value)),
        "notify_url" => ralph_state::fields::notice::destination(value).map_or_else(
            || format!("{}   (not a URL ralph calls: never used)", one(value)),
            |to| {
                format!(
                    "{}   ← when the loop ends, ralph POSTs its name, project, outcome and cost to {to}",
                    one(value)
                )
            },
        ),
        "prd_commands" => {
            let Some(prd) = &state.prd else {
                return vec![format!("  {field}: {}   (no prd: never used)", one(value))];
            };
            let mut out = vec![format!(
                "  {field}: story commands that run as you (sh -c, in the project root), each when the agent marks its story in {} as passing:",
                one(&prd.path)
            )];
            out.extend(
                approval::bound_lines(&project.root, prd)
                    .into_iter()
                    .map(|line| format!("  {line}")),
            );
            return out;
        }
        _ => format!("{}{}", one(value), plain_words(field)),
    };
    vec![format!("  {field}: {words}")]
}

/// What a setting does, for those that are not commands or a webhook.
fn plain_words(field: &str) -> String {
    if let Some(guard) = ralph_state::fields::guards::OPTIONS
        .iter()
        .find(|g| g.field == field)
    {
        return format!("   ({})", guard.help);
    }
    let words = match field {
        "max_iterations" => "turns in all, the first included; 0 means no limit",
        "completion_promise" => "the text the agent says to finish",
        "abort_promise" => "the text the agent says when only a person can unblock it",
        "started_at" => "when the loop began: its time budget counts from here",
        "fresh_context" => "Gemini CLI: clear the model's history before every iteration",
        "prd" => "the PRD whose stories the agent works through and may mark as passing",
        "prd_criteria" => {
            "each story's title, description and acceptance criteria at arming: a story whose criteria differ is refused when marked passing"
        }
        "notify" => "a desktop notification when the loop ends",
        "sandbox" => "`ralph run` starts every agent process confined to the project",
        "sandbox_network" => {
            "with sandbox: `none` cuts the agent off the network, `host` shares this machine's (default `internet`: not the host's own services)"
        }
        "sandbox_image" => "with sandbox: the container image the agent runs in",
        "protect" => {
            "paths the agent must not change: while one differs from the tree at arming, the promise is refused"
        }
        "scope" => "globs every path the loop changes must match",
        "armed_tree" => {
            "the git tree of the work tree at arming, which protect and scope compare with"
        }
        "armed_excludes" => {
            "the repository's own ignore rules at arming (a git blob): the comparison lists new files with them"
        }
        "gate_setup" => {
            "a command run in the gate's snapshot before a gate, when the snapshot changed"
        }
        "holdout" => {
            "a folder outside the project whose files are copied into the gate's snapshot only"
        }
        "holdout_digest" => "the SHA-256 of the held-out set at arming: a changed set is refused",
        _ => "a setting ralph reads",
    };
    format!("   ({words})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::project;
    use ralph_state::fields::binding::is_bound;
    use ralph_state::fields::state::KNOWN_FIELDS;
    use ralph_state::storage::store::LoopFile;

    /// A value each bound field reads; a new field whose value this does not fit fails
    /// the parse below, and gets its own here.
    fn sample(field: &str) -> &'static str {
        match field {
            "completion_promise" | "abort_promise" | "verify" | "check" => "\"touch x\"",
            "started_at" => "\"2026-01-01T00:00:00Z\"",
            "fresh_context" | "notify" | "sandbox" => "true",
            "sandbox_network" => "none",
            "gate_sandbox" => "off",
            "gate_network" => "open",
            "fresh_via" => "run",
            "sandbox_image" => "\"img:1\"",
            "protect" | "scope" => "\"tests/**\"",
            "armed_tree" | "armed_excludes" => "\"4b825dc642cb6eb9a060e54bf8d69288fbee4904\"",
            "prd" => "\"ralph/prd.json\"",
            "prd_commands" | "prd_criteria" => "\"US-1:0123456789abcdef\"",
            "notify_url" => "\"https://hooks.example:8443/in?k=1\"",
            "max_duration" | "verify_timeout" | "check_timeout" => "5m",
            _ => "3",
        }
    }

    fn described(text: &str) -> Vec<String> {
        let (_t, p, _r) = project();
        let live = Loop {
            file: LoopFile {
                name: "x".into(),
                path: p.loop_path("x"),
            },
            state: LoopState::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}")),
            text: text.to_owned(),
        };
        describe(&p, "x", &live, &Arming::Armed)
    }

    /// Whatever the record binds, adopt shows: a field added to the loop file and bound
    /// (every field but the bookkeeping) cannot be bound unseen.
    #[test]
    fn every_bound_field_has_a_line_in_what_adopt_shows() {
        let bound: Vec<&str> = KNOWN_FIELDS
            .iter()
            .copied()
            .filter(|f| is_bound(f))
            .collect();
        let fields: Vec<String> = bound
            .iter()
            .map(|f| format!("{f}: {}", sample(f)))
            .collect();
        let text = format!("---\n{}\n---\nDo it\n", fields.join("\n"));
        let lines = described(&text);
        for field in &bound {
            assert!(
                lines.iter().any(|l| l.starts_with(&format!("  {field}: "))),
                "`{field}` is bound but adopt does not show it:\n{}",
                lines.join("\n")
            );
        }
        for dangerous in [
            "  verify: touch x   ← runs as you (sh -c, in the project root) when the promise comes",
            "  check: touch x   ← runs as you (sh -c, in the project root) at every stop that goes on",
            "  notify_url: https://hooks.example:8443/in?k=1   ← when the loop ends, ralph POSTs its name, project, outcome and cost to host hooks.example, port 8443, path /in?k=1",
        ] {
            assert!(
                lines.iter().any(|l| l == dangerous),
                "{dangerous}\n{}",
                lines.join("\n")
            );
        }
        let story = lines
            .iter()
            .position(|l| l.starts_with("  prd_commands: story commands that run as you"))
            .unwrap_or_else(|| panic!("{}", lines.join("\n")));
        assert!(
            lines[story + 1].starts_with("    US-1: a command ralph cannot show you (recorded only as digest 0123456789abcdef"),
            "{}",
            lines.join("\n")
        );
    }

    #[test]
    fn a_story_command_the_prd_holds_is_shown_and_values_are_escaped() {
        let (_t, p, _r) = project();
        std::fs::create_dir_all(p.root.join("ralph")).unwrap();
        std::fs::write(
            p.root.join("ralph/prd.json"),
            r#"{"userStories":[{"id":"US-1","title":"a","passes":false,"verify":"make \u001b[2J lint"}]}"#,
        )
        .unwrap();
        let digest = ralph_state::fields::stories::command_digest("make \u{1b}[2J lint");
        let text = format!(
            "---\nprd: \"ralph/prd.json\"\nprd_commands: \"US-1:{digest}\"\nmax_tokens: 9\n---\nDo it\n"
        );
        let live = Loop {
            file: LoopFile {
                name: "x".into(),
                path: p.loop_path("x"),
            },
            state: LoopState::parse(&text).unwrap(),
            text,
        };
        let lines = describe(&p, "x", &live, &Arming::Armed);
        assert!(
            lines.contains(&"    US-1: make \\x1b[2J lint".to_owned()),
            "{lines:#?}"
        );
        assert!(
            lines.contains(
                &"  max_tokens: 9   (Token budget for the loop's assistant turns)".to_owned()
            ),
            "{lines:#?}"
        );
    }
}
