//! `ralph resume --add-iterations K --add-cost USD --add-time D
//! --add-tokens N` (and `/ralph-resume` with the same options): a loop that
//! ended at its iteration limit or a budget is armed again, its count,
//! spend and log kept and each bound raised by what was added; a live loop
//! of this user's gets its bounds raised (and is resumed when paused). The
//! arming record binds the new bounds as it bound the old.
//!
//! Only a loop this user armed comes back: a history record is revived
//! when the registry kept the record of its arming (`Registry::armed_before`:
//! nonce and digest), which a planted record has not, and once per ending.

use crate::commands::CommandError;
use ralph_state::fields::frontmatter::quote;
use ralph_state::fields::guards::Tripped;
use ralph_state::fields::outcome::{Outcome, RecordedOutcome};
use ralph_state::fields::state::LoopState;
use ralph_state::lifecycle::{LogEntry, Logged, Loop};
use ralph_state::money::Money;
use ralph_state::scan::{LoopEntry, Scan};
use ralph_state::storage::registry::{self, Registry};
use ralph_state::storage::store::{LoopFile, Project, ProjectLock};
use ralph_state::time::Timestamp;

/// What `--add-*` adds to each bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Raise {
    pub iterations: Option<u64>,
    pub cost: Option<Money>,
    pub time_secs: Option<u64>,
    pub tokens: Option<u64>,
}

impl Raise {
    pub fn any(&self) -> bool {
        *self != Self::default()
    }

    /// Reads `--add-iterations K` (or `--add-iterations=K`) and its kin
    /// from a slash command's words; the words left are returned (the
    /// loop's selection).
    pub fn take_from(raw: &str) -> Result<(Self, String), String> {
        let mut raise = Self::default();
        let mut rest = Vec::new();
        let mut words = raw.split_whitespace();
        while let Some(word) = words.next() {
            let (flag, inline) = match word.split_once('=') {
                Some((f, v)) => (f, Some(v.to_owned())),
                None => (word, None),
            };
            if !flag.starts_with("--add-") {
                rest.push(word);
                continue;
            }
            let value = inline
                .or_else(|| words.next().map(str::to_owned))
                .ok_or_else(|| format!("`{flag}` needs a value"))?;
            raise.set(flag, &value)?;
        }
        Ok((raise, rest.join(" ")))
    }

