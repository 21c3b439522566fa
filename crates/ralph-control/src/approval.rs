//! The commands a loop would run that the user did not type: a `--prd` loop's story
//! commands (each story's `verify`, from the repository's PRD). ralph binds them only
//! after the user saw them and agreed to exactly that list: `--approve-commands CODE`,
//! where the code is a digest of the list keyed with the user's own secret (kept in the
//! per-user state folder, [`Secret::of_user`]), so one confirmation binds exactly the
//! commands shown, a list changed since gives another code, and no file of the project
//! (a README, a PRD) can print the right code for the user to paste. What the user is shown
//! (in a terminal, or in the prompt hook's answer that only the user reads) is built
//! here; where it is shown and how the answer is read is the binary's.

use sha2::{Digest, Sha256};

use ralph_fs::display;
use ralph_state::fields::state::PrdLoop;
use ralph_state::fields::stories::{self, Story};

/// The flag that approves a list of commands, as the user types it.
pub(crate) const FLAG: &str = "--approve-commands";

/// The story commands a PRD asks ralph to run, and the code that approves exactly them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoryCommands {
    /// The PRD's path inside the project.
    pub prd: String,
    /// `(story id, command)`, in the PRD's order: only stories with a command.
    pub commands: Vec<(String, String)>,
    /// The approval code of exactly this list ([`code`]).
    pub code: String,
}

/// The key of every approval code: the user's secret, never in a project.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// The user's secret, from the per-user state folder (made there on first use,
    /// `Registry::approval_secret`). Without one (no HOME, a folder ralph refuses), a
    /// secret of this process alone: a code then approves nothing another ralph checks,
    /// and only a terminal's question (or the prompt hook's answer, which arms in the
    /// same process) approves.
    pub fn of_user() -> Self {
        let registry = ralph_state::storage::registry::from_env();
        if let Some(bytes) = registry.and_then(|r| r.approval_secret().ok()) {
            return Self(bytes);
        }
        static OWN: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        Self(
            OWN.get_or_init(|| {
                let mut bytes = [0u8; 32];
                if getrandom::fill(&mut bytes).is_err() {
                    // No randomness: the time and the process, hashed, unguessable enough
                    // for one process's life.
                    let seed = format!("{:?} {}", std::time::SystemTime::now(), std::process::id());
                    bytes.copy_from_slice(&Sha256::digest(seed.as_bytes()));
                }
                bytes.to_vec()
            })
            .clone(),
        )
    }
}

impl StoryCommands {
    /// The commands of `stories`, read from the PRD at `prd`, and their code under `secret`.
    pub fn of(prd: &str, stories: &[Story], secret: &Secret) -> Self {
        let commands: Vec<(String, String)> = stories
            .iter()
            .filter_map(|s| s.verify.as_ref().map(|c| (s.id.clone(), c.clone())))
            .collect();
        Self {
            prd: prd.to_owned(),
            code: code(secret, &commands),
            commands,
        }
    }

    /// Whether `given` (the `--approve-commands` value) approves this list. A list with
    /// no command needs no approval.
    pub fn approved_by(&self, given: Option<&str>) -> bool {
        self.commands.is_empty() || given.is_some_and(|g| g.trim() == self.code)
    }

    /// One line per command, every value escaped to one line.
    pub fn lines(&self) -> Vec<String> {
        self.commands
            .iter()
            .map(|(id, command)| format!("  {}: {}", display::line(id), display::line(command)))
            .collect()
    }

    /// What the commands are and where they come from, then the list.
    fn heading(&self) -> String {
        self.listed(
            "which ralph would run as you (sh -c, in the project root) when the agent marks each story as passing",
        )
    }

    /// The commands, where they come from and `how` ralph would run them, then the list.
    fn listed(&self, how: &str) -> String {
        format!(
            "Story commands in {}, {how}; they come from the project's files, not from you:\n{}",
            display::line(&self.prd),
            self.lines().join("\n")
        )
    }

    /// How `ralph run --parallel` runs them.
    fn fleet_heading(&self) -> String {
        self.listed(
            "which `ralph run --parallel` runs as you (sh -c): each open story's in its loop's verify gate, in the story's worktree, and again on its rebased branch before it comes home",
        )
    }

    /// The refusal of `ralph run --parallel` that could not ask: the list, and the flag
    /// that approves it (in GitHub Actions, the `approve-commands` input).
    pub fn fleet_refusal(&self, given: Option<&str>) -> String {
        format!(
            "{}{}\nNothing ran: no agent started and no story command ran. If you trust them, run again with `{FLAG} {}` (in the GitHub Actions fleet, the workflow's `approve-commands` input; any change to them gives another code), or run it in a terminal to be asked",
            mismatch(given),
            self.fleet_heading(),
            self.code
        )
    }

