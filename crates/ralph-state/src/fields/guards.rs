//! The guards a loop runs besides its iteration limit and promises: their
//! settings (one `Guards` value, read from the loop file), their options
//! (one table, which the slash command's parser, `ralph start --help`, the
//! README's options table and `ralph status` are checked against), and
//! their words for the user. Each guard's rule lives in `decide`.

use crate::fields::frontmatter::quote;
use crate::fields::limit::Limit;
use crate::fields::options::{
    ArgumentsError, OptionKind, check_duration, check_money, check_number,
};
use crate::fields::values::{
    FieldSource, MAX_COUNT, MAX_TOKENS, StateError, duration, non_empty, number,
};
use crate::money::Money;
use crate::time::format_duration;

/// Identical replies in a row that end a loop as stuck (0 turns the breaker off).
pub(crate) const DEFAULT_STUCK_AFTER: u64 = 3;
/// Iterations without any change to the working tree or HEAD that end a loop.
pub(crate) const DEFAULT_NO_PROGRESS_AFTER: u64 = 5;
/// The verification command's time limit, in seconds, when none is set.
pub const DEFAULT_VERIFY_TIMEOUT: u64 = 300;
/// The longest verification a loop may ask for: it must finish well inside
/// the hook's own timeout (900 s in hooks/hooks.json).
pub(crate) const MAX_VERIFY_TIMEOUT: u64 = 840;
/// Failed verification gates that end a loop; off unless asked for, so a
/// loop armed before this guard existed behaves as it did.
pub(crate) const DEFAULT_MAX_VERIFY_FAILURES: u64 = 0;
/// The fast check's time limit, in seconds, when none is set: a check runs
/// at every stop, so it is meant to take seconds, not minutes.
pub(crate) const DEFAULT_CHECK_TIMEOUT: u64 = 120;
/// Identical failures in a row (of the check, or of the gate refusing the
/// promise) that end a loop, when a check or a gate is set: the third time
/// the same error comes back, the approach is what needs questioning.
pub const DEFAULT_MAX_SAME_FAILURE: u64 = 3;
/// Checks in a row without a new lowest failure count that end a loop, when
/// a check is set: patient enough that a hard test taking a few turns does
/// not stop it.
pub(crate) const DEFAULT_STALL_AFTER: u64 = 5;
/// The gate setup step's time limit, in seconds, when none is set.
pub const DEFAULT_GATE_SETUP_TIMEOUT: u64 = 300;
/// How many failure counts a loop file keeps, for `ralph status`'s trend.
pub const FAILURE_TREND_LEN: usize = 8;

/// Limits set when arming; every one of them is optional. `ralph status
/// --json` shows each field under its name here.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Guards {
    pub max_duration_secs: Option<u64>,
    pub max_tokens: Option<u64>,
    pub verify: Option<String>,
    pub verify_timeout_secs: u64,
    pub stuck_after: Limit,
    pub no_progress_after: Limit,
    /// Failed verification gates (refused promises) that end the loop; 0: off.
    pub max_verify_failures: Limit,
    /// The fast check run at every stop where the loop goes on.
    pub check: Option<String>,
    pub check_timeout_secs: u64,
    /// Identical failures in a row that end the loop; 0: off.
    pub max_same_failure: Limit,
    /// Checks in a row without a new lowest failure count that end the loop; 0: off.
    pub stall_after: Limit,
    /// The dollar budget (`max_cost`); `None` or 0: off.
    pub max_cost_usd: Option<Money>,
    /// Pause the in-session loop once the plan's 5-hour window is this
    /// many percent used (`max_window`, 1–100); `None`: off.
    pub max_window_pct: Option<u64>,
    /// `--gate-sandbox off`: the gate runs without its sandbox (refused
    /// when the agent runs sandboxed, whose gate is always confined).
    pub gate_sandbox_off: bool,
    /// `--gate-network open`: the sandboxed gate has the host's network.
    pub gate_network_open: bool,
    /// `gate_setup`: the step run in the gate's snapshot before a gate
    /// (`uv sync --frozen`, `npm ci`), when the snapshot changed.
    pub gate_setup: Option<String>,
    pub gate_setup_timeout_secs: u64,
    /// `holdout`: a folder outside the project whose files are added to the
    /// gate's snapshot only, and (`holdout_digest`) their SHA-256 at arming.
    pub holdout: Option<String>,
    pub holdout_digest: Option<String>,
}

