//! What a report shows, as plain data: one [`LoopView`] per loop and one
//! [`StoryRow`] per story of a `--parallel` run, built from `ralph status`'s
//! [`LoopReport`] and the decision log's lines. Pure: no file, no clock.
//!
//! A log line is read field by field from its JSON value, never as one
//! typed struct: other writers add fields over time (check results, costs,
//! a receipt), and a field ralph does not know, or one of an unexpected
//! type, must cost the report that one figure, not the whole line.

use serde_json::Value;

use crate::control::LoopReport;
use crate::run::fleet::StoryRecord;
use crate::time::Timestamp;

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
    pub max_iterations: Option<u64>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub elapsed_secs: Option<u64>,
    pub tokens_used: Option<u64>,
    pub max_tokens: Option<u64>,
    /// The sum of the logged `cost_usd` values, when any line has one.
    pub cost_usd: Option<f64>,
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
    /// 0: the breaker is off.
    pub limit: u64,
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
    pub cost_usd: Option<f64>,
    pub check: Option<Check>,
    pub why: String,
}

impl IterationRow {
    /// Tokens this turn added: the running total less the previous one.
    pub fn tokens_added(&self, previous_total: u64) -> Option<u64> {
        self.tokens_total.map(|t| t.saturating_sub(previous_total))
    }
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
pub fn loop_view(report: &LoopReport, log: &[Value]) -> LoopView {
    let iterations = iterations(log, report.started_at.as_deref());
    let costs: Vec<f64> = iterations.iter().filter_map(|i| i.cost_usd).collect();
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
        started_at: report.started_at.clone(),
        ended_at: report.ended_at.clone(),
        elapsed_secs: report.elapsed_secs,
        tokens_used: report.tokens_used,
        max_tokens: report.guard_settings.as_ref().and_then(|g| g.max_tokens),
        cost_usd: (!costs.is_empty()).then(|| costs.iter().sum()),
        breakers: breakers(report),
        iterations,
        receipt: log
            .iter()
            .rev()
            .find_map(|l| l.get("receipt"))
            .map(receipt_fields)
            .unwrap_or_default(),
        error: report.error.clone(),
    }
}

/// The turns of a log: its `block` and `end` lines (a paused stop's `pass`,
/// a pause or a resume are not iterations).
pub fn iterations(log: &[Value], started_at: Option<&str>) -> Vec<IterationRow> {
    let mut previous = started_at.and_then(Timestamp::parse_rfc3339);
    let mut rows = Vec::new();
    for line in log {
        let decision = text(line, "decision").unwrap_or_default();
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
            cost_usd: line
                .get("cost_usd")
                .and_then(Value::as_f64)
                .filter(|c| c.is_finite() && *c >= 0.0),
            check: check(line),
            why: text(line, "why").unwrap_or_default(),
        });
    }
    rows
}

/// The gate's verdict of a line: `verification` as ralph logs it, with a
/// failure count wherever a writer put one.
fn check(line: &Value) -> Option<Check> {
    let v = line.get("verification")?;
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
        push("tokens", r.tokens_used, limit);
    }
    if let Some(limit) = g.max_duration_secs {
        push("seconds", r.elapsed_secs, limit);
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
        assert_eq!(rows[0].seconds, Some(30));
        assert_eq!(rows[1].seconds, Some(90));
        assert_eq!(rows[1].tokens_added(100), Some(150));
        assert_eq!(rows[1].cost_usd, Some(0.25));
        let check = rows[1].check.clone().unwrap();
        assert!(!check.passed);
        assert_eq!(check.failures, Some(3));
        assert_eq!(check.status, "exit 1");
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
            (row.iteration, row.tokens_total, row.cost_usd),
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
}
