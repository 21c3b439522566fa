//! What a Stop observes before the decision: the reply, and the guard
//! figures that are switched on (each costs a read or a process, so none
//! runs unasked): the transcript since the last stop, tokens, price, the
//! working tree's fingerprint, the plan's window.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::decide::features::Features;
use crate::decide::{Observation, Verification};
use crate::reply::event::StopEvent;
use crate::reply::transcript::{self, Appended};
use ralph_fs::git;
use ralph_state::fields::state::LoopState;
use ralph_state::money::Money;
use ralph_state::storage::environment::Environment;
use ralph_state::storage::store::Project;

/// Which figures the loop's guards ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wants {
    progress: bool,
    cost: bool,
    /// The transcript's figures (tokens, tools, turn ends) are counted.
    transcript: bool,
}

impl Wants {
    fn of(state: &LoopState, ctx: &Environment) -> Self {
        // A gate-alone loop runs its gate when the turn changed the tree:
        // it needs the fingerprint the no-progress breaker takes.
        let progress = state.guards.no_progress_after.is_set() || state.gate_alone();
        // Pricing is an optional feature, asked of the engine's seam; only
        // the hook prices (its turn's tokens come from the transcript).
        let cost = Features::prices(state);
        Self {
            progress,
            cost,
            transcript: state.guards.max_tokens.is_some() || ctx.block_cap > 0 || progress || cost,
        }
    }
}

/// A transcript that is there but not a regular file (a FIFO, a device) is
/// refused without blocking; said once, whichever read met it.
#[derive(Debug, Default)]
struct Refusal(Option<String>);

impl Refusal {
    fn note(&mut self, e: &std::io::Error) {
        if e.kind() == std::io::ErrorKind::InvalidData && self.0.is_none() {
            self.0 = Some(e.to_string());
        }
    }

    fn tell(self, notices: &mut Vec<String>) {
        if let Some(why) = self.0 {
            notices.push(format!("⚠ ralph: the transcript was not read: {why}"));
        }
    }
}

/// The reply of this turn: the event's, else the last one the transcript
/// holds since the last stop. The flag says whether it came from the event.
fn the_reply(
    event: &mut StopEvent,
    transcript_path: Option<&Path>,
    state: &LoopState,
    refusal: &mut Refusal,
) -> (Option<String>, bool) {
    if let Some(reply) = event.take_reply() {
        return (Some(reply), true);
    }
    let reply = transcript_path.and_then(|path| {
        let offset = state.progress.transcript_offset;
        transcript::last_reply(path, offset, state.started_at)
            .map_err(|e| refusal.note(&e))
            .ok()
            .flatten()
            .map(|r| r.text)
    });
    (reply, false)
}

/// What was appended to the transcript since the last stop. An active loop
/// reads it at every stop, for the user's queue if for nothing else, so the
/// offset moves on and no stop reads a part twice. Without a guard that
/// counts, a first look counts nothing (no start time: a baseline).
fn scan_transcript(
    path: &Path,
    state: &LoopState,
    event: &StopEvent,
    ctx: &Environment,
    reply: Option<&str>,
    wants: Wants,
    refusal: &mut Refusal,
) -> Option<Appended> {
    let counts_from = state.started_at.filter(|_| wants.transcript);
    let mut scan = || {
        transcript::scan_loop(
            path,
            state.progress.transcript_offset,
            state.progress.last_message_id.as_deref(),
            counts_from,
        )
        .map_err(|e| refusal.note(&e))
        .ok()
    };
    let first = scan()?;
    Some(
        if block_cap_hinges_on_lag(state, event, ctx, &first, reply) {
            settle(first, reply, scan)
        } else {
            first
        },
    )
}

