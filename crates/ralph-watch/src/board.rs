//! What `ralph watch` shows, as plain data: each loop (or `--parallel` story) as a
//! [`BoardRow`], and for the selected one its [`Detail`], built from the reports `ralph status`
//! reads (`control::listing::LoopReport`) and the loop's mailbox. Pure: the records come
//! in, the board comes out; [`crate::draw`] turns it into a frame.

use ralph_control::LoopReport;
use ralph_state::fields::outcome::LoopStatus;
use ralph_state::time::{Timestamp, format_duration};
use serde_json::Value;

/// One loop as a row of the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BoardRow {
    /// The loop's name, or `story US-004` for a `--parallel` story.
    pub title: String,
    /// The `--parallel` story's id, when this row is one.
    pub story: Option<String>,
    /// The loop's name in its project (a story's loop name).
    pub name: String,
    /// Who drives it: `session 1a2b3c4d`, `ralph run`, `nobody`.
    pub driver: String,
    /// `3/10`, `3/∞`.
    pub iteration: String,
    /// `active`, `paused`, `ended: completed`, `asks`.
    pub state: String,
    /// Spend against each budget the loop has (`tokens 12k/50k`, `$0.40/$2.00`, `time 5m/2h`).
    pub spend: Vec<String>,
    /// Time since the last decision (this iteration's time so far), live loops only.
    pub in_iteration: Option<String>,
    /// The last decision and why.
    pub last: String,
    /// Whether the loop is live (not ended): the keys act on it.
    pub live: bool,
}

/// The selected loop's detail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Detail {
    /// The last decisions, oldest first, one line each.
    pub decisions: Vec<String>,
    /// The last check or gate: `command`, its verdict with the exit code, its last lines.
    pub gate: Option<Gate>,
    /// The question the loop is paused on.
    pub question: Option<String>,
    /// Guidance queued for the next iteration.
    pub pending: Vec<String>,
    /// Guidance delivered, with the iteration that carried it (last few).
    pub delivered: Vec<String>,
}

/// A check's or gate's last result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gate {
    pub command: String,
    pub verdict: String,
    pub tail: Vec<String>,
}

/// One loop's records, as the shell read them.
#[derive(Debug, Clone)]
pub struct RecordsRead {
    pub report: LoopReport,
    /// The `--parallel` story it belongs to.
    pub story: Option<String>,
}

/// The whole screen's data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Board {
    /// What is watched: `project /path` or `ralph run --parallel (8 stories)`.
    pub title: String,
    pub rows: Vec<BoardRow>,
    pub details: Vec<Detail>,
    pub selected: usize,
    pub mode: Mode,
    /// The last action's answer (what the CLI command printed), one line.
    pub message: String,
}

/// What the keys do now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Browse,
    /// `s`: guidance being typed.
    Say(String),
    /// `+`: iterations to add, being typed.
    Add(String),
    /// `c`: waiting for `y` to cancel the selected loop.
    ConfirmCancel,
}

/// The decisions shown for the selected loop.
const DECISIONS_SHOWN: usize = 8;
/// The delivered guidance shown for the selected loop.
const DELIVERED_SHOWN: usize = 3;

impl Board {
    /// The board for `sources`, at `now`, keeping the selection and mode of `previous`.
    pub fn build(
        title: String,
        sources: &[RecordsRead],
        now: Timestamp,
        previous: &Board,
    ) -> Board {
        let rows: Vec<BoardRow> = sources.iter().map(|s| row(s, now)).collect();
        let details = sources.iter().map(|s| detail(&s.report)).collect();
        // The selection follows the loop it was on, else stays in range.
        let selected = previous
            .selected_row()
            .and_then(|old| {
                rows.iter()
                    .position(|r| r.name == old.name && r.story == old.story)
            })
            .unwrap_or(previous.selected.min(rows.len().saturating_sub(1)));
        Board {
            title,
            rows,
            details,
            selected,
            mode: previous.mode.clone(),
            message: previous.message.clone(),
        }
    }

    pub fn selected_row(&self) -> Option<&BoardRow> {
        self.rows.get(self.selected)
    }

    pub(crate) fn selected_detail(&self) -> Option<&Detail> {
        self.details.get(self.selected)
    }

    pub(crate) fn select_next(&mut self) {
        if self.selected + 1 < self.rows.len() {
            self.selected += 1;
        }
    }