/// Calls `$callback!` with the loop-file fields of the guards' settings
/// between the fields before and after them, so that `state.rs`'s list of
/// fields does not name them: a new guard adds its field here, its reading
/// in [`Guards::read`], its row in [`OPTIONS`], its ending in [`Tripped`]
/// (if it ends loops), its rule in `decide`.
/// The guards' counters ([`GuardCounts`]) go between the middle and the
/// last part.
macro_rules! with_guard_fields {
    ($callback:ident!($($before:ident),* ; $($middle:ident),* ; $($after:ident),* $(,)?)) => {
        $callback!(
            $($before,)*
            max_duration,
            max_tokens,
            verify,
            verify_timeout,
            stuck_after,
            no_progress_after,
            max_verify_failures,
            check,
            check_timeout,
            max_same_failure,
            stall_after,
            max_cost,
            max_window,
            gate_sandbox,
            gate_network,
            gate_setup,
            gate_setup_timeout,
            holdout,
            holdout_digest,
            $($middle,)*
            verify_failures,
            replies_behind,
            same_failures,
            failure_fingerprint,
            lowest_failures,
            stalled_checks,
            failure_trend,
            cost_usd,
            goal_stops,
            largest_reply_cost_usd,
            $($after,)*
        );
    };
}
pub(crate) use with_guard_fields;

impl Guards {
    /// The guards' settings as a loop file writes them; errors name the field.
    pub fn read(raw: &impl FieldSource) -> Result<Self, StateError> {
        let field = |name| raw.get(name);
        let limit = |name| Limit::read(name, field(name), MAX_COUNT);
        let verify = non_empty(field("verify").map(str::to_owned));
        let check = non_empty(field("check").map(str::to_owned));
        let default_if = |on: bool, n| Limit::new(if on { n } else { 0 });
        Ok(Self {
            max_duration_secs: max_duration(raw)?,
            max_tokens: max_tokens(raw)?,
            verify_timeout_secs: duration("verify_timeout", field("verify_timeout"))?
                .unwrap_or(DEFAULT_VERIFY_TIMEOUT)
                .clamp(1, MAX_VERIFY_TIMEOUT),
            stuck_after: limit("stuck_after")?.unwrap_or(Limit::new(DEFAULT_STUCK_AFTER)),
            no_progress_after: limit("no_progress_after")?
                .unwrap_or(Limit::new(DEFAULT_NO_PROGRESS_AFTER)),
            max_verify_failures: limit("max_verify_failures")?
                .unwrap_or(Limit::new(DEFAULT_MAX_VERIFY_FAILURES)),
            max_same_failure: limit("max_same_failure")?.unwrap_or(default_if(
                check.is_some() || verify.is_some(),
                DEFAULT_MAX_SAME_FAILURE,
            )),
            stall_after: limit("stall_after")?
                .unwrap_or(default_if(check.is_some(), DEFAULT_STALL_AFTER)),
            check_timeout_secs: duration("check_timeout", field("check_timeout"))?
                .unwrap_or(DEFAULT_CHECK_TIMEOUT)
                .clamp(1, MAX_VERIFY_TIMEOUT),
            verify,
            check,
            max_cost_usd: max_cost(raw)?,
            max_window_pct: limit("max_window")?
                .and_then(Limit::get)
                .map(|p| p.min(100)),
            gate_sandbox_off: choice(raw, "gate_sandbox", ["auto", "off"])? == "off",
            gate_network_open: choice(raw, "gate_network", ["none", "open"])? == "open",
            gate_setup: non_empty(field("gate_setup").map(str::to_owned)),
            gate_setup_timeout_secs: duration("gate_setup_timeout", field("gate_setup_timeout"))?
                .unwrap_or(DEFAULT_GATE_SETUP_TIMEOUT)
                .clamp(1, MAX_VERIFY_TIMEOUT),
            holdout: non_empty(field("holdout").map(str::to_owned)),
            holdout_digest: non_empty(field("holdout_digest").map(str::to_owned)),
        })
    }
}

/// A field that takes one of two words, the first its default; errors name
/// the field and the words.
fn choice(
    raw: &impl FieldSource,
    field: &'static str,
    words: [&'static str; 2],
) -> Result<&'static str, StateError> {
    match raw.get(field).map(str::trim) {
        None | Some("") => Ok(words[0]),
        Some(v) => words
            .into_iter()
            .find(|w| *w == v)
            .ok_or_else(|| StateError::Field {
                field,
                value: ralph_fs::display::line(v).into_owned(),
                expected: if field == "gate_sandbox" {
                    "expected `auto` or `off`"
                } else {
                    "expected `none` or `open`"
                },
            }),
    }
}

/// The time budget (`max_duration`), in seconds.
fn max_duration(raw: &impl FieldSource) -> Result<Option<u64>, StateError> {
    duration("max_duration", raw.get("max_duration"))
}

/// The token budget (`max_tokens`); 0 is none.
fn max_tokens(raw: &impl FieldSource) -> Result<Option<u64>, StateError> {
    Ok(Limit::read("max_tokens", raw.get("max_tokens"), MAX_TOKENS)?.and_then(Limit::get))
}

/// The dollar budget (`max_cost`); 0 is none.
fn max_cost(raw: &impl FieldSource) -> Result<Option<Money>, StateError> {
    Ok(money("max_cost", raw.get("max_cost"))?.filter(|m| m.0 > 0))
}

