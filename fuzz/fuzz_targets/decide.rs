//! `decide::decide` on extreme figures: counters, limits, timestamps and
//! token counts taken from the fuzzed bytes, biased towards 0, 1, the caps
//! and the ends of the integer ranges.
//!
//! Properties: no panic (overflow checks are on in this build); a
//! `Continue` never runs past `max_iterations` or the iteration cap, counts
//! exactly one more iteration, keeps the token figure within what a file can
//! hold, and stays under every budget it was given; a paused loop passes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ralph_core::decide::{ChangedPaths, Decision, Observation, decide};
use ralph_state::fields::state::{LoopState, MAX_COUNT, MAX_TOKENS};
use ralph_state::time::Timestamp;

/// Reads fuzzed bytes as numbers, most of them special values.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let (first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        *first
    }
    fn raw(&mut self) -> u64 {
        (0..8).fold(0, |n, _| n << 8 | u64::from(self.byte()))
    }
    fn u64(&mut self) -> u64 {
        match self.byte() % 8 {
            0 => 0,
            1 => 1,
            2 => u64::MAX,
            3 => MAX_COUNT,
            4 => MAX_TOKENS,
            5 => u64::from(self.byte()),
            _ => self.raw(),
        }
    }
    fn i64(&mut self) -> i64 {
        match self.byte() % 6 {
            0 => i64::MIN,
            1 => i64::MAX,
            2 => 0,
            3 => i64::from(self.byte() as i8),
            _ => self.raw() as i64,
        }
    }
    fn maybe_u64(&mut self) -> Option<u64> {
        (self.byte() % 4 != 0).then(|| self.u64())
    }
    fn maybe_i64(&mut self) -> Option<i64> {
        (self.byte() % 4 != 0).then(|| self.i64())
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let mut s = LoopState::parse("---\ncompletion_promise: DONE\nabort_promise: STUCK\n---\nP")
        .expect("the base loop parses");
    s.active = b.byte() % 8 != 0;
    s.iteration = b.u64();
    s.max_iterations = b.u64().into();
    s.started_at = b.maybe_i64().map(Timestamp);
    s.progress.tokens_used = b.u64();
    s.progress.same_reply_count = b.u64();
    s.progress.no_progress_count = b.u64();
    s.progress.idle_blocks = b.u64();
    s.progress.elapsed_secs = b.maybe_u64();
    s.progress.clock_at = b.maybe_i64().map(Timestamp);
    s.progress.reply_fingerprint = (b.byte() % 2 == 0).then(|| "0000000000000000".into());
    s.progress.tree_fingerprint = (b.byte() % 2 == 0).then(|| "t".into());
    s.progress.largest_reply_tokens = b.u64();
    s.progress.counts.replies_behind = b.u64();
    s.guards.max_tokens = b.maybe_u64();
    s.guards.max_duration_secs = b.maybe_u64();
    s.guards.stuck_after = b.u64().into();
    s.guards.no_progress_after = b.u64().into();
    let reply = match b.byte() % 5 {
        0 => None,
        1 => Some("<promise>DONE</promise>".to_owned()),
        2 => Some("<promise>STUCK</promise>".to_owned()),
        3 => Some(String::new()),
        _ => Some(String::from_utf8_lossy(b.0).into_owned()),
    };
    let seen = Observation {
        reply,
        now: b.maybe_i64().map(Timestamp),
        tokens_used: b.maybe_u64(),
        tree_fingerprint: (b.byte() % 2 == 0).then(|| "t".into()),
        ran_tool: [None, Some(true), Some(false)][usize::from(b.byte() % 3)],
        tree_unchanged: b.byte() % 2 == 0,
        tree_pending: b.byte() % 2 == 0,
        block_cap: b.u64(),
        verification: None,
        check: None,
        changed_paths: match b.byte() % 4 {
            0 => ChangedPaths::NotAsked,
            1 => ChangedPaths::Unknown,
            2 => ChangedPaths::Known(Vec::new()),
            _ => ChangedPaths::Known(vec!["tests/a.rs".into(), "src/b.rs".into()]),
        },
        stop_hook_active: [None, Some(true), Some(false)][usize::from(b.byte() % 3)],
        reply_missing: b.byte() % 2 == 0,
        largest_reply_tokens: b.u64(),
        turn_ends: b.maybe_u64(),
        prd: None,
        queued_message: b.byte() % 4 == 0,
        cost_usd: None,
        pending_work: None,
        window: None,
        goal_active: None,
        largest_reply_cost: ralph_state::money::Money(0),
        gate_ran: None,
        dependency_only: if b.byte() % 2 == 0 {
            Vec::new()
        } else {
            vec!["package.json".into()]
        },
        gate_guidance: if b.byte() % 4 == 0 {
            vec!["check auth.rs, not auth_old.rs".into()]
        } else {
            Vec::new()
        },
        context: b.maybe_u64().map(|tokens| ralph_state::context::Fill {
            tokens,
            window: b.maybe_u64(),
        }),
    };
    match decide(&s, &seen) {
        Decision::Pass => assert!(
            !s.active || seen.queued_message,
            "an active loop passed with no message waiting"
        ),
        Decision::Wait { .. } => unreachable!("no background work was set"),
        Decision::Verify { .. } => unreachable!("no verify command was set"),
        Decision::Check { .. } => unreachable!("no check command was set"),
        Decision::End { detail, .. } => assert!(s.active && !detail.is_empty()),
        Decision::Continue { next, progress, .. } => {
            assert!(s.active);
            assert!(!s.max_iterations.reached(s.iteration));
            assert!(s.iteration < MAX_COUNT);
            assert_eq!(next, s.iteration + 1);
            assert!(progress.tokens_used <= MAX_TOKENS);
            assert!(progress.unseen_tokens <= MAX_TOKENS);
            assert!(progress.counts.replies_behind <= MAX_COUNT);
            if let Some(limit) = s.guards.max_tokens {
                assert!(progress.tokens_used < limit);
            }
            if let (Some(limit), Some(_)) = (s.guards.max_duration_secs, seen.now) {
                assert!(progress.elapsed_secs.is_some_and(|e| e < limit));
            }
        }
    }
});