    pub(crate) fn select_previous(&mut self) {
        self.selected = self.selected.saturating_sub(1);
    }
}

fn row(source: &RecordsRead, now: Timestamp) -> BoardRow {
    let r = &source.report;
    let live = matches!(r.state, LoopStatus::Active | LoopStatus::Paused);
    let last = r.recent.last();
    BoardRow {
        title: source
            .story
            .as_ref()
            .map_or_else(|| r.name.clone(), |id| format!("story {id}")),
        story: source.story.clone(),
        name: r.name.clone(),
        driver: driver(r),
        iteration: match (r.iteration, &r.max_iterations) {
            (Some(i), Some(limit)) => format!("{i}/{limit}"),
            (Some(i), None) => i.to_string(),
            _ => "-".into(),
        },
        state: state(r),
        spend: spend(r),
        in_iteration: live
            .then(|| last.and_then(|l| text(l, "time")))
            .flatten()
            .and_then(|t| Timestamp::parse_rfc3339(&t))
            .or_else(|| {
                live.then(|| r.started_at.as_deref().and_then(Timestamp::parse_rfc3339))
                    .flatten()
            })
            .map(|since| format_duration(now.secs_since(since))),
        last: last.map(decision_words).unwrap_or_default(),
        live,
    }
}

/// Who drives the loop, in a word or two.
fn driver(r: &LoopReport) -> String {
    if matches!(
        r.state,
        LoopStatus::Ended | LoopStatus::Corrupt | LoopStatus::Unreadable
    ) {
        return "-".into();
    }
    match r.session_id.as_deref() {
        _ if r.driver_gone => "nobody (run gone)".into(),
        _ if r.state == LoopStatus::Paused => "nobody (paused)".into(),
        Some(s) if s.starts_with("ralph-run-") => "ralph run".into(),
        Some(s) if !s.is_empty() => {
            format!("session {}", s.chars().take(8).collect::<String>())
        }
        _ => "nobody".into(),
    }
}

fn state(r: &LoopReport) -> String {
    if r.question.is_some() && r.state == LoopStatus::Paused {
        return "asks".into();
    }
    match (&r.state, &r.outcome) {
        (LoopStatus::Ended, Some(outcome)) => format!("ended: {outcome}"),
        (status, _) => status.as_str().into(),
    }
}

/// Spend against each budget the loop has; tokens alone when it has none.
fn spend(r: &LoopReport) -> Vec<String> {
    let mut out = Vec::new();
    let guards = r.guard_settings.as_ref();
    let tokens = r.tokens_used.unwrap_or(0);
    match guards.and_then(|g| g.max_tokens) {
        Some(limit) => out.push(format!("tok {}/{}", short(tokens), short(limit))),
        None if tokens > 0 => out.push(format!("tok {}", short(tokens))),
        None => {}
    }
    if let Some(limit) = guards.and_then(|g| g.max_cost_usd) {
        let spent = r
            .guard_counts
            .as_ref()
            .map(|c| c.cost_usd)
            .unwrap_or_default();
        out.push(format!("{}/{}", spent.dollars(), limit.dollars()));
    }
    if let Some(limit) = guards.and_then(|g| g.max_duration_secs) {
        out.push(format!(
            "time {}/{}",
            format_duration(r.elapsed_secs.unwrap_or(0)),
            format_duration(limit)
        ));
    }
    out
}