/// Gathers what the decision needs: the reply, and the guard figures that
/// are switched on. Returns the observation and how far the transcript was
/// read.
pub(super) fn observe(
    project: &Project,
    state: &LoopState,
    event: &mut StopEvent,
    ctx: &Environment,
    notices: &mut Vec<String>,
) -> (Observation, Option<Appended>) {
    let transcript_path = event
        .transcript_path
        .take()
        .filter(|p| !p.as_os_str().is_empty());
    let transcript_path = transcript_path.as_deref();
    let mut refusal = Refusal::default();
    let (reply, reply_from_event) = the_reply(event, transcript_path, state, &mut refusal);
    let wants = Wants::of(state, ctx);
    let scanned = transcript_path
        .filter(|_| wants.transcript || state.active)
        .and_then(|p| scan_transcript(p, state, event, ctx, reply.as_deref(), wants, &mut refusal));
    refusal.tell(notices);
    // Only a guard that is on sees the figures; the offset moves on either way.
    let appended = scanned.as_ref().filter(|_| wants.transcript);
    let tree = wants.progress.then(|| {
        let from_event = reply.as_deref().filter(|_| reply_from_event);
        tree_fingerprint(project, state, appended, from_event)
    });
    let priced = appended.filter(|_| wants.cost).map(|a| price(a, notices));
    let queued = scanned.as_ref().is_some_and(|a| a.queued > 0);
    let tree_unchanged = scanned.as_ref().is_some_and(|a| {
        let from_event = reply.as_deref().filter(|_| reply_from_event);
        turn_ran_nothing(a, from_event, state.progress.counts.replies_behind)
    });
    let figures = Figures {
        appended,
        priced,
        tree,
        tree_unchanged,
        queued,
    };
    let mut seen = figures.observation(state, event, ctx, reply);
    seen.context = context_fill(scanned.as_ref(), transcript_path, event, ctx);
    (seen, scanned)
}

/// How full the context is: the last request this stop's part of the
/// transcript holds (else the last in the file, read backward), against the
/// window the status line last reported for this session.
pub(crate) fn context_fill(
    scanned: Option<&Appended>,
    transcript_path: Option<&Path>,
    event: &StopEvent,
    ctx: &Environment,
) -> Option<ralph_state::context::Fill> {
    let tokens = match scanned.and_then(|a| a.context) {
        Some(tokens) => tokens,
        None => transcript::last_context(transcript_path?).ok()??,
    };
    let window = event
        .session()
        .zip(ctx.registry())
        .and_then(|(session, r)| {
            ralph_state::storage::window::load_context_windows(r.dir()).of(session)
        });
    Some(ralph_state::context::Fill { tokens, window })
}

/// The figures a stop read, before they become an [`Observation`].
struct Figures<'a> {
    appended: Option<&'a Appended>,
    /// This stop's cost, and the largest reply's alone.
    priced: Option<(Money, Money)>,
    tree: Option<TreeSeen>,
    /// The transcript proves the turn ran no tool.
    tree_unchanged: bool,
    queued: bool,
}

impl Figures<'_> {
    fn observation(
        self,
        state: &LoopState,
        event: &StopEvent,
        ctx: &Environment,
        reply: Option<String>,
    ) -> Observation {
        let Figures {
            appended,
            priced,
            tree,
            tree_unchanged,
            queued,
        } = self;
        // What `ralph statusline` last saw of the plan's window (per user).
        let window = state
            .guards
            .max_window_pct
            .and_then(|_| ctx.registry())
            .and_then(|r| ralph_state::storage::window::load(r.dir()))
            .map(|w| (w.used_now(ctx.now), w.reset_words()));
        Observation {
            largest_reply_cost: priced.map_or(Money(0), |(_, largest)| largest),
            goal_active: appended.and_then(|a| a.goal_active),
            window,
            pending_work: event.pending_work(),
            cost_usd: priced.map(|(cost, _)| state.progress.counts.cost_usd.plus(cost)),
            now: Some(ctx.now),
            tokens_used: appended.map(|a| state.progress.tokens_used.saturating_add(a.tokens)),
            tree_pending: matches!(tree, Some(TreeSeen::Pending)),
            tree_fingerprint: match tree {
                Some(TreeSeen::Known(fingerprint)) => Some(fingerprint),
                _ => None,
            },
            ran_tool: appended.and_then(|a| a.ran_tool),
            tree_unchanged,
            block_cap: ctx.block_cap,
            verification: None::<Verification>,
            gate_ran: None,
            // `engine::step` reads the PRD, so `ralph run` reads it the same way.
            prd: None,
            check: None,
            // `engine::step` compares the paths, as it reads the PRD.
            changed_paths: crate::decide::ChangedPaths::NotAsked,
            dependency_only: Vec::new(),
            // `engine::step` reads the loop's mailbox, for both drivers.
            gate_guidance: Vec::new(),
            stop_hook_active: event.stop_hook_active,
            // No transcript to read (not written yet at a session's first stop):
            // the reply is missing too.
            reply_missing: appended.is_none_or(|a| a.lacks_reply(reply.as_deref())),
            largest_reply_tokens: appended.map_or(0, |a| a.largest_reply),
            turn_ends: appended.map(|a| a.turn_ends),
            // Only an active loop keeps a turn going, so only then can a message wait on it.
            queued_message: state.active && queued,
            // Read by `observe`, which has the transcript's path.
            context: None,
            reply,
        }
    }
}

