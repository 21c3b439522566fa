//! What a report shows, as plain data: one [`LoopView`] per loop and one
//! [`StoryRow`] per story of a `--parallel` run, built from `ralph status`'s
//! [`LoopReport`] and the decision log's lines. Pure: no file, no clock.
//!
//! A log line is read field by field from its JSON value, never as one
//! typed struct: other writers add fields over time (check results, costs,
//! a receipt), and a field ralph does not know, or one of an unexpected
//! type, must cost the report that one figure, not the whole line.

use serde_json::Value;

use ralph_control::LoopReport;
use ralph_state::fields::limit::Limit;
use ralph_state::money::Money;
use ralph_state::storage::fleet::StoryRecord;
use ralph_state::time::Timestamp;

/// Everything one HTML file shows.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub project: String,
    /// When the report was made (RFC 3339).
    pub generated_at: String,
    pub loops: Vec<LoopView>,
    /// The stories of a `--parallel` run (empty without one).
    pub stories: Vec<StoryRow>,
}

/// One loop, live or ended.
#[derive(Debug, Clone, Default)]
pub struct LoopView {
    pub name: String,
    /// active, paused, ended, corrupt, unreadable.
    pub state: String,
    pub outcome: Option<String>,
    /// The sentence that says why it ended (the end entry's `why`).
    pub why: Option<String>,
    pub task: String,
    /// `--protect` and `--scope`, worded as `ralph status` words them.
    pub paths: Vec<String>,
    pub iteration: Option<u64>,
    pub max_iterations: Option<Limit>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub elapsed_secs: Option<u64>,
    pub tokens_used: Option<u64>,
    pub max_tokens: Option<u64>,
    /// What the loop spent: the counter of its file (the record), else the
    /// last running total its log carries; `None` when nothing was counted.
    pub cost_usd: Option<Money>,
    /// The dollar budget (`--max-cost`), when there is one.
    pub max_cost_usd: Option<Money>,
    pub breakers: Vec<Breaker>,
    pub iterations: Vec<IterationRow>,
    /// The receipt's fields, in the order logged (the last line that has one).
    pub receipt: Vec<(String, String)>,
    pub error: Option<String>,
}

/// A counter and the limit that ends the loop when it is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breaker {
    pub label: &'static str,
    pub count: u64,
    /// Unlimited: the breaker is off.
    pub limit: Limit,
    /// The count and limit are micro-dollars (shown as `$0.15`).
    pub dollars: bool,
}

/// One iteration as its decision-log line tells it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IterationRow {
    pub iteration: u64,
    /// block (went on) or end.
    pub decision: String,
    pub time: String,
    /// Since the previous turn's line (or the loop's start).
    pub seconds: Option<u64>,
    /// The loop's tokens after this turn, as logged (a running total).
    pub tokens_total: Option<u64>,
    /// What the loop had spent after this turn, as logged (a running total).
    pub cost_total: Option<Money>,
    /// The `--verify` gate's verdict at this stop, when it ran.
    pub verify: Option<Check>,
    /// The `--check` command's result at this stop, when it ran.
    pub check: Option<Check>,
    /// A `--prd` loop's story commands at this stop, when any ran.
    pub stories: Option<Check>,
    /// The first turn after a resume (its time counts from the resume).
    pub resumed: bool,
    pub why: String,
    /// How full the context was at the last request before this stop, when
    /// the log says (its window only when the status line reported it).
    pub context: Option<ralph_state::context::Fill>,
    /// The client compacted the context during this iteration (`manual` or
    /// `auto`): from here on the agent works from a summary.
    pub compacted: Option<String>,
}

impl IterationRow {
    /// Tokens this turn added: the running total less the previous one.
    pub(crate) fn tokens_added(&self, previous_total: u64) -> Option<u64> {
        self.tokens_total.map(|t| t.saturating_sub(previous_total))
    }

    /// Dollars this turn spent: the running total less the previous one.
    pub(crate) fn cost_added(&self, previous_total: Money) -> Option<Money> {
        self.cost_total.map(|t| t.minus(previous_total))
    }
}

/// Each iteration's own spend, in order (`None` where its line has no
/// figure): the differences of the logged running totals.
pub(crate) fn costs_per_iteration(rows: &[IterationRow]) -> Vec<Option<Money>> {
    let mut previous = Money(0);
    rows.iter()
        .map(|r| {
            let added = r.cost_added(previous);
            previous = r.cost_total.unwrap_or(previous);
            added
        })
        .collect()
}