/// A count in a few characters: `950`, `12.3k`, `4.1M`.
fn short(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

fn text(line: &Value, field: &str) -> Option<String> {
    line.get(field)?.as_str().map(str::to_owned)
}

/// A log line as `iteration 3: block — no promise yet`.
fn decision_words(line: &Value) -> String {
    let decision = text(line, "decision").unwrap_or_default();
    let why = text(line, "why").unwrap_or_default();
    let at = line
        .get("iteration")
        .and_then(Value::as_u64)
        .map(|i| format!("it {i}: "))
        .unwrap_or_default();
    let why = ralph_fs::display::line(why.lines().next().unwrap_or("")).into_owned();
    if why.is_empty() {
        format!("{at}{decision}")
    } else {
        format!("{at}{decision}: {why}")
    }
}

fn detail(r: &LoopReport) -> Detail {
    let decisions = r.recent[r.recent.len().saturating_sub(DECISIONS_SHOWN)..]
        .iter()
        .map(decision_words)
        .collect();
    let guards = r.guard_settings.as_ref();
    let gate = r.recent.iter().rev().find_map(|line| {
        let (entry, command) = match (line.get("verification"), line.get("check")) {
            (Some(v), _) => (v, guards.and_then(|g| g.verify.clone())),
            (None, Some(c)) => (c, guards.and_then(|g| g.check.clone())),
            (None, None) => return None,
        };
        let passed = entry.get("passed").and_then(Value::as_bool) == Some(true);
        let status = text(entry, "status").unwrap_or_default();
        let code = entry
            .get("exit_code")
            .and_then(Value::as_i64)
            .map(|c| format!(" (exit {c})"))
            .unwrap_or_default();
        Some(Gate {
            command: ralph_fs::display::line(&command.unwrap_or_default()).into_owned(),
            verdict: format!(
                "{}{code}: {}",
                if passed { "passed" } else { "failed" },
                ralph_fs::display::line(&status)
            ),
            tail: text(entry, "tail")
                .unwrap_or_default()
                .lines()
                .map(|l| ralph_fs::display::line(l).into_owned())
                .collect(),
        })
    });
    let delivered = &r.guidance_delivered;
    Detail {
        decisions,
        gate,
        question: r
            .question
            .as_deref()
            .map(|q| ralph_fs::display::line(q).into_owned()),
        pending: r
            .guidance_pending
            .iter()
            .map(|g| ralph_fs::display::line(g).into_owned())
            .collect(),
        delivered: delivered[delivered.len().saturating_sub(DELIVERED_SHOWN)..]
            .iter()
            .map(|d| {
                format!(
                    "it {}: {}{}",
                    d.iteration,
                    ralph_fs::display::line(&d.text),
                    if d.gate { " (gate)" } else { "" }
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_control::test_support::project;
    use ralph_control::{self as control, ArmRequest, guidance};

    /// A loop armed for a `ralph run` (whose process is gone), with guidance waiting, read back as `ralph status` reads it.
    #[test]
    fn a_row_and_its_detail_come_from_the_records() {
        let (_tmp, project, registry) = project();
        let request = ArmRequest {
            name: "docs".into(),
            prompt: "Write the guide".into(),
            max_iterations: 10.into(),
            session_id: Some("ralph-run-1234-5678".into()),
            ..ArmRequest::default()
        };
        control::arm(&project, &registry, &request, Timestamp(0)).unwrap();
        let say = guidance::Say {
            text: "use /v2",
            name: Some("docs"),
            all: false,
            gate: false,
            by: "test",
            session: None,
        };
        guidance::say(&project, Some(&registry), say, Timestamp(1)).unwrap();
        let reports = control::report(&project, Some(&registry), 0, 10, Timestamp(90)).unwrap();
        let sources: Vec<RecordsRead> = reports
            .into_iter()
            .map(|report| RecordsRead {
                report,
                story: Some("US-001".into()),
            })
            .collect();
        let board = Board::build("p".into(), &sources, Timestamp(90), &Board::default());
        let row = board.selected_row().unwrap();
        assert_eq!(
            (
                row.title.as_str(),
                row.driver.as_str(),
                row.iteration.as_str(),
                row.state.as_str()
            ),
            // No process 1234 started at 5678 runs: the loop's run is gone
            // (a process's start is read on Unix; elsewhere a run is taken as
            // alive).
            (
                "story US-001",
                if cfg!(unix) {
                    "nobody (run gone)"
                } else {
                    "ralph run"
                },
                "1/10",
                "active"
            )
        );
        assert!(row.live);
        assert_eq!(board.selected_detail().unwrap().pending, ["use /v2"]);
    }

    #[test]
    fn the_selection_follows_its_loop() {
        let row = |name: &str| BoardRow {
            name: name.into(),
            ..BoardRow::default()
        };
        let mut old = Board {
            rows: vec![row("a"), row("b")],
            ..Board::default()
        };
        old.select_next();
        let kept = Board {
            rows: vec![row("new"), row("a"), row("b")],
            ..Board::default()
        };
        let selected = kept
            .rows
            .iter()
            .position(|r| Some(r.name.as_str()) == old.selected_row().map(|o| o.name.as_str()));
        assert_eq!(selected, Some(2));
        assert_eq!(short(950), "950");
        assert_eq!(short(12_345), "12.3k");
        assert_eq!(short(4_100_000), "4.1M");
    }
}
