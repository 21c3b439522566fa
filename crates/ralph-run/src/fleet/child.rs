//! What each child `ralph run` of a fleet is told: the agent and the loop's
//! settings as the fleet's own command line gave them, with its story's own
//! check and globs ([`StoryGate`]), as arguments made in one place
//! ([`ChildFlags::args`]). The task comes on stdin and the loop's name from
//! its story (`driver.rs`); the flags of one loop only (`--hand-back-after`,
//! `--force`) are refused before a fleet starts.

use crate::fleet::Story;
use ralph_state::fields::guards::GuardSettings;

/// The flags of `ralph run --parallel` that every child gets again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "each is one flag of `ralph run` given again to every child"
)]
pub struct ChildFlags {
    /// The agent's command line or preset, as given.
    pub agent: String,
    pub permission_mode: Option<String>,
    pub max_iterations: Option<u64>,
    pub abort_promise: Option<String>,
    /// The guards asked for, each value checked for its option's kind.
    pub guards: GuardSettings,
    pub fresh_context: bool,
    /// Each story's loop tells of its own end.
    pub notify: bool,
    pub notify_url: Option<String>,
    /// A child on a rate or usage limit sleeps until the reset as a single
    /// run would, rather than end its story with code 4.
    pub wait_for_reset: bool,
    /// `--sandbox` and its settings: each story's agent runs confined to
    /// its own worktree.
    pub sandbox: Option<ralph_state::fields::confinement::Confinement>,
    /// `--protect`, `--scope`: each glob given again to every story's loop.
    pub protect: Vec<String>,
    pub scope: Vec<String>,
    /// `--unprotect`, `--no-default-protect`: each story's loop narrows the
    /// gate's default protections as the run was asked to.
    pub unprotect: Vec<String>,
    pub no_default_protect: bool,
}

/// What one story adds to its child's settings: its own check, run in the
/// `--verify` gate before the run's (so the loop is refused in the loop,
/// where the agent can still fix it, not only at the trip home), and its
/// own `"protect"` and `"scope"` globs after the run's (a child is given no
/// PRD, so they would otherwise be lost).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoryGate<'a> {
    pub verify: Option<&'a str>,
    pub protect: &'a [String],
    pub scope: &'a [String],
}

impl<'a> From<&'a Story> for StoryGate<'a> {
    fn from(story: &'a Story) -> Self {
        Self {
            verify: story.verify.as_deref(),
            protect: &story.protect,
            scope: &story.scope,
        }
    }
}