/// What the guards count from stop to stop, kept in the loop file beside
/// the loop's own progress; `ralph status --json` shows each one.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct GuardCounts {
    /// Verification gates failed so far (see `Guards::max_verify_failures`).
    pub verify_failures: u64,
    /// The token budget's: replies the transcript lacked at the last stop
    /// (it can lag the Stop event by several when turns come fast); each is
    /// estimated at the largest message seen.
    pub replies_behind: u64,
    /// Failures in a row with the same fingerprint (check or gate).
    pub same_failures: u64,
    /// The fingerprint of the last failure (`failure::failure_fingerprint`).
    pub failure_fingerprint: Option<String>,
    /// The lowest failure count the check reported so far.
    pub lowest_failures: Option<u64>,
    /// Checks in a row whose count did not go below `lowest_failures`.
    pub stalled_checks: u64,
    /// The last failure counts, oldest first, space-separated (`12 9 7 7`).
    pub failure_trend: Option<String>,
    /// The dollar budget's: what the loop spent so far (the agent's own
    /// figure in `ralph run`; the transcript's tokens priced in the hook).
    pub cost_usd: Money,
    /// Stops let through in a row because `/goal` drives the session (its
    /// own Stop hook continues the turn): 0 when no goal is set.
    pub goal_stops: u64,
    /// The dollar budget's estimate for a reply the transcript lacks: the
    /// dearest single message priced so far.
    pub largest_reply_cost_usd: Money,
}

/// The loop-file fields of [`GuardCounts`]: counters ralph rewrites from
/// stop to stop, never settings the user chose (so never bound to the
/// arming). A test checks this list against the struct.
pub(crate) const COUNTER_FIELDS: &[&str] = &[
    "verify_failures",
    "replies_behind",
    "same_failures",
    "failure_fingerprint",
    "lowest_failures",
    "stalled_checks",
    "failure_trend",
    "cost_usd",
    "goal_stops",
    "largest_reply_cost_usd",
];

impl GuardCounts {
    /// The counts as a loop file writes them; errors name the field.
    pub fn read(raw: &impl FieldSource) -> Result<Self, StateError> {
        let count = |name| number(name, raw.get(name), MAX_COUNT);
        Ok(Self {
            verify_failures: count("verify_failures")?.unwrap_or(0),
            replies_behind: count("replies_behind")?.unwrap_or(0),
            same_failures: count("same_failures")?.unwrap_or(0),
            failure_fingerprint: non_empty(raw.get("failure_fingerprint").map(str::to_owned)),
            lowest_failures: count("lowest_failures")?,
            stalled_checks: count("stalled_checks")?.unwrap_or(0),
            failure_trend: non_empty(raw.get("failure_trend").map(str::to_owned)),
            cost_usd: money("cost_usd", raw.get("cost_usd"))?.unwrap_or_default(),
            goal_stops: count("goal_stops")?.unwrap_or(0),
            largest_reply_cost_usd: money(
                "largest_reply_cost_usd",
                raw.get("largest_reply_cost_usd"),
            )?
            .unwrap_or_default(),
        })
    }

    /// The counts that changed since `old`, as frontmatter values.
    pub fn changed_fields(&self, old: &Self) -> Vec<(&'static str, String)> {
        let mut fields = Vec::new();
        if self.verify_failures != old.verify_failures {
            fields.push(("verify_failures", self.verify_failures.to_string()));
        }
        if self.replies_behind != old.replies_behind {
            fields.push(("replies_behind", self.replies_behind.to_string()));
        }
        if self.same_failures != old.same_failures {
            fields.push(("same_failures", self.same_failures.to_string()));
        }
        if self.stalled_checks != old.stalled_checks {
            fields.push(("stalled_checks", self.stalled_checks.to_string()));
        }
        if self.lowest_failures != old.lowest_failures {
            let value = self.lowest_failures.map(|n| n.to_string());
            fields.push(("lowest_failures", value.unwrap_or_else(|| quote(""))));
        }
        for (name, new, was) in [
            (
                "failure_fingerprint",
                &self.failure_fingerprint,
                &old.failure_fingerprint,
            ),
            ("failure_trend", &self.failure_trend, &old.failure_trend),
        ] {
            if new != was {
                fields.push((name, quote(new.as_deref().unwrap_or(""))));
            }
        }
        if self.cost_usd != old.cost_usd {
            fields.push(("cost_usd", self.cost_usd.decimal()));
        }
        if self.largest_reply_cost_usd != old.largest_reply_cost_usd {
            fields.push((
                "largest_reply_cost_usd",
                self.largest_reply_cost_usd.decimal(),
            ));
        }
        if self.goal_stops != old.goal_stops {
            fields.push(("goal_stops", self.goal_stops.to_string()));
        }
        fields
    }