    /// The question a terminal asks once for the whole fleet.
    pub fn fleet_question(&self) -> String {
        format!(
            "{}\nRun them as you for this fleet? (`{FLAG} {}` approves exactly this list without asking) [y/N] ",
            self.fleet_heading(),
            self.code
        )
    }

    /// What `ralph plan` adds: the list and its code (nothing when no story has a command).
    pub fn plan_lines(&self) -> Vec<String> {
        if self.commands.is_empty() {
            return Vec::new();
        }
        let mut out = vec![String::new(), self.fleet_heading()];
        out.push(format!(
            "Approve exactly this list with `{FLAG} {}` (`ralph run --parallel`, or the fleet workflow's `approve-commands` input); any change to them gives another code.",
            self.code
        ));
        out
    }

    /// The refusal of a terminal command (`ralph start`, `ralph run`) that could not ask:
    /// the list, and the flag that approves it. `given` is a code that did not match.
    pub fn refusal(&self, given: Option<&str>) -> String {
        format!(
            "{}{}\nNothing was armed. If you trust them, arm again with `{FLAG} {}` (any change to them gives another code), or run it in a terminal to be asked",
            mismatch(given),
            self.heading(),
            self.code
        )
    }

    /// The question a terminal asks (the answer is read by the binary).
    pub fn question(&self) -> String {
        format!(
            "{}\nRun them as you when their stories pass? (`{FLAG} {}` names exactly this list) [y/N] ",
            self.heading(),
            self.code
        )
    }

    /// `/ralph-loop`'s answer, shown to the user only (the prompt hook's block reason):
    /// the list and the one line to send to approve it. `raw` is the text typed after
    /// `/ralph-loop`.
    pub fn in_session(&self, given: Option<&str>, raw: &str) -> String {
        let again = resend(raw, &self.code).map_or_else(
            || {
                format!(
                    "send the same /ralph-loop command again with `{FLAG} {}` added.",
                    self.code
                )
            },
            |line| format!("send:\n\n  {line}"),
        );
        format!(
            "⚠ {}{}\n\nNothing was armed, and the model was sent nothing. If you trust them, {again}\n\n(Any change to the commands gives another code; a command added or changed after arming never runs.)",
            mismatch(given),
            self.heading(),
        )
    }
}

/// The sentence said when a code was given but does not match the list now.
fn mismatch(given: Option<&str>) -> String {
    given.map_or_else(String::new, |g| {
        format!(
            "`{FLAG} {}` does not approve the commands the PRD holds now (they changed, or the code was mistyped). ",
            display::line(g.trim())
        )
    })
}