impl ChildFlags {
    /// The arguments of a story's child, `promise` being the one every
    /// story's loop gives and `story` what its own story adds.
    pub fn args(&self, promise: &str, story: StoryGate) -> Vec<String> {
        // Ctrl-C: the fleet's loops end as cancelled, and its next run
        // starts them again in their worktrees.
        let mut out = vec![
            "--cancel-on-interrupt".to_owned(),
            "--agent".to_owned(),
            self.agent.clone(),
        ];
        let mut add = |flag: &str, value: Option<String>| {
            if let Some(v) = value {
                out.extend([flag.to_owned(), v]);
            }
        };
        add("--permission-mode", self.permission_mode.clone());
        add("--completion-promise", Some(promise.to_owned()));
        add(
            "--max-iterations",
            self.max_iterations.map(|v| v.to_string()),
        );
        add("--abort-promise", self.abort_promise.clone());
        let mut guards = self.guards.clone();
        if let Some(check) = story.verify {
            guards.verify_first(check);
        }
        out.extend(guards.args());
        let switches = [
            (self.fresh_context, "--fresh-context"),
            (self.notify, "--notify"),
        ];
        out.extend(
            switches
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, f)| (*f).to_owned()),
        );
        if let Some(url) = &self.notify_url {
            out.extend(["--notify-url".to_owned(), url.clone()]);
        }
        if self.wait_for_reset {
            out.push("--wait-for-reset".to_owned());
        }
        if let Some(sandbox) = &self.sandbox {
            out.push("--sandbox".to_owned());
            if sandbox.network != ralph_state::fields::confinement::Network::Internet {
                out.extend([
                    "--sandbox-network".to_owned(),
                    sandbox.network.word().to_owned(),
                ]);
            }
            if let Some(image) = &sandbox.image {
                out.extend(["--sandbox-image".to_owned(), image.clone()]);
            }
        }
        if self.no_default_protect {
            out.push("--no-default-protect".to_owned());
        }
        for glob in &self.unprotect {
            out.extend(["--unprotect".to_owned(), glob.clone()]);
        }
        let globs = [
            ("--protect", [&self.protect[..], story.protect]),
            ("--scope", [&self.scope[..], story.scope]),
        ];
        for (flag, lists) in globs {
            for glob in lists.into_iter().flatten() {
                out.extend([flag.to_owned(), glob.clone()]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guards(settings: &[(&str, &str)]) -> GuardSettings {
        let mut guards = GuardSettings::default();
        for (flag, value) in settings {
            guards
                .set(GuardSettings::option(flag).unwrap(), value)
                .unwrap();
        }
        guards
    }

    #[test]
    fn a_child_gets_every_setting_given_in_the_order_it_always_had() {
        let flags = ChildFlags {
            protect: Vec::new(),
            scope: Vec::new(),
            unprotect: Vec::new(),
            no_default_protect: false,
            agent: "claude".into(),
            permission_mode: Some("acceptEdits".into()),
            max_iterations: Some(7),
            abort_promise: Some("STUCK".into()),
            guards: guards(&[("max-duration", "2h")]),
            fresh_context: true,
            notify: true,
            notify_url: Some("http://127.0.0.1:9/n".into()),
            wait_for_reset: true,
            sandbox: Some(ralph_state::fields::confinement::Confinement {
                network: ralph_state::fields::confinement::Network::None,
                image: None,
            }),
        };
        assert_eq!(
            flags.args("DONE", StoryGate::default()),
            [
                "--cancel-on-interrupt",
                "--agent",
                "claude",
                "--permission-mode",
                "acceptEdits",
                "--completion-promise",
                "DONE",
                "--max-iterations",
                "7",
                "--abort-promise",
                "STUCK",
                "--max-duration",
                "2h",
                "--fresh-context",
                "--notify",
                "--notify-url",
                "http://127.0.0.1:9/n",
                "--wait-for-reset",
                "--sandbox",
                "--sandbox-network",
                "none",
            ]
        );
    }

    #[test]
    fn a_child_gets_only_the_agent_and_the_promise_when_nothing_else_was_given() {
        let flags = ChildFlags {
            protect: Vec::new(),
            scope: Vec::new(),
            unprotect: Vec::new(),
            no_default_protect: false,
            agent: "true".into(),
            ..ChildFlags::default()
        };
        assert_eq!(
            flags.args("OK", StoryGate::default()),
            [
                "--cancel-on-interrupt",
                "--agent",
                "true",
                "--completion-promise",
                "OK"
            ]
        );
    }

    #[test]
    fn a_story_child_gets_its_own_check_and_globs_beside_the_runs() {
        let run = ChildFlags {
            agent: "claude".into(),
            guards: guards(&[("verify", "cargo test"), ("verify-timeout", "20m")]),
            protect: vec!["ci.yml".into()],
            ..ChildFlags::default()
        };
        let story = Story {
            verify: Some("make check".into()),
            protect: vec!["tests/**".into()],
            scope: vec!["src/**".into()],
            ..Story::default()
        };
        let given = run.args("DONE", StoryGate::from(&story));
        assert_eq!(
            given[5..],
            [
                "--verify",
                "( make check\n) && ( cargo test\n)",
                "--verify-timeout",
                "20m",
                "--protect",
                "ci.yml",
                "--protect",
                "tests/**",
                "--scope",
                "src/**"
            ]
        );
        let plain = run.args("DONE", StoryGate::from(&Story::default()));
        assert_eq!(
            plain[5..],
            [
                "--verify",
                "cargo test",
                "--verify-timeout",
                "20m",
                "--protect",
                "ci.yml"
            ]
        );
        // The run's own settings are left as they were.
        assert_eq!(run.guards.verify(), Some("cargo test"));
    }
}