    /// The counts an ending loop's record keeps: what it spent.
    pub fn ending_fields(&self, cost_usd: Option<Money>) -> Vec<(&'static str, String)> {
        let mut ended = self.clone();
        if let Some(cost) = cost_usd {
            ended.cost_usd = cost;
        }
        ended.changed_fields(self)
    }
}

/// A dollar amount from the loop file (`max_cost: 2.5`, `cost_usd: 0.12`),
/// read exactly; errors name the field.
fn money(field: &'static str, value: Option<&str>) -> Result<Option<Money>, StateError> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => Money::parse(v).map(Some).map_err(|_| StateError::Field {
            field,
            value: v.to_owned(),
            expected: "expected a dollar amount such as `5` or `2.50` (at most 6 decimals, at most 1000000000)",
        }),
    }
}

/// How a guard ends a loop: the word in its `outcome:` field and the
/// headline of the notice (see `Outcome::Guard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tripped {
    TimeBudget,
    TokenBudget,
    Stuck,
    NoProgress,
    /// The verification gate failed `max_verify_failures` times.
    VerifyFailures,
    /// The check or the gate failed the same way `max_same_failure` times in a row.
    SameFailure,
    /// The check's failure count did not reach a new low for `stall_after` checks.
    Stalled,
    /// The loop spent its `max_cost`.
    CostBudget,
}

impl Tripped {
    pub const ALL: [Self; 8] = [
        Self::TimeBudget,
        Self::TokenBudget,
        Self::Stuck,
        Self::NoProgress,
        Self::VerifyFailures,
        Self::SameFailure,
        Self::Stalled,
        Self::CostBudget,
    ];

    /// The word stored in the `outcome:` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TimeBudget => "time_budget",
            Self::TokenBudget => "token_budget",
            Self::Stuck => "stuck",
            Self::NoProgress => "no_progress",
            Self::VerifyFailures => "verify_failures",
            Self::SameFailure => "same_failure",
            Self::Stalled => "stalled",
            Self::CostBudget => "cost_budget",
        }
    }

    /// The icon and the words of the notice.
    pub fn headline(self) -> (&'static str, &'static str) {
        match self {
            Self::TimeBudget | Self::TokenBudget | Self::CostBudget => {
                ("⏹", "stopped: budget reached")
            }
            Self::Stuck => ("⚠", "stopped: stuck"),
            Self::NoProgress => ("⚠", "stopped: no progress"),
            Self::VerifyFailures => ("⚠", "stopped: the promise kept being refused"),
            Self::SameFailure => ("⚠", "stopped: the same failure again and again"),
            Self::Stalled => ("⚠", "stopped: the failure count stopped falling"),
        }
    }
}

/// One guard's option: its `--flag`, its field in the loop file, the kind
/// of value, and the default as the README shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardOption {
    pub flag: &'static str,
    pub field: &'static str,
    pub kind: OptionKind,
    pub default: &'static str,
    /// The value's name in `--help` (`--max-tokens <MAX_TOKENS>`).
    pub value_name: &'static str,
    /// The line `ralph start --help` shows.
    pub help: &'static str,
    /// The option with a sample value, and what it does in full: the
    /// guard's entry in the "Guards" part of `ralph start --help`.
    pub example: &'static str,
    pub explains: &'static str,
}