    /// One option, checked as clap checks it.
    pub fn set(&mut self, flag: &str, value: &str) -> Result<(), String> {
        let count = || {
            value
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("`{flag} {value}`: expected a whole number above 0"))
        };
        match flag {
            "--add-iterations" => self.iterations = Some(count()?),
            "--add-tokens" => self.tokens = Some(count()?),
            "--add-cost" => {
                self.cost = Some(Money::parse(value).ok().filter(|m| m.0 > 0).ok_or_else(
                    || format!("`{flag} {value}`: expected dollars such as `5` or `2.50`"),
                )?);
            }
            "--add-time" => {
                self.time_secs = Some(
                    ralph_state::time::parse_duration(value)
                        .filter(|s| *s > 0)
                        .ok_or_else(|| {
                            format!("`{flag} {value}`: expected a duration such as `30m` or `2h`")
                        })?,
                );
            }
            _ => {
                return Err(format!(
                    "`{flag}` is not an option of resume: use --add-iterations, --add-cost, --add-time or --add-tokens"
                ));
            }
        }
        Ok(())
    }

    /// The options given for bounds the loop does not have (nothing to raise):
    /// `--add-cost` on a loop with no dollar budget, say.
    fn missing(&self, state: &LoopState) -> Vec<&'static str> {
        let guards = &state.guards;
        [
            (
                "--add-iterations",
                self.iterations.is_some() && !state.max_iterations.is_set(),
            ),
            (
                "--add-tokens",
                self.tokens.is_some() && guards.max_tokens.is_none(),
            ),
            (
                "--add-cost",
                self.cost.is_some() && guards.max_cost_usd.is_none(),
            ),
            (
                "--add-time",
                self.time_secs.is_some() && guards.max_duration_secs.is_none(),
            ),
        ]
        .into_iter()
        .filter_map(|(flag, missing)| missing.then_some(flag))
        .collect()
    }

    /// The new bounds, as fields, and the words that say what changed.
    fn fields(&self, state: &LoopState) -> (Vec<(&'static str, String)>, Vec<String>) {
        let mut fields = Vec::new();
        let mut words = Vec::new();
        if let (Some(k), Some(was)) = (self.iterations, state.max_iterations.get()) {
            let now = was.saturating_add(k);
            fields.push(("max_iterations", now.to_string()));
            words.push(format!("iterations {was} → {now}"));
        }
        let guards = &state.guards;
        if let (Some(add), Some(was)) = (self.tokens, guards.max_tokens) {
            let now = was
                .saturating_add(add)
                .min(ralph_state::fields::state::MAX_TOKENS);
            fields.push(("max_tokens", now.to_string()));
            words.push(format!("tokens {was} → {now}"));
        }
        if let (Some(add), Some(was)) = (self.cost, guards.max_cost_usd) {
            let now = Money(
                was.0
                    .saturating_add(add.0)
                    .min(ralph_state::money::MAX_MONEY.0),
            );
            fields.push(("max_cost", now.decimal()));
            words.push(format!("dollars {} → {}", was.dollars(), now.dollars()));
        }
        if let (Some(add), Some(was)) = (self.time_secs, guards.max_duration_secs) {
            let now = was.saturating_add(add);
            fields.push((
                "max_duration",
                quote(&ralph_state::time::format_duration(now)),
            ));
            words.push(format!(
                "time {} → {}",
                ralph_state::time::format_duration(was),
                ralph_state::time::format_duration(now)
            ));
        }
        (fields, words)
    }
}

/// What a revival did: the loop, its iteration, and what was raised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revived {
    pub name: String,
    pub iteration: u64,
    pub raised: Vec<String>,
    /// It came back from the history (else it was live).
    pub from_history: bool,
    /// `ralph run` drove it: nothing runs it until `ralph run --name` does.
    pub by_run: bool,
    /// The note that tells the session at its next continuation was kept.
    pub told: bool,
}

/// The text `ralph resume --add-*` prints.
pub fn revived_text(done: &Revived) -> String {
    let name = ralph_fs::display::line(&done.name);
    let how = if done.from_history {
        "is armed again"
    } else {
        "goes on"
    };
    let drive = if done.by_run {
        format!(" `ralph run --name {name}` drives it again.")
    } else {
        String::new()
    };
    let tell = if done.told {
        " The agent is told at its next continuation."
    } else {
        " ralph could not keep the note that tells the agent: tell it yourself."
    };
    format!(
        "▶ Loop `{name}` {how} at iteration {}, its count, spend and log kept: {}.{drive}{tell}",
        done.iteration,
        done.raised.join(", ")
    )
}