/// What the tokens of this stop's part of the transcript cost, by the
/// shipped price table with the user's over it. A table that cannot be read
/// and a model it does not know are told; neither makes tokens free.
/// Also the price of the largest message alone (the estimate for a reply
/// the transcript does not hold yet).
fn price(appended: &Appended, notices: &mut Vec<String>) -> (Money, Money) {
    use crate::decide::pricing::PriceTable;
    let zero = Money(0);
    if appended.per_model.is_empty() {
        return (zero, zero);
    }
    let table = match PriceTable::load(crate::decide::pricing::user_file_from_env().as_deref()) {
        Ok(table) => table,
        Err(e) => {
            notices.push(format!(
                "⚠ ralph: {e}; ralph's own prices are used meanwhile."
            ));
            match PriceTable::shipped() {
                Ok(table) => table,
                Err(e) => {
                    notices.push(format!("⚠ ralph: {e}"));
                    return (zero, zero);
                }
            }
        }
    };
    let priced = table.price(&appended.per_model);
    for model in &priced.unknown {
        notices.push(format!(
            "⚠ ralph: no price for the model `{}`; its tokens are priced at the dearest rate known. Give its prices in {} (docs/cost.md).",
            ralph_fs::display::line(model),
            crate::decide::pricing::user_file_from_env()
                .map_or_else(
                    || "~/.config/ralph/prices.json".to_owned(),
                    |p| ralph_fs::display::line(&p.display().to_string()).into_owned()
                )
        ));
    }
    let largest = appended
        .largest_message
        .as_ref()
        .map_or(zero, |m| table.price(std::slice::from_ref(m)).cost);
    (priced.cost, largest)
}

/// The cheapest signal that decides: an edit the transcript proves, then
/// (only when that cannot tell) the working tree and HEAD, which the engine
/// reads under the lock (staged into the loop's kept index, which is its
/// checkpoint too; else one `git status`). A transcript that lags the Stop event proves nothing, so
/// the tree is read: a lag can delay the breaker, never end a loop falsely.
///
/// A turn that ran no tool at all cannot have changed the tree through the
/// agent, so it needs no `git status`: it carries the previous fingerprint,
/// which makes it a turn without progress, as it is by definition. Only
/// when that is proven: this stop's part of the transcript holds the reply
/// the Stop event carries, no line of it called, answered or announced a
/// tool, and the previous stop's transcript held its own reply (so this
/// part is this turn's, not a late one's). Anything less reads the tree.
fn tree_fingerprint(
    project: &Project,
    state: &LoopState,
    appended: Option<&Appended>,
    reply_from_event: Option<&str>,
) -> TreeSeen {
    if let (Some(a), Some(previous)) = (appended, &state.progress.tree_fingerprint)
        && turn_ran_nothing(a, reply_from_event, state.progress.counts.replies_behind)
    {
        return TreeSeen::Known(previous.clone());
    }
    if std::fs::symlink_metadata(project.root.join(".git")).is_err() {
        return TreeSeen::NotGit;
    }
    let edit_proven = appended.filter(|a| a.edit_proven).map(|a| a.end_offset);
    match git::edit_fingerprint(state.progress.tree_fingerprint.as_deref(), edit_proven) {
        Some(proven) => TreeSeen::Known(proven),
        None => TreeSeen::Pending,
    }
}

/// What the hook knows of the work tree before the engine runs.
enum TreeSeen {
    /// The fingerprint, without reading the tree (no tool ran, or an edit
    /// the transcript proves).
    Known(String),
    /// The engine reads the tree ([`Observation::tree_pending`]).
    Pending,
    /// No git work tree: no fingerprint.
    NotGit,
}

/// Whether the turn provably ran no tool (see [`tree_fingerprint`]): the
/// transcript holds its reply (`reply`, from the Stop event) and nothing of
/// a tool, and was not behind at the previous stop.
fn turn_ran_nothing(appended: &Appended, reply: Option<&str>, replies_behind_before: u64) -> bool {
    let Some(reply) = reply.filter(|r| !r.trim().is_empty()) else {
        return false;
    };
    replies_behind_before == 0
        && appended.ran_tool == Some(false)
        && !appended.tool_seen
        && appended.last_text.is_some()
        && !appended.lacks_reply(Some(reply))
}

/// The longest the hook waits for Claude Code to finish writing the turn
/// into the transcript (it was written within half a second when the machine
/// was idle; on a loaded machine it lagged by two replies at times).
const TRANSCRIPT_SETTLE: Duration = Duration::from_secs(2);