/// The code that approves exactly `commands` for the holder of `secret`: SHA-256 over
/// each id and command, length-prefixed (so no text moves between them unnoticed),
/// keyed as HMAC keys (the secret before and after the list's digest, so the code of one
/// list tells nothing of another's), 12 hex digits. Without the secret nobody can work
/// it out, however well they know the list.
pub fn code(secret: &Secret, commands: &[(String, String)]) -> String {
    let mut list = Sha256::new();
    list.update(b"ralph approval v2\0");
    for (id, command) in commands {
        for part in [id, command] {
            list.update((part.len() as u64).to_be_bytes());
            list.update(part.as_bytes());
        }
    }
    let keyed = |data: &[u8]| {
        let mut h = Sha256::new();
        h.update((secret.0.len() as u64).to_be_bytes());
        h.update(&secret.0);
        h.update(data);
        h.finalize()
    };
    keyed(&keyed(&list.finalize()))
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `/ralph-loop` line that approves `code`, when the typed text fits on one line:
/// any earlier approval removed, the new one first.
fn resend(raw: &str, code: &str) -> Option<String> {
    let kept = without_approval(raw);
    let kept = kept.trim();
    if kept.contains(['\n', '\r']) || kept.chars().count() > 300 || display::line(kept) != kept {
        return None;
    }
    Some(
        format!("/ralph-loop {FLAG} {code} {kept}")
            .trim_end()
            .to_owned(),
    )
}

/// `raw` without its `--approve-commands VALUE` (or `=VALUE`) words.
fn without_approval(raw: &str) -> String {
    let mut out = Vec::new();
    let mut words = raw.split(' ');
    while let Some(word) = words.next() {
        if word == FLAG {
            words.next();
        } else if !word.starts_with(&format!("{FLAG}=")) {
            out.push(word);
        }
    }
    out.join(" ")
}

/// What the user who armed with a code is shown on their own screen (the terminal's
/// standard error, the prompt hook's notice): the commands the loop has bound, which
/// the model might otherwise be the only one to read. `None` when it bound none.
pub fn approved_notice(root: &std::path::Path, prd: &PrdLoop) -> Option<String> {
    let lines = bound_lines(root, prd);
    (!lines.is_empty()).then(|| {
        format!(
            "Story commands approved: ralph runs them as you (sh -c, in the project root) when their stories pass:\n{}",
            lines.join("\n")
        )
    })
}

/// The story commands a live loop has bound (its `prd_commands`), as the PRD holds
/// them now, one line each: the command, when the PRD's story still has the command
/// recorded; else what ralph knows of it (only its digest), said plainly, since a PRD
/// edited back to that command would run it.
pub(crate) fn bound_lines(root: &std::path::Path, prd: &PrdLoop) -> Vec<String> {
    let stories = ralph_core::decide::prd_turn::read(root, prd).unwrap_or_default();
    prd.commands
        .split_whitespace()
        .filter_map(|pair| pair.rsplit_once(':'))
        .map(|(id, digest)| {
            let now = stories.iter().find(|s| s.id == id).and_then(|s| {
                s.verify
                    .as_deref()
                    .filter(|c| stories::command_digest(c) == digest)
            });
            now.map_or_else(
                || {
                    format!(
                        "  {}: a command ralph cannot show you (recorded only as digest {}; {} holds another or none now); if the PRD comes to hold it, it runs as you",
                        display::line(id),
                        display::line(digest),
                        display::line(&prd.path)
                    )
                },
                |command| format!("  {}: {}", display::line(id), display::line(command)),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret::new(vec![7; 32])
    }

    fn story(id: &str, verify: Option<&str>) -> Story {
        Story {
            id: id.into(),
            title: String::new(),
            description: String::new(),
            criteria: Vec::new(),
            passes: false,
            priority: None,
            verify: verify.map(Into::into),
            blocked: None,
            concerns: Vec::new(),
            protect: Vec::new(),
            scope: Vec::new(),
            depends_on: Vec::new(),
        }
    }

    #[test]
    fn the_code_approves_exactly_the_list() {
        let list = StoryCommands::of(
            "ralph/prd.json",
            &[story("US-1", Some("make test")), story("US-2", None)],
            &secret(),
        );
        assert_eq!(list.commands, [("US-1".into(), "make test".into())]);
        assert_eq!(list.code.len(), 12);
        assert!(!list.approved_by(None));
        assert!(list.approved_by(Some(&format!(" {} ", list.code))));
        let changed = StoryCommands::of(
            "ralph/prd.json",
            &[story("US-1", Some("make test "))],
            &secret(),
        );
        assert_ne!(changed.code, list.code);
        let moved = StoryCommands::of(
            "ralph/prd.json",
            &[story("US-1m", Some("ake test"))],
            &secret(),
        );
        assert_ne!(
            moved.code, list.code,
            "no text moves between id and command"
        );
        assert!(StoryCommands::of("p", &[story("US-1", None)], &secret()).approved_by(None));
        // Another user's secret, or none known to the writer of a README: another code.
        let other = StoryCommands::of(
            "ralph/prd.json",
            &[story("US-1", Some("make test")), story("US-2", None)],
            &Secret::new(vec![8; 32]),
        );
        assert_ne!(other.code, list.code);
        assert_eq!(other.code.len(), 12);
    }

    #[test]
    fn the_user_is_shown_each_command_escaped_and_one_line_to_send() {
        let list = StoryCommands::of(
            "ralph/prd.json",
            &[story("US-1", Some("rm -rf ~\u{1b}[2J"))],
            &secret(),
        );
        let text = list.in_session(None, "--prd --max-iterations 5");
        assert!(text.contains("\n  US-1: rm -rf ~\\x1b[2J\n"), "{text}");
        assert!(
            text.contains(&format!(
                "send:\n\n  /ralph-loop --approve-commands {} --prd --max-iterations 5\n",
                list.code
            )),
            "{text}"
        );
        let again = list.in_session(Some("abc"), "--approve-commands abc --prd");
        assert!(
            again.contains("`--approve-commands abc` does not approve"),
            "{again}"
        );
        assert!(
            again.contains(&format!(
                "/ralph-loop --approve-commands {} --prd\n",
                list.code
            )),
            "{again}"
        );
        let fleet = list.fleet_refusal(None);
        assert!(
            fleet.contains("\n  US-1: rm -rf ~\\x1b[2J\n")
                && fleet.contains(&format!("`--approve-commands {}`", list.code))
                && fleet.contains("`approve-commands` input"),
            "{fleet}"
        );
        assert!(
            list.plan_lines()
                .concat()
                .contains(&format!("--approve-commands {}", list.code))
        );
        assert!(
            StoryCommands::of("p", &[story("US-1", None)], &secret())
                .plan_lines()
                .is_empty(),
            "no command, nothing to approve"
        );
        let long = list.in_session(None, "--prd\nline two");
        assert!(long.contains("again with `--approve-commands "), "{long}");
        assert!(
            list.refusal(None)
                .contains(&format!("--approve-commands {}", list.code))
        );
    }
}