/// Every guard's option.
pub const OPTIONS: &[GuardOption] = &[
    GuardOption {
        flag: "max-duration",
        field: "max_duration",
        kind: OptionKind::Duration,
        default: "none",
        value_name: "MAX_DURATION",
        help: "Time budget from the loop's start, e.g. 90m, 2h, 1h30m",
        example: "--max-duration 90m",
        explains: "end the loop (as time_budget) once it has run this long; the agent is told to wrap up at 80 %",
    },
    GuardOption {
        flag: "max-tokens",
        field: "max_tokens",
        kind: OptionKind::Number,
        default: "none",
        value_name: "MAX_TOKENS",
        help: "Token budget for the loop's assistant turns",
        example: "--max-tokens 2000000",
        explains: "end it (as token_budget) once the session's assistant turns since the loop began used this many tokens (input + cache creation + output; cache reads are not counted); warning at 80 %",
    },
    GuardOption {
        flag: "verify",
        field: "verify",
        kind: OptionKind::Text,
        default: "none",
        value_name: "VERIFY",
        help: "A command that must pass (exit 0) before the loop completes",
        example: "--verify 'cargo test'",
        explains: "run this command from the project root when the promise comes (without a completion promise: at each turn end that changed the work tree or HEAD); only exit 0 completes the loop, otherwise the agent sees the exit code and the output's tail",
    },
    GuardOption {
        flag: "verify-timeout",
        field: "verify_timeout",
        kind: OptionKind::Duration,
        default: "5m",
        value_name: "VERIFY_TIMEOUT",
        help: "Time limit of the --verify command, e.g. 5m (at most 14m)",
        example: "--verify-timeout 10m",
        explains: "the --verify command's time limit (default 5m, at most 14m); a command still running then is stopped with everything it started, and the promise is refused",
    },
    GuardOption {
        flag: "max-verify-failures",
        field: "max_verify_failures",
        kind: OptionKind::Number,
        default: "0",
        value_name: "MAX_VERIFY_FAILURES",
        help: "Failed --verify gates that end the loop (0: off) [default: 0]",
        example: "--max-verify-failures 3",
        explains: "end it (as verify_failures) once the --verify gate failed 3 times (0: off, the default)",
    },
    GuardOption {
        flag: "check",
        field: "check",
        kind: OptionKind::Text,
        default: "none",
        value_name: "CHECK",
        help: "A fast command (type check, lint, unit tests) run at every stop where the loop goes on",
        example: "--check 'cargo check'",
        explains: "at every stop where the loop would go on, run this command from the project root; the agent reads whether it passed, and if not its exit code and the output's last 40 lines",
    },
    GuardOption {
        flag: "check-timeout",
        field: "check_timeout",
        kind: OptionKind::Duration,
        default: "2m",
        value_name: "CHECK_TIMEOUT",
        help: "Time limit of the --check command, e.g. 2m (at most 14m)",
        example: "--check-timeout 1m",
        explains: "the --check command's time limit (default 2m, at most 14m); a check still running then is stopped with everything it started, and the agent is told it timed out",
    },
    GuardOption {
        flag: "max-same-failure",
        field: "max_same_failure",
        kind: OptionKind::Number,
        default: "3 with --check or --verify, else 0",
        value_name: "MAX_SAME_FAILURE",
        help: "Identical failures in a row of the check or the gate that end the loop (0: off) [default: 3 with --check or --verify]",
        example: "--max-same-failure 3",
        explains: "end it (as same_failure) when the check, or the gate refusing the promise, failed the same way 3 times in a row (numbers, durations, hex ids and temporary paths do not count as a difference; 0: off)",
    },
    GuardOption {
        flag: "stall-after",
        field: "stall_after",
        kind: OptionKind::Number,
        default: "5 with --check, else 0",
        value_name: "STALL_AFTER",
        help: "Checks in a row whose failure count reached no new low that end the loop (0: off) [default: 5 with --check]",
        example: "--stall-after 5",
        explains: "end it (as stalled) when the check's failure count (cargo test, pytest, go test, jest, vitest, TAP) has not gone below its lowest so far for 5 checks in a row (0: off)",
    },
    GuardOption {
        flag: "stuck-after",
        field: "stuck_after",
        kind: OptionKind::Number,
        default: "3",
        value_name: "STUCK_AFTER",
        help: "Identical replies in a row that end the loop as stuck (0: off) [default: 3]",
        example: "--stuck-after 3",
        explains: "end it (as stuck) when the same reply comes 3 times in a row (0: off)",
    },
    GuardOption {
        flag: "no-progress-after",
        field: "no_progress_after",
        kind: OptionKind::Number,
        default: "5",
        value_name: "NO_PROGRESS_AFTER",
        help: "Iterations with no change to the git tree or HEAD that end the loop (0: off) [default: 5]",
        example: "--no-progress-after 5",
        explains: "end it (as no_progress) after 5 iterations with no change to the git working tree or HEAD (git projects only; 0: off)",
    },
    GuardOption {
        flag: "max-cost",
        field: "max_cost",
        kind: OptionKind::Money,
        default: "none",
        value_name: "USD",
        help: "Dollar budget for the loop, e.g. 5 or 2.50",
        example: "--max-cost 2.50",
        explains: "end it (as cost_budget) once the loop spent this many US dollars: in `ralph run` the agent's own reported cost (`claude -p` is also given what is left as --max-budget-usd), in a session the transcript's tokens priced per model (docs/cost.md); warning at 80 %",
    },
    GuardOption {
        flag: "max-window",
        field: "max_window",
        kind: OptionKind::Number,
        default: "none",
        value_name: "PCT",
        help: "Pause the in-session loop when the plan's 5-hour window reaches PCT % (needs `ralph statusline`)",
        example: "--max-window 80",
        explains: "pause the loop (in a session, not in `ralph run`) once the plan's 5-hour usage window is 80 % used, as `ralph statusline` last saw it; /ralph-resume goes on; refused when the status line has seen no window yet",
    },
    GuardOption {
        flag: "gate-sandbox",
        field: "gate_sandbox",
        kind: OptionKind::Text,
        default: "auto",
        value_name: "auto|off",
        help: "Run the gate (--verify, --check, story checks) in its own sandbox where bubblewrap works (auto), or never (off) [default: auto]",
        example: "--gate-sandbox off",
        explains: "run the gate commands unconfined, as the user, with your HOME, network and /tmp (by default, on Linux with bubblewrap, they run with an empty HOME, no network, their own process tree and write only the folder they run in (the snapshot); always so under `ralph run --sandbox`, which refuses off)",
    },
    GuardOption {
        flag: "gate-network",
        field: "gate_network",
        kind: OptionKind::Text,
        default: "none",
        value_name: "none|open",
        help: "The sandboxed gate's network: none (its own loopback only) or open (the host's network) [default: none]",
        example: "--gate-network open",
        explains: "give the sandboxed gate the host's network (and so the host's loopback and abstract sockets), for tests that download or reach a service; by default it has only a loopback of its own",
    },
    GuardOption {
        flag: "gate-setup",
        field: "gate_setup",
        kind: OptionKind::Text,
        default: "none",
        value_name: "GATE_SETUP",
        help: "A step run in the gate's snapshot before --verify, --check or a story's verify (e.g. 'uv sync --frozen', 'npm ci')",
        example: "--gate-setup 'uv sync --frozen'",
        explains: "in a git project the gates run in a snapshot of the work tree outside the project (no ignored file of the project reaches them); this step makes their environment there, run before a gate whenever the snapshot changed since it last passed; its failure refuses the gate like a failing gate",
    },
    GuardOption {
        flag: "gate-setup-timeout",
        field: "gate_setup_timeout",
        kind: OptionKind::Duration,
        default: "5m",
        value_name: "GATE_SETUP_TIMEOUT",
        help: "Time limit of the --gate-setup step, e.g. 5m (at most 14m)",
        example: "--gate-setup-timeout 10m",
        explains: "the --gate-setup step's time limit (default 5m, at most 14m); a step still running then is stopped with everything it started, and the gate is refused",
    },
    GuardOption {
        flag: "holdout",
        field: "holdout",
        kind: OptionKind::Text,
        default: "none",
        value_name: "DIR",
        help: "A folder outside the project whose files are added to the gate's snapshot only (held-out checks the agent never sees)",
        example: "--holdout ~/acceptance/parser",
        explains: "copy the files of this folder (outside the project; its SHA-256 recorded at arming, a changed set refused) into the gate's snapshot, merged at the project root, for --verify, --check and story commands; the agent's project never holds them",
    },
];