/// Raises the bounds of loop `name` (this session's, or the only one, or
/// the last ended) by `raise`, arming it again if it ended at a limit or a
/// budget. `session`: the session that asks (`/ralph-resume`), which then
/// drives it; else it stays with the owner it had.
pub fn revive(
    project: &Project,
    registry: &Registry,
    name: Option<&str>,
    session: Option<&str>,
    raise: &Raise,
    now: Timestamp,
) -> Result<Revived, CommandError> {
    let root = registry::canonical_root(project)?;
    let lock = project.lock()?;
    let scan = Scan::read(project, Some(registry))?;
    let live = scan
        .entries
        .into_iter()
        .find(|e| name.is_none_or(|n| e.file().name == n));
    let (file, state, from_history) = match live {
        Some(LoopEntry::Armed(l) | LoopEntry::Paused(l)) => (l.file, l.state, false),
        Some(other) => {
            return Err(refused(&format!(
                "loop `{}` is not armed by you on this machine (see `ralph adopt`); nothing was raised",
                ralph_fs::display::line(&other.file().name)
            )));
        }
        None => {
            let (file, state) = from_history(project, &lock, registry, &root, name, raise)?;
            (file, state, true)
        }
    };
    check_bounds(raise, &file.name, &state)?;
    let (mut fields, raised) = raise.fields(&state);
    if raised.is_empty() {
        return Err(refused(&format!(
            "loop `{}` has none of the bounds given (its limits: {}); nothing was raised",
            ralph_fs::display::line(&file.name),
            bounds_words(&state)
        )));
    }
    let mut iteration = state.iteration;
    if from_history {
        // The turn that ended it was counted: the next one is new.
        iteration = iteration.saturating_add(1);
        fields.extend(rearm_fields(&state, iteration, now));
    }
    fields.push(("active", "true".to_owned()));
    if let Some(session) = session {
        fields.push((
            "session_id",
            ralph_state::fields::frontmatter::scalar(session),
        ));
    }
    let Some(current) = Loop::load(&lock, file.clone())? else {
        return Err(CommandError::NoSuchLoop(file.name));
    };
    current.write(&lock, &fields)?;
    let Some(written) = Loop::load(&lock, file.clone())? else {
        return Err(CommandError::NoSuchLoop(file.name));
    };
    let nonce = written.state.nonce.clone().unwrap_or_default();
    registry.record(&root, &file.name, &nonce, &written.state, now)?;
    if from_history {
        registry.forget_ended(&root, &file.name, &nonce);
    }
    let told = record_raise(
        project, registry, &root, &file.name, &raised, iteration, now,
    );
    Ok(Revived {
        name: file.name,
        iteration,
        raised,
        from_history,
        by_run: session.is_none() && driven_by_run(&written.state),
        told,
    })
}

/// Logs the raise, and keeps the note that tells the session (or run) at its next
/// continuation, once: where the user's records are, out of the project. Whether the
/// note was kept.
fn record_raise(
    project: &Project,
    registry: &Registry,
    root: &std::path::Path,
    name: &str,
    raised: &[String],
    iteration: u64,
    now: Timestamp,
) -> bool {
    LogEntry::new(
        now,
        Logged::Resume,
        format!("bounds raised: {}", raised.join(", ")),
    )
    .iteration(iteration)
    .append(project, name);
    ralph_state::storage::guidance::Mailbox::of(registry, root, name)
        .post_raised(raised)
        .is_ok()
}

/// Whether `ralph run` drives the loop (its owner is a run's).
fn driven_by_run(state: &LoopState) -> bool {
    state
        .session_id
        .as_deref()
        .is_some_and(ralph_state::fields::run_owner::is_run)
}

/// The loop `ralph resume --add-*` would raise (the live loop of `name`,
/// else its last ended one), read as it lies (nothing is brought back): its
/// name and state, so the raise is checked and the loop's start known before
/// the user is asked. `None` when there is no such loop (the raise itself
/// then says why).
pub fn peek(
    project: &Project,
    registry: &Registry,
    name: Option<&str>,
) -> Option<(String, LoopState)> {
    let lock = project.lock().ok()?;
    let scan = Scan::read(project, Some(registry)).ok()?;
    let live = scan
        .entries
        .into_iter()
        .find(|e| name.is_none_or(|n| e.file().name == n));
    match live {
        Some(LoopEntry::Armed(l) | LoopEntry::Paused(l)) => Some((l.file.name, l.state)),
        Some(_) => None,
        None => {
            let (record, loop_name) = crate::rollback::latest_record(project, name)?;
            let file = LoopFile {
                name: loop_name.clone(),
                path: record,
            };
            Some((loop_name, Loop::load(&lock, file).ok().flatten()?.state))
        }
    }
}