/// A check or gate result of one iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Check {
    pub passed: bool,
    /// What the gate said (`exit 1`, `timed out after 5m`), when logged.
    pub status: String,
    /// How many checks failed, when the log says.
    pub failures: Option<u64>,
}

/// One story of a `--parallel` run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoryRow {
    pub story: String,
    pub state: String,
    pub outcome: String,
    pub iterations: u64,
    pub tokens: u64,
    pub seconds: u64,
    pub branch: String,
    pub note: String,
}

impl From<&StoryRecord> for StoryRow {
    fn from(r: &StoryRecord) -> Self {
        Self {
            story: r.story.clone(),
            state: r.state.as_str().to_owned(),
            outcome: r.outcome.clone(),
            iterations: r.iterations,
            tokens: r.tokens,
            seconds: r.seconds,
            branch: r.branch.clone(),
            note: r.note.clone(),
        }
    }
}

/// The view of one loop: `report` as `ralph status` has it, `log` its
/// decision log's lines, oldest first.
pub(crate) fn loop_view(report: &LoopReport, log: &[Value]) -> LoopView {
    let started_at = first_start(report, log);
    let iterations = iterations(log, started_at.as_deref());
    let counted = report
        .guard_counts
        .as_ref()
        .map(|c| c.cost_usd)
        .filter(|c| c.0 > 0);
    let max_cost_usd = report.guard_settings.as_ref().and_then(|g| g.max_cost_usd);
    let logged = iterations.iter().rev().find_map(|i| i.cost_total);
    let why = log
        .iter()
        .rev()
        .find(|l| text(l, "decision").as_deref() == Some("end"))
        .and_then(|l| text(l, "why"));
    LoopView {
        name: report.name.clone(),
        state: report.state.to_string(),
        outcome: report.outcome.clone(),
        why,
        task: report.task.clone().unwrap_or_default(),
        paths: report
            .guards
            .iter()
            .filter(|g| g.starts_with("protect ") || g.starts_with("scope "))
            .cloned()
            .collect(),
        iteration: report.iteration,
        max_iterations: report.max_iterations,
        started_at,
        ended_at: report.ended_at.clone(),
        elapsed_secs: report.elapsed_secs,
        tokens_used: report.tokens_used,
        max_tokens: report.guard_settings.as_ref().and_then(|g| g.max_tokens),
        cost_usd: counted.or(logged).or(max_cost_usd.map(|_| Money(0))),
        max_cost_usd,
        breakers: breakers(report),
        iterations,
        receipt: report
            .receipt
            .as_ref()
            .and_then(|r| serde_json::to_value(r).ok())
            .as_ref()
            .or_else(|| log.iter().rev().find_map(|l| l.get("receipt")))
            .map(receipt_fields)
            .unwrap_or_default(),
        error: report.error.clone(),
    }
}

/// When the loop started: its `started_at`, or its log's first line when
/// that is earlier (a revived loop's `started_at` moved forward by the time
/// it lay ended, to keep that time out of its time budget).
fn first_start(report: &LoopReport, log: &[Value]) -> Option<String> {
    let armed = report.started_at.clone();
    let first = log.iter().find_map(|l| text(l, "time"));
    match (&armed, &first) {
        (Some(a), Some(f)) => {
            let earlier = Timestamp::parse_rfc3339(f)
                .zip(Timestamp::parse_rfc3339(a))
                .is_some_and(|(f, a)| f.0 < a.0);
            if earlier { first } else { armed }
        }
        (None, _) => first,
        _ => armed,
    }
}