impl Guards {
    /// The guards in words, as `ralph start` announces them and `ralph
    /// status` shows them: `time budget 2h00m`, `verify `cargo test` …`.
    /// `abort` is the loop's abort promise, listed among them.
    pub fn summary(&self, abort: Option<&str>) -> Vec<String> {
        let line = ralph_fs::display::line;
        let mut out = Vec::new();
        if let Some(d) = self.max_duration_secs {
            out.push(format!("time budget {}", format_duration(d)));
        }
        if let Some(t) = self.max_tokens {
            out.push(format!("token budget {t}"));
        }
        if let Some(m) = self.max_cost_usd {
            out.push(format!("dollar budget {}", m.dollars()));
        }
        if let Some(p) = self.max_window_pct {
            out.push(format!("pauses at {p} % of the 5-hour window"));
        }
        if let Some(v) = &self.verify {
            out.push(format!(
                "verify `{}` (limit {})",
                line(v),
                format_duration(self.verify_timeout_secs)
            ));
            if let Some(n) = self.max_verify_failures.get() {
                out.push(format!(
                    "ends after {}",
                    crate::plural::count(n, "failed check", "failed checks")
                ));
            }
        }
        if let Some(c) = &self.check {
            out.push(format!(
                "check `{}` (limit {})",
                line(c),
                format_duration(self.check_timeout_secs)
            ));
        }
        if let Some(n) = self.max_same_failure.get()
            && (self.check.is_some() || self.verify.is_some())
        {
            out.push(format!(
                "ends after {}",
                crate::plural::count(n, "identical failure", "identical failures")
            ));
        }
        if let Some(n) = self.stall_after.get().filter(|_| self.check.is_some()) {
            out.push(format!(
                "stalled after {} without fewer failures",
                crate::plural::count(n, "check", "checks")
            ));
        }
        if let Some(s) = &self.gate_setup {
            out.push(format!(
                "gate setup `{}` (limit {})",
                line(s),
                format_duration(self.gate_setup_timeout_secs)
            ));
        }
        if let Some(h) = &self.holdout {
            out.push(format!("held-out checks from {}", line(h)));
        }
        if let Some(a) = abort {
            out.push(format!("abort promise {}", line(a)));
        }
        out.push(match self.stuck_after.get() {
            Some(n) => format!(
                "stuck after {}",
                crate::plural::count(n, "identical reply", "identical replies")
            ),
            None => "stuck breaker off".into(),
        });
        out.push(match self.no_progress_after.get() {
            Some(n) => format!(
                "no-progress after {}",
                crate::plural::count(n, "unchanged iteration", "unchanged iterations")
            ),
            None => "no-progress breaker off".into(),
        });
        out
    }
}

