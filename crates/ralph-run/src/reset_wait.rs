//! `ralph run --wait-for-reset`: how long to sleep after the agent stopped
//! on a rate or usage limit. A pure function of what is known (the 5-hour
//! window the status line last saw, how many waits came before, the loop's
//! time budget) and the clock; the sleeping and polling are the binary's.
//!
//! Claude Code's print-mode result carries no reset time (checked in
//! 2.1.328: a 429 gives `api_error_status`, `api_error_type` and the error
//! text only, even when the API sends `retry-after` and the
//! `anthropic-ratelimit-unified-*` headers), so the order is: the window's
//! `resets_at` when it lies ahead, else a doubling back-off.

use ralph_state::fields::state::LoopState;
use ralph_state::time::Timestamp;

/// The first back-off wait, when no reset time is known.
pub const FIRST_BACK_OFF_SECS: u64 = 5 * 60;
/// The longest back-off wait.
pub(crate) const MAX_BACK_OFF_SECS: u64 = 60 * 60;
/// A window reset further ahead than this is not trusted (a clock or file
/// gone wrong): the back-off is used instead.
const MAX_WINDOW_WAIT_SECS: u64 = 6 * 60 * 60;

/// Where a wait's length came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitSource {
    /// The 5-hour window's `resets_at`, as `ralph statusline` last saw it.
    Window,
    /// The back-off: no reset time was known.
    BackOff,
}

/// What the run does about a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitPlan {
    /// Sleep `secs`, until `until`, then run the iteration again.
    Wait {
        secs: u64,
        until: Timestamp,
        source: WaitSource,
    },
    /// The wait would pass the loop's time budget (`left` seconds of it
    /// remain): the loop ends as `time_budget` now rather than sleep to
    /// an end that is already certain.
    PastBudget { wait: u64, left: u64 },
}

/// The back-off before the `waited`-th retry (0-based): `first`, doubled
/// each time, capped at an hour (and never below a second).
pub(crate) fn back_off(first: u64, waited: u32) -> u64 {
    let factor = 1u64.checked_shl(waited.min(32)).unwrap_or(u64::MAX);
    first
        .max(1)
        .saturating_mul(factor)
        .min(MAX_BACK_OFF_SECS.max(first))
}

/// How long to wait. `window_reset` is the status line's `resets_at`
/// (unix seconds), `waited` how many waits this run made since the last
/// iteration that replied, `first` the first back-off (overridable for
/// tests), `budget_left` the seconds of the time budget left, if any.
pub fn plan(
    now: Timestamp,
    window_reset: Option<i64>,
    waited: u32,
    first: u64,
    budget_left: Option<u64>,
) -> WaitPlan {
    let ahead = window_reset
        .filter(|&reset| reset > now.0)
        .map(|reset| Timestamp(reset).secs_since(now))
        .filter(|&secs| secs <= MAX_WINDOW_WAIT_SECS);
    // The window's reset was already waited for once and the limit still
    // holds: it is not the limit that struck, so back off.
    let (secs, source) = match ahead {
        Some(secs) if waited == 0 => (secs, WaitSource::Window),
        _ => (back_off(first, waited), WaitSource::BackOff),
    };
    if let Some(left) = budget_left
        && secs > left
    {
        return WaitPlan::PastBudget { wait: secs, left };
    }
    let until = Timestamp(
        now.0
            .saturating_add(i64::try_from(secs).unwrap_or(i64::MAX)),
    );
    WaitPlan::Wait {
        secs,
        until,
        source,
    }
}

/// The seconds left of the loop's time budget at `now`, counted as the
/// decision counts them (the larger of the time since `started_at` and the
/// time the loop has recorded); `None` without a budget.
pub(crate) fn budget_left(state: &LoopState, now: Timestamp) -> Option<u64> {
    let limit = state.guards.max_duration_secs?;
    let since_start = state.started_at.map_or(0, |start| now.secs_since(start));
    let progress = &state.progress;
    let counted = match (progress.elapsed_secs, progress.clock_at) {
        (Some(counted), Some(last)) => counted.saturating_add(now.secs_since(last)),
        _ => 0,
    };
    Some(limit.saturating_sub(since_start.max(counted)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_back_off_doubles_from_five_minutes_to_an_hour() {
        let waits: Vec<u64> = (0..7).map(|n| back_off(FIRST_BACK_OFF_SECS, n)).collect();
        assert_eq!(waits, [300, 600, 1200, 2400, 3600, 3600, 3600]);
        assert_eq!(back_off(2, 0), 2);
        assert_eq!(back_off(2, 3), 16);
        assert_eq!(back_off(0, 0), 1, "never a busy loop");
        assert_eq!(back_off(300, u32::MAX), 3600, "no shift or product wraps");
        assert_eq!(back_off(u64::MAX, 5), u64::MAX);
    }

    #[test]
    fn a_window_reset_ahead_is_waited_for_once() {
        let now = Timestamp(1_000);
        assert_eq!(
            plan(now, Some(1_750), 0, 300, None),
            WaitPlan::Wait {
                secs: 750,
                until: Timestamp(1_750),
                source: WaitSource::Window
            }
        );
        // Still limited after that reset: the window was not the limit.
        assert_eq!(
            plan(now, Some(1_750), 1, 300, None),
            WaitPlan::Wait {
                secs: 600,
                until: Timestamp(1_600),
                source: WaitSource::BackOff
            }
        );
    }

    #[test]
    fn a_reset_in_the_past_or_too_far_ahead_falls_back_to_the_back_off() {
        let now = Timestamp(10_000);
        for reset in [Some(9_000), Some(10_000), Some(10_000 + 7 * 3600), None] {
            assert_eq!(
                plan(now, reset, 0, 300, None),
                WaitPlan::Wait {
                    secs: 300,
                    until: Timestamp(10_300),
                    source: WaitSource::BackOff
                },
                "{reset:?}"
            );
        }
    }

    #[test]
    fn a_wait_past_the_time_budget_ends_the_loop_instead() {
        let now = Timestamp(0);
        assert_eq!(
            plan(now, None, 0, 300, Some(299)),
            WaitPlan::PastBudget {
                wait: 300,
                left: 299
            }
        );
        assert!(matches!(
            plan(now, None, 0, 300, Some(300)),
            WaitPlan::Wait { secs: 300, .. }
        ));
        assert!(matches!(
            plan(now, None, 0, 300, Some(0)),
            WaitPlan::PastBudget { .. }
        ));
    }

    #[test]
    fn the_budget_left_counts_like_the_decision() {
        let mut state = LoopState::parse(
            "---\nactive: true\niteration: 1\nmax_duration: \"1h\"\nstarted_at: \"1970-01-01T00:00:00Z\"\n---\nTask\n",
        )
        .unwrap();
        assert_eq!(budget_left(&state, Timestamp(600)), Some(3000));
        assert_eq!(budget_left(&state, Timestamp(4000)), Some(0));
        state.progress.elapsed_secs = Some(1800);
        state.progress.clock_at = Some(Timestamp(100));
        assert_eq!(budget_left(&state, Timestamp(600)), Some(1300));
        state.guards.max_duration_secs = None;
        assert_eq!(budget_left(&state, Timestamp(600)), None);
    }
}