/// The turns of a log: its `block` and `end` lines (a paused stop's `pass`,
/// a pause or a resume are not iterations).
pub(crate) fn iterations(log: &[Value], started_at: Option<&str>) -> Vec<IterationRow> {
    let mut previous = started_at.and_then(Timestamp::parse_rfc3339);
    let mut rows = Vec::new();
    let mut resumed = false;
    let mut compacted = None;
    for line in log {
        let decision = text(line, "decision").unwrap_or_default();
        if decision == "compact" {
            compacted = Some(text(line, "trigger").unwrap_or_else(|| "unknown".into()));
        }
        if decision == "resume" {
            // The time the loop lay paused or ended is no turn's.
            if let Some(at) = text(line, "time").and_then(|t| Timestamp::parse_rfc3339(&t)) {
                previous = Some(at);
            }
            resumed = true;
            continue;
        }
        if decision != "block" && decision != "end" {
            continue;
        }
        let time = text(line, "time").unwrap_or_default();
        let at = Timestamp::parse_rfc3339(&time);
        let seconds = match (previous, at) {
            (Some(before), Some(now)) => Some(now.secs_since(before)),
            _ => None,
        };
        if at.is_some() {
            previous = at;
        }
        rows.push(IterationRow {
            iteration: number(line, "iteration").unwrap_or(0),
            decision,
            time,
            seconds,
            tokens_total: number(line, "tokens"),
            cost_total: line.get("cost_usd").and_then(Money::from_json_up),
            verify: verdict(line, "verification"),
            stories: verdict(line, "stories"),
            resumed: std::mem::take(&mut resumed),
            check: verdict(line, "check"),
            why: format!(
                "{}{}",
                text(line, "why").unwrap_or_default(),
                ralph_control::status_text::guidance_words(line)
            ),
            context: number(line, "context_tokens").map(|tokens| ralph_state::context::Fill {
                tokens,
                window: number(line, "context_window"),
            }),
            compacted: compacted.take(),
        });
    }
    rows
}

/// A verdict of a line (`verification`: the `--verify` gate; `check`: the
/// `--check` command) as ralph logs it, with a failure count wherever a
/// writer put one.
fn verdict(line: &Value, field: &str) -> Option<Check> {
    let v = line.get(field)?;
    let failures = ["failures", "failed", "failure_count"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_u64))
        .or_else(|| number(line, "failures"));
    Some(Check {
        passed: v.get("passed").and_then(Value::as_bool)?,
        status: text(v, "status").unwrap_or_default(),
        failures,
    })
}

/// The breakers' counters against their limits, the iteration limit first.
fn breakers(r: &LoopReport) -> Vec<Breaker> {
    let mut out = Vec::new();
    if let (Some(count), Some(limit)) = (r.iteration, r.max_iterations) {
        out.push(Breaker {
            label: "iterations",
            count,
            limit,
            dollars: false,
        });
    }
    let (Some(g), Some(c)) = (&r.guard_settings, &r.guard_counts) else {
        return out;
    };
    let mut push = |label, count: Option<u64>, limit| {
        out.push(Breaker {
            label,
            count: count.unwrap_or(0),
            limit,
            dollars: false,
        });
    };
    push("same reply in a row", r.same_reply_count, g.stuck_after);
    push(
        "iterations without a change",
        r.no_progress_count,
        g.no_progress_after,
    );
    push(
        "refused promises (--verify)",
        Some(c.verify_failures),
        g.max_verify_failures,
    );
    if let Some(limit) = g.max_tokens {
        push("tokens", r.tokens_used, Limit::new(limit));
    }
    if let Some(limit) = g.max_duration_secs {
        push("seconds", r.elapsed_secs, Limit::new(limit));
    }
    if let Some(limit) = g.max_cost_usd {
        out.push(Breaker {
            label: "dollars (--max-cost)",
            count: c.cost_usd.0,
            limit: Limit::new(limit.0),
            dollars: true,
        });
    }
    out
}

/// A receipt's fields as text: an object's keys in order, else the value.
fn receipt_fields(v: &Value) -> Vec<(String, String)> {
    match v {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), plain(v))).collect(),
        Value::Null => Vec::new(),
        other => vec![("receipt".to_owned(), plain(other))],
    }
}