/// A failure trend as read from the loop file (`12 9 7`), as `12 → 9 → 7`;
/// anything but numbers is left out, so a hand-edited field prints nothing odd.
pub fn trend_words(trend: &str) -> String {
    trend
        .split_whitespace()
        .filter(|w| w.bytes().all(|b| b.is_ascii_digit()) && w.len() <= 20)
        .collect::<Vec<_>>()
        .join(" → ")
}

/// The guards asked for when arming, as option values already checked for
/// their kind (a whole number, a duration with a unit), in the table's
/// order. `ralph start`, the slash command and `ralph plan` fill it; the new
/// loop file is written from it; nothing names a guard one by one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardSettings {
    values: Vec<(&'static GuardOption, String)>,
}

impl GuardSettings {
    /// The guard whose option is `--flag`.
    pub fn option(flag: &str) -> Option<&'static GuardOption> {
        OPTIONS.iter().find(|g| g.flag == flag)
    }

    /// Sets a guard from its option's text, with the checks clap applies.
    pub fn set(&mut self, option: &'static GuardOption, value: &str) -> Result<(), ArgumentsError> {
        let value = match option.kind {
            OptionKind::Number => check_number(option.flag, value)?.to_string(),
            OptionKind::Duration => check_duration(option.flag, value)?,
            OptionKind::Money => check_money(option.flag, value)?,
            OptionKind::Text | OptionKind::Flag | OptionKind::OptionalValue => value.to_owned(),
        };
        self.put(option, value);
        Ok(())
    }

    /// Sets a guard to a value already checked, in the table's order.
    fn put(&mut self, option: &'static GuardOption, value: String) {
        self.values.retain(|(g, _)| g.flag != option.flag);
        self.values.push((option, value));
        self.values
            .sort_by_key(|(g, _)| OPTIONS.iter().position(|o| o.flag == g.flag));
    }

    /// The `--verify` gate's command, unless none or a blank one was given.
    pub fn verify(&self) -> Option<&str> {
        self.get("verify").filter(|v| !v.trim().is_empty())
    }

    /// Runs `first` in the `--verify` gate before the command given (if
    /// any): a fleet's story has its own check refused in its loop.
    pub fn verify_first(&mut self, first: &str) {
        let gate = match self.verify() {
            Some(then) => format!("( {first}\n) && ( {then}\n)"),
            None => first.to_owned(),
        };
        if let Some(option) = Self::option("verify") {
            self.put(option, gate);
        }
    }

    /// The value given for `--flag`, as given.
    pub fn get(&self, flag: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(g, _)| g.flag == flag)
            .map(|(_, v)| v.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Whether a budget ends the loop: `--max-duration`, `--max-tokens` or
    /// `--max-cost`, each read as the loop file reads it (so set and not
    /// zero). One too large to read counts as set: the new loop then does
    /// not read back, and that error names it. (`--verify` only checks a
    /// promise and `--max-window` pauses: neither ends a loop that has no
    /// other end.)
    pub fn has_budget(&self) -> bool {
        let set = |read: Result<bool, StateError>| read.unwrap_or(true);
        set(max_duration(self).map(|d| d.is_some()))
            || set(max_tokens(self).map(|t| t.is_some()))
            || set(max_cost(self).map(|c| c.is_some()))
    }

    /// The guards these settings arm, read as a loop file's are (defaults
    /// and caps included): what a fleet's own gate runs with, so it never
    /// reads a flag's text back with limits of its own.
    pub fn guards(&self) -> Result<Guards, StateError> {
        Guards::read(self)
    }

    /// The settings as command-line words (`--stuck-after 2 …`), to arm
    /// the same guards in another process.
    pub fn args(&self) -> Vec<String> {
        self.values
            .iter()
            .flat_map(|(g, v)| [format!("--{}", g.flag), v.clone()])
            .collect()
    }

    /// The loop-file fields and their YAML values. A blank text
    /// (`--verify ''`) sets nothing.
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        self.values.iter().filter_map(|(g, v)| match g.kind {
            OptionKind::Number | OptionKind::Money => Some((g.field, v.clone())),
            _ if v.trim().is_empty() && g.kind == OptionKind::Text => None,
            _ => Some((g.field, quote(v))),
        })
    }
}

/// The settings seen as a loop file's fields, by field name.
impl FieldSource for GuardSettings {
    fn get(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(g, _)| g.field == name)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_read_as_guards_with_the_defaults_and_caps_of_a_loop_file() {
        let none = GuardSettings::default().guards().unwrap();
        assert_eq!(none.verify_timeout_secs, DEFAULT_VERIFY_TIMEOUT);
        let mut long = GuardSettings::default();
        long.set(GuardSettings::option("verify-timeout").unwrap(), "20m")
            .unwrap();
        long.set(GuardSettings::option("verify").unwrap(), "make test")
            .unwrap();
        let guards = long.guards().unwrap();
        assert_eq!(
            guards.verify_timeout_secs, MAX_VERIFY_TIMEOUT,
            "held at 14m"
        );
        assert_eq!(guards.verify.as_deref(), Some("make test"));
    }