/// Whether this stop would end the loop at the block cap only because the
/// transcript has not caught up: the turn's last reply is not written yet,
/// so a tool call before it may not be either.
fn block_cap_hinges_on_lag(
    state: &LoopState,
    event: &StopEvent,
    ctx: &Environment,
    seen: &Appended,
    reply: Option<&str>,
) -> bool {
    ctx.block_cap > 0
        && event.stop_hook_active != Some(false)
        && state.progress.idle_blocks >= ctx.block_cap
        && seen.ran_tool != Some(true)
        && seen.lacks_reply(reply)
}

/// Reads the transcript again until the turn's last reply is in, for at most
/// [`TRANSCRIPT_SETTLE`]. Only the stop that would end a loop at the block
/// cap pays for this, so a loop whose turns run tools is not ended early.
fn settle(
    mut latest: Appended,
    reply: Option<&str>,
    mut rescan: impl FnMut() -> Option<Appended>,
) -> Appended {
    let deadline = Instant::now() + TRANSCRIPT_SETTLE;
    while latest.lacks_reply(reply) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(again) = rescan() {
            latest = again;
        }
    }
    latest
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_state::time::Timestamp;

    fn ctx(block_cap: u64) -> Environment {
        Environment {
            project_dir: None,
            process_cwd: None,
            home: None,
            state_home: None,
            block_cap,
            now: Timestamp(0),
            courier: None,
        }
    }

    fn state() -> LoopState {
        LoopState::parse("---\nactive: true\niteration: 1\nmax_iterations: 5\n---\ntask\n").unwrap()
    }

    #[test]
    fn the_transcript_is_counted_only_for_a_guard_that_counts() {
        let mut quiet = state();
        quiet.guards.no_progress_after = 0.into();
        quiet.guards.max_tokens = None;
        quiet.guards.max_cost_usd = None;
        assert!(!Wants::of(&quiet, &ctx(0)).transcript);
        assert!(
            Wants::of(&quiet, &ctx(8)).transcript,
            "the block cap counts"
        );
        quiet.guards.max_tokens = Some(10);
        assert!(Wants::of(&quiet, &ctx(0)).transcript);
    }

    #[test]
    fn a_refused_transcript_is_told_once() {
        let mut refusal = Refusal::default();
        let bad = std::io::Error::new(std::io::ErrorKind::InvalidData, "a FIFO");
        refusal.note(&bad);
        refusal.note(&std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "again",
        ));
        refusal.note(&std::io::Error::other("not a refusal"));
        let mut notices = Vec::new();
        refusal.tell(&mut notices);
        assert_eq!(notices, ["⚠ ralph: the transcript was not read: a FIFO"]);
    }

    #[test]
    fn the_reply_comes_from_the_event_first() {
        let mut event =
            StopEvent::parse(br#"{"session_id":"s","last_assistant_message":"hi"}"#).unwrap();
        let (reply, from_event) = the_reply(&mut event, None, &state(), &mut Refusal::default());
        assert_eq!((reply.as_deref(), from_event), (Some("hi"), true));
        let mut bare = StopEvent::parse(br#"{"session_id":"s"}"#).unwrap();
        let (reply, from_event) = the_reply(&mut bare, None, &state(), &mut Refusal::default());
        assert_eq!((reply, from_event), (None, false));
    }

    #[test]
    fn a_turn_ran_nothing_only_when_the_transcript_proves_it() {
        let quiet = Appended {
            ran_tool: Some(false),
            last_text: Some("done".into()),
            ..Appended::default()
        };
        assert!(turn_ran_nothing(&quiet, Some("done"), 0));
        assert!(
            !turn_ran_nothing(&quiet, Some("done"), 1),
            "it lagged before"
        );
        assert!(!turn_ran_nothing(&quiet, None, 0), "no reply to match");
        let tooled = Appended {
            tool_seen: true,
            ..quiet.clone()
        };
        assert!(!turn_ran_nothing(&tooled, Some("done"), 0));
    }

    #[test]
    fn settling_stops_as_soon_as_the_reply_is_in() {
        let lagging = Appended {
            reply_missing: true,
            ..Appended::default()
        };
        let landed = Appended {
            last_text: Some("done".into()),
            ..Appended::default()
        };
        let mut rescans = 0;
        let settled = settle(lagging, Some("done"), || {
            rescans += 1;
            Some(landed.clone())
        });
        assert_eq!(rescans, 1);
        assert!(!settled.lacks_reply(Some("done")));
    }
}