/// The last ended loop of `name` from the history, when it ended at a limit
/// or a budget and this user armed it: moved back to be live.
fn from_history(
    project: &Project,
    lock: &ProjectLock,
    registry: &Registry,
    root: &std::path::Path,
    name: Option<&str>,
    raise: &Raise,
) -> Result<(LoopFile, LoopState), CommandError> {
    let (record, loop_name) = crate::rollback::latest_record(project, name)
        .ok_or_else(|| CommandError::NotLogged(name.unwrap_or("(any)").to_owned()))?;
    let ended = Loop::load(
        lock,
        LoopFile {
            name: loop_name.clone(),
            path: record.clone(),
        },
    )?
    .ok_or_else(|| CommandError::NotLogged(loop_name.clone()))?;
    let outcome = match &ended.state.outcome {
        Some(RecordedOutcome::Known(o)) => Some(*o),
        _ => None,
    };
    let at_a_bound = matches!(
        outcome,
        Some(
            Outcome::MaxIterations
                | Outcome::Guard(Tripped::TimeBudget | Tripped::TokenBudget | Tripped::CostBudget)
        )
    );
    if !at_a_bound {
        return Err(refused(&format!(
            "loop `{}` ended as {}, not at its iteration limit or a budget; more budget would not change that. Arm a new loop (or see `ralph rollback`)",
            ralph_fs::display::line(&loop_name),
            outcome.map_or("?", Outcome::as_str)
        )));
    }
    if !registry.armed_before(root, &loop_name, &ended.state) {
        return Err(refused(&format!(
            "the history record of loop `{}` ({}) was not armed by you on this machine, or was changed since it ended; nothing was armed",
            ralph_fs::display::line(&loop_name),
            project.shown(&record)
        )));
    }
    check_bounds(raise, &loop_name, &ended.state)?;
    let file = project.unarchive(&record, &loop_name)?;
    Ok((file, ended.state))
}

/// Refuses options for bounds the loop does not have: nothing is raised
/// (nor an ended loop brought back) when one of them would be dropped.
pub fn check_bounds(raise: &Raise, name: &str, state: &LoopState) -> Result<(), CommandError> {
    let missing = raise.missing(state);
    if missing.is_empty() {
        return Ok(());
    }
    Err(refused(&format!(
        "loop `{}` has no such bound for {} to raise (its limits: {}); nothing was raised. Arm a new loop to give it one",
        ralph_fs::display::line(name),
        missing.join(", "),
        bounds_words(state)
    )))
}

/// The fields that make an ended loop live again: no outcome, the next
/// iteration, and the time it lay ended left out of its time budget (the
/// start moved forward by it).
fn rearm_fields(state: &LoopState, iteration: u64, now: Timestamp) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("outcome", "\"\"".to_owned()),
        ("ended_at", "\"\"".to_owned()),
        ("iteration", iteration.to_string()),
        ("clock_at", quote(&now.to_string())),
    ];
    let worked = state.progress.elapsed_secs.or_else(|| {
        let (start, end) = (state.started_at?, state.ended_at?);
        Some(end.secs_since(start))
    });
    if let Some(worked) = worked {
        let start = Timestamp(
            now.0
                .saturating_sub(i64::try_from(worked).unwrap_or(i64::MAX)),
        );
        fields.push(("started_at", quote(&start.to_string())));
        fields.push(("elapsed_secs", worked.to_string()));
    }
    fields
}

fn bounds_words(state: &LoopState) -> String {
    let g = &state.guards;
    let mut out = Vec::new();
    if let Some(n) = state.max_iterations.get() {
        out.push(ralph_state::plural::iterations(n));
    }
    if let Some(t) = g.max_tokens {
        out.push(ralph_state::plural::count(t, "token", "tokens"));
    }
    if let Some(m) = g.max_cost_usd {
        out.push(m.dollars());
    }
    if let Some(d) = g.max_duration_secs {
        out.push(ralph_state::time::format_duration(d));
    }
    if out.is_empty() {
        "none".to_owned()
    } else {
        out.join(", ")
    }
}

fn refused(why: &str) -> CommandError {
    CommandError::Recover(why.to_owned())
}
