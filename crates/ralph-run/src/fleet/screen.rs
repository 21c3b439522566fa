//! What `ralph run --parallel`, `ralph plan` print: the fleet's events as
//! lines that stay and, on a terminal, a live block of the running loops
//! redrawn under them; the summary table with the run's [`RunExit`]; the
//! open stories. Text only: the binary writes it and maps the exit.

use crate::fleet;
use crate::fleet::driver::{FleetEvent, Planned, Running, StoryPlan, Summary};
use crate::screen::RunExit;
use ralph_state::time::format_duration;

/// One thing to write to the terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Paint {
    /// A line, printed as every line is (control characters escaped).
    Line(String),
    /// ralph's own cursor moves, with escaped text: written as it is.
    Raw(String),
}

/// The fleet's terminal: on a terminal, a live block of the running loops
/// under the lines that stay; otherwise every line, plain.
#[derive(Debug)]
pub struct FleetScreen {
    live: bool,
    /// Lines on screen in the live block, to redraw over.
    drawn: usize,
}

impl FleetScreen {
    /// `live`: stdout is a terminal.
    pub fn new(live: bool) -> Self {
        Self { live, drawn: 0 }
    }

    /// What to write for one event of the fleet.
    pub fn show(&mut self, event: &FleetEvent) -> Vec<Paint> {
        let mut out = Vec::new();
        match event {
            FleetEvent::Said(line) => {
                if self.live {
                    out.extend(self.clear());
                }
                out.push(Paint::Line(line.clone()));
            }
            FleetEvent::Output { id, line } => {
                if !self.live {
                    out.push(Paint::Line(format!("[{id}] {line}")));
                }
            }
            FleetEvent::Running(running) => out.extend(self.redraw(running)),
        }
        out
    }

    /// Up over the live block, and erased.
    fn clear(&mut self) -> Option<Paint> {
        if self.drawn == 0 {
            return None;
        }
        let up = format!("\x1b[{}A\x1b[J", self.drawn);
        self.drawn = 0;
        Some(Paint::Raw(up))
    }

    /// The live block: one line per running loop (terminal only).
    fn redraw(&mut self, running: &[Running]) -> Option<Paint> {
        if !self.live {
            return None;
        }
        let mut block = match self.clear() {
            Some(Paint::Raw(up)) => up,
            _ => String::new(),
        };
        for slot in running {
            let last: String = slot.last.chars().take(60).collect();
            block.push_str(&format!(
                "\x1b[2K⠿ {} · {} · {}\n",
                slot.id,
                format_duration(slot.seconds),
                ralph_fs::display::line(&last)
            ));
        }
        self.drawn = running.len();
        Some(Paint::Raw(block))
    }
}

/// The summary table and the notes, and how the run exits: whether every
/// story came home, or Ctrl-C stopped it.
pub fn summary(summary: &Summary) -> (Vec<String>, RunExit) {
    if summary.rows.is_empty() {
        let nothing = "Nothing open to run: every story passes, or came home earlier.";
        return (vec![nothing.to_owned()], RunExit::Success);
    }
    let mut lines = vec![String::new(), fleet::table(&summary.rows)];
    lines.extend(summary.notes.iter().cloned());
    if summary.interrupted {
        lines.push("Run the same command again to resume what was left.".to_owned());
        return (lines, RunExit::Interrupted);
    }
    let exit = if fleet::all_home(&summary.rows) {
        RunExit::Success
    } else {
        RunExit::Ended
    };
    (lines, exit)
}

/// `ralph plan`: the stories still to do, one a line with how each stands,
/// under the wave it runs in (and those waiting for a person apart).
pub fn plan(plan: &StoryPlan) -> Vec<String> {
    if plan.waves.is_empty() && plan.held.is_empty() {
        return vec![format!("No open stories in {}.", fleet::PRD)];
    }
    let line = |p: &Planned| {
        let after = if p.story.depends_on.is_empty() {
            String::new()
        } else {
            format!("  (after {})", p.story.depends_on.join(", "))
        };
        format!(
            "  {}  {}  {}{after}",
            p.story.id,
            p.state,
            ralph_fs::display::line(&p.story.title)
        )
    };
    let mut out = Vec::new();
    for (i, wave) in plan.waves.iter().enumerate() {
        out.push(match i {
            0 => "Wave 1 (can start now):".to_owned(),
            _ => format!("Wave {} (once wave {i} is merged):", i + 1),
        });
        out.extend(wave.iter().map(line));
    }
    if !plan.held.is_empty() {
        out.push("Waiting for a person (blocked, or after a blocked story):".to_owned());
        out.extend(plan.held.iter().map(line));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::SummaryRow;

    fn running(id: &str, last: &str) -> Running {
        Running {
            id: id.into(),
            seconds: 120,
            last: last.into(),
        }
    }

    #[test]
    fn a_terminal_keeps_a_live_block_under_the_lines_that_stay() {
        let mut screen = FleetScreen::new(true);
        let slots = [running("US-1", "working\u{1b}"), running("US-2", "")];
        assert_eq!(
            screen.show(&FleetEvent::Running(&slots)),
            [Paint::Raw(
                "\x1b[2K⠿ US-1 · 2m · working\\x1b\n\x1b[2K⠿ US-2 · 2m · \n".into()
            )]
        );
        assert!(
            screen
                .show(&FleetEvent::Output {
                    id: "US-1",
                    line: "x"
                })
                .is_empty()
        );
        assert_eq!(
            screen.show(&FleetEvent::Said("merged".into())),
            [
                Paint::Raw("\x1b[2A\x1b[J".into()),
                Paint::Line("merged".into())
            ]
        );
        assert_eq!(
            screen.show(&FleetEvent::Running(&[])),
            [Paint::Raw(String::new())]
        );
    }

    #[test]
    fn elsewhere_every_line_is_plain_and_tagged_with_its_story() {
        let mut screen = FleetScreen::new(false);
        assert!(
            screen
                .show(&FleetEvent::Running(&[running("US-1", "x")]))
                .is_empty()
        );
        assert_eq!(
            screen.show(&FleetEvent::Output {
                id: "US-1",
                line: "x"
            }),
            [Paint::Line("[US-1] x".into())]
        );
        assert_eq!(
            screen.show(&FleetEvent::Said("merged".into())),
            [Paint::Line("merged".into())]
        );
    }

    #[test]
    fn the_summary_exits_by_whether_every_story_came_home() {
        let row = |outcome: &str| SummaryRow {
            story: "US-1".into(),
            outcome: outcome.into(),
            iterations: 1,
            seconds: 1,
            tokens: 0,
            branch: "ralph/US-1".into(),
            cost: ralph_state::money::Money(0),
        };
        let of = |rows: Vec<SummaryRow>, interrupted| Summary {
            rows,
            notes: vec!["a note".into()],
            interrupted,
        };
        let (lines, exit) = summary(&of(Vec::new(), false));
        assert_eq!(exit, RunExit::Success);
        assert_eq!(
            lines,
            ["Nothing open to run: every story passes, or came home earlier."]
        );
        let (lines, exit) = summary(&of(vec![row("merged")], false));
        assert_eq!(exit, RunExit::Success);
        assert_eq!(lines[0], "");
        assert_eq!(lines[1], fleet::table(&[row("merged")]));
        assert_eq!(lines[2], "a note");
        assert_eq!(summary(&of(vec![row("failed")], false)).1, RunExit::Ended);
        let (lines, exit) = summary(&of(vec![row("merged")], true));
        assert_eq!(exit, RunExit::Interrupted);
        assert_eq!(
            lines.last().unwrap(),
            "Run the same command again to resume what was left."
        );
    }
}