    #[test]
    fn a_check_set_first_runs_before_the_gate_given_if_any() {
        let opt = |f| GuardSettings::option(f).unwrap();
        let mut s = GuardSettings::default();
        s.verify_first("make check");
        assert_eq!(s.verify(), Some("make check"));
        let mut s = GuardSettings::default();
        s.set(opt("verify"), " ").unwrap();
        assert_eq!(s.verify(), None, "a blank gate is none");
        s.verify_first("make check");
        assert_eq!(s.get("verify"), Some("make check"));
        s.set(opt("verify"), "cargo test").unwrap();
        s.set(opt("max-duration"), "2h").unwrap();
        s.verify_first("make check");
        assert_eq!(
            s.args(),
            [
                "--max-duration",
                "2h",
                "--verify",
                "( make check\n) && ( cargo test\n)"
            ]
        );
    }

    #[test]
    fn a_budget_is_one_set_and_not_zero_as_the_loop_file_reads_it() {
        let with = |flag, value| {
            let mut s = GuardSettings::default();
            s.set(GuardSettings::option(flag).unwrap(), value).unwrap();
            s.has_budget()
        };
        assert!(!GuardSettings::default().has_budget());
        for (flag, value, budget) in [
            ("max-tokens", "0", false),
            ("max-tokens", "000", false),
            ("max-tokens", "5", true),
            // Past what a loop file holds: set (the new loop refuses it).
            ("max-tokens", "99999999999999999", true),
            ("max-cost", "0", false),
            ("max-cost", "$0.00", false),
            ("max-cost", "0.01", true),
            ("max-duration", "0m", true),
            ("max-duration", "2h", true),
            ("max-window", "80", false),
            ("verify", "make test", false),
            ("stuck-after", "3", false),
        ] {
            assert_eq!(with(flag, value), budget, "--{flag} {value}");
        }
    }

    /// Each way a guard ends a loop is told in `ralph start --help`, by
    /// the word `ralph status` will show.
    #[test]
    fn every_guard_outcome_is_named_in_some_guards_help() {
        for tripped in Tripped::ALL {
            let named = format!("(as {})", tripped.as_str());
            assert!(
                OPTIONS.iter().any(|g| g.explains.contains(&named)),
                "no guard's help says {named}"
            );
        }
    }

    #[test]
    fn the_counter_fields_are_the_counts_fields() {
        let counts = serde_json::to_value(GuardCounts::default()).unwrap();
        let mut keys: Vec<&str> = counts
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut listed = COUNTER_FIELDS.to_vec();
        keys.sort_unstable();
        listed.sort_unstable();
        assert_eq!(keys, listed);
        for field in COUNTER_FIELDS {
            assert!(
                crate::fields::state::KNOWN_FIELDS.contains(field),
                "{field}"
            );
        }
    }

    #[test]
    fn settings_are_checked_kept_in_table_order_and_written_as_fields() {
        let mut s = GuardSettings::default();
        let opt = |f| GuardSettings::option(f).unwrap();
        s.set(opt("stuck-after"), " 07").unwrap();
        s.set(opt("verify"), "cargo test").unwrap();
        s.set(opt("max-duration"), "2h").unwrap();
        assert!(s.set(opt("max-tokens"), "-1").is_err());
        assert!(s.set(opt("verify-timeout"), "5").is_err());
        let fields: Vec<_> = s.fields().collect();
        assert_eq!(
            fields,
            [
                ("max_duration", "\"2h\"".to_owned()),
                ("verify", "\"cargo test\"".to_owned()),
                ("stuck_after", "7".to_owned()),
            ]
        );
        assert_eq!(
            s.args(),
            [
                "--max-duration",
                "2h",
                "--verify",
                "cargo test",
                "--stuck-after",
                "7"
            ]
        );
        s.set(opt("verify"), " ").unwrap();
        assert_eq!(s.get("verify"), Some(" "));
        assert_eq!(s.fields().count(), 2, "a blank --verify sets nothing");
    }

    #[test]
    fn the_defaults_shown_are_the_defaults_read() {
        let s = crate::fields::state::LoopState::parse("---\nverify: x\n---\nTask\n").unwrap();
        let shown = |flag: &str| OPTIONS.iter().find(|g| g.flag == flag).unwrap().default;
        assert_eq!(
            shown("stuck-after"),
            s.guards.stuck_after.count().to_string()
        );
        assert_eq!(
            shown("no-progress-after"),
            s.guards.no_progress_after.count().to_string()
        );
        assert_eq!(
            shown("max-verify-failures"),
            s.guards.max_verify_failures.count().to_string()
        );
        assert_eq!(
            shown("verify-timeout"),
            format!("{}m", s.guards.verify_timeout_secs / 60)
        );
        assert_eq!(s.guards.max_duration_secs, None);
        assert_eq!(s.guards.max_tokens, None);
    }
}