/// A JSON value as the text to show: a string as it is, the rest as JSON.
fn plain(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

fn text(line: &Value, key: &str) -> Option<String> {
    line.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn number(line: &Value, key: &str) -> Option<u64> {
    line.get(key).and_then(Value::as_u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_iteration_carries_its_context_fill_and_the_compaction_in_it() {
        let log = vec![
            json!({"decision": "block", "iteration": 1, "why": "x", "context_tokens": 82_000, "context_window": 200_000}),
            json!({"decision": "compact", "iteration": 2, "trigger": "auto", "why": "compacted"}),
            json!({"decision": "block", "iteration": 2, "why": "x", "context_tokens": 9_000}),
            json!({"decision": "end", "iteration": 3, "why": "x"}),
        ];
        let rows = iterations(&log, None);
        assert_eq!(rows.len(), 3, "a compaction is not an iteration");
        assert_eq!(rows[0].context.unwrap().words(), "41% of 200k");
        assert_eq!(rows[1].context.unwrap().words(), "9k, window unknown");
        assert_eq!(
            rows.iter()
                .map(|r| r.compacted.as_deref())
                .collect::<Vec<_>>(),
            [None, Some("auto"), None]
        );
    }

    #[test]
    fn iterations_are_the_block_and_end_lines_with_the_time_each_took() {
        let log = vec![
            json!({"time": "2026-12-01T10:00:30Z", "decision": "block", "iteration": 1, "tokens": 100, "why": "no promise yet"}),
            json!({"time": "2026-12-01T10:00:40Z", "decision": "pause", "why": "paused by the user"}),
            json!({"time": "2026-12-01T10:00:50Z", "decision": "pass", "iteration": 2, "why": "paused"}),
            json!({"time": "2026-12-01T10:02:00Z", "decision": "end", "iteration": 2, "tokens": 250,
                   "verification": {"passed": false, "status": "exit 1", "failures": 3}, "cost_usd": 0.25,
                   "why": "done", "an_unknown_field": [1, 2]}),
        ];
        let rows = iterations(&log, Some("2026-12-01T10:00:00Z"));
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].context, None, "no figure logged: none shown");
        assert_eq!(rows[0].seconds, Some(30));
        assert_eq!(rows[1].seconds, Some(90));
        assert_eq!(rows[1].tokens_added(100), Some(150));
        assert_eq!(rows[1].cost_total, Some(Money(250_000)));
        let check = rows[1].verify.clone().unwrap();
        assert!(!check.passed);
        assert_eq!(check.failures, Some(3));
        assert_eq!(check.status, "exit 1");
    }

    #[test]
    fn the_turn_after_a_resume_counts_from_the_resume_and_is_marked() {
        let log = vec![
            json!({"time": "2026-12-01T10:00:02Z", "decision": "end", "iteration": 2, "why": "limit"}),
            json!({"time": "2026-12-01T11:00:00Z", "decision": "resume", "iteration": 3, "why": "bounds raised"}),
            json!({"time": "2026-12-01T11:00:11Z", "decision": "end", "iteration": 3, "why": "limit"}),
        ];
        let rows = iterations(&log, Some("2026-12-01T10:00:00Z"));
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].seconds, rows[0].resumed), (Some(2), false));
        assert_eq!((rows[1].seconds, rows[1].resumed), (Some(11), true));
        // A revived loop's start moved forward: the log's first line is earlier.
        let mut report = LoopReport::for_tests("l");
        report.started_at = Some("2026-12-01T10:59:58Z".into());
        assert_eq!(
            first_start(&report, &log).as_deref(),
            Some("2026-12-01T10:00:02Z")
        );
    }

    #[test]
    fn a_field_of_an_unexpected_type_costs_only_that_figure() {
        let log = vec![
            json!({"time": 5, "decision": "block", "iteration": "one", "tokens": -3,
                              "cost_usd": "a lot", "verification": {"passed": "yes"}}),
        ];
        let rows = iterations(&log, None);
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!(
            (row.iteration, row.tokens_total, row.cost_total),
            (0, None, None)
        );
        assert_eq!((row.seconds, row.check.clone()), (None, None));
    }

    #[test]
    fn a_receipt_object_keeps_its_keys_in_order() {
        let fields = receipt_fields(&json!({"b": "two", "a": 1}));
        assert_eq!(
            fields,
            vec![("b".into(), "two".into()), ("a".into(), "1".into())]
        );
    }

    #[test]
    fn each_iteration_costs_what_the_running_total_grew_by() {
        // Three iterations of $0.05: the log carries the running total.
        let log = vec![
            json!({"decision": "block", "iteration": 1, "cost_usd": 0.05, "why": "x"}),
            json!({"decision": "block", "iteration": 2, "cost_usd": 0.1, "why": "x"}),
            json!({"decision": "end", "iteration": 3, "cost_usd": 0.15, "why": "x",
                   "check": {"passed": false, "status": "exit 1", "failures": 2}}),
        ];
        let rows = iterations(&log, None);
        let each = costs_per_iteration(&rows);
        assert_eq!(each, vec![Some(Money(50_000)); 3]);
        let view = loop_view(&ralph_control::LoopReport::for_tests("l"), &log);
        assert_eq!(
            view.cost_usd,
            Some(Money(150_000)),
            "the last total, not 0.30"
        );
        let check = rows[2].check.clone().unwrap();
        assert_eq!(
            (check.passed, check.failures),
            (false, Some(2)),
            "--check is read"
        );
    }
}
