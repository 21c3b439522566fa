//! A [`Board`] drawn into a ratatui frame: the table of loops, the selected one's detail,
//! and a line for the keys or the text being typed. Pure: the same board draws the same
//! frame (the tests compare whole screens on ratatui's `TestBackend`).

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row as TableRow, Table, TableState, Wrap};

use crate::board::{Board, Detail, Mode};

/// The keys, as the bottom line shows them while browsing.
pub const KEYS: &str =
    "↑↓ select · s say · p pause/resume · + add iterations · c cancel · r report · q quit";

/// Draws `board` over the whole frame.
pub fn draw(frame: &mut Frame<'_>, board: &Board) {
    let [title, table, detail, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(table_height(board)),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(
        Paragraph::new(format!("ralph watch · {}", board.title))
            .style(Style::default().add_modifier(Modifier::BOLD)),
        title,
    );
    draw_table(frame, board, table);
    let empty = || {
        vec![Line::from(
            "No loop here yet: arm one with ralph start or ralph run.",
        )]
    };
    let text = board.selected_detail().map_or_else(empty, detail_lines);
    let name = board
        .selected_row()
        .map_or(String::new(), |r| format!(" {} ", r.title));
    frame.render_widget(
        Paragraph::new(text)
            .wrap(Wrap { trim: false })
            .block(Block::default().borders(Borders::TOP).title(name)),
        detail,
    );
    frame.render_widget(Paragraph::new(bottom_line(board)), bottom);
}

/// The table's height: a header, its rows, at most half the screen's worth.
fn table_height(board: &Board) -> u16 {
    u16::try_from(board.rows.len().clamp(1, 12) + 1).unwrap_or(13)
}

fn draw_table(frame: &mut Frame<'_>, board: &Board, area: Rect) {
    let header = TableRow::new([
        "loop",
        "driver",
        "iter",
        "state",
        "spend",
        "in it",
        "last decision",
    ])
    .style(Style::default().add_modifier(Modifier::UNDERLINED));
    let rows = board.rows.iter().map(|r| {
        TableRow::new(vec![
            Cell::from(r.title.clone()),
            Cell::from(r.driver.clone()),
            Cell::from(r.iteration.clone()),
            Cell::from(r.state.clone()),
            Cell::from(r.spend.join(" ")),
            Cell::from(r.in_iteration.clone().unwrap_or_default()),
            Cell::from(r.last.clone()),
        ])
    });
    let widths = [
        Constraint::Length(14),
        Constraint::Length(17),
        Constraint::Length(6),
        Constraint::Length(16),
        Constraint::Length(22),
        Constraint::Length(6),
        Constraint::Min(10),
    ];
    let table = Table::new(rows, widths)
        .header(header)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .highlight_symbol("› ");
    let mut state =
        TableState::default().with_selected((!board.rows.is_empty()).then_some(board.selected));
    frame.render_stateful_widget(table, area, &mut state);
}

/// The selected loop's detail, section by section.
fn detail_lines(d: &Detail) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    if let Some(q) = &d.question {
        out.push(Line::from(format!(
            "? the agent asks: {q}  (press s to answer)"
        )));
    }
    out.push(Line::from("recent decisions").style(Style::default().add_modifier(Modifier::BOLD)));
    if d.decisions.is_empty() {
        out.push(Line::from("  none yet"));
    }
    out.extend(d.decisions.iter().map(|l| Line::from(format!("  {l}"))));
    if let Some(gate) = &d.gate {
        out.push(Line::from(format!(
            "last check `{}`: {}",
            gate.command, gate.verdict
        )));
        out.extend(gate.tail.iter().map(|l| Line::from(format!("  │ {l}"))));
    }
    for g in &d.pending {
        out.push(Line::from(format!(
            "» guidance for the next iteration: {g}"
        )));
    }
    for g in &d.delivered {
        out.push(Line::from(format!("» guidance delivered in {g}")));
    }
    out
}

fn bottom_line(board: &Board) -> String {
    match &board.mode {
        Mode::Browse if board.message.is_empty() => KEYS.to_owned(),
        Mode::Browse => board.message.clone(),
        Mode::Say(text) => format!("say (Enter sends, Esc drops): {text}▏"),
        Mode::Add(text) => format!("iterations to add (Enter adds, Esc drops): {text}▏"),
        Mode::ConfirmCancel => format!(
            "cancel {}? y ends the loop now, any other key keeps it",
            board.selected_row().map_or("", |r| r.title.as_str())
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::{BoardRow, Gate};
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn screen(board: &Board, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|f| draw(f, board)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        (0..height)
            .map(|y| {
                let line: String = (0..width)
                    .map(|x| buffer[(x, y)].symbol().to_owned())
                    .collect();
                line.trim_end().to_owned()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn sample() -> Board {
        let row = |title: &str, driver: &str, it: &str, state: &str| BoardRow {
            title: title.into(),
            name: title.into(),
            driver: driver.into(),
            iteration: it.into(),
            state: state.into(),
            spend: vec!["tok 12.3k/50.0k".into()],
            in_iteration: Some("2m".into()),
            last: "it 3: block: went on".into(),
            live: true,
            ..BoardRow::default()
        };
        Board {
            title: "/p".into(),
            rows: vec![
                row("docs", "ralph run", "3/10", "active"),
                row("api", "nobody (paused)", "1/5", "asks"),
            ],
            details: vec![
                Detail {
                    decisions: vec!["it 2: block: went on".into(), "it 3: block: went on".into()],
                    gate: Some(Gate {
                        command: "make test".into(),
                        verdict: "failed (exit 2): exit 2".into(),
                        tail: vec!["test a ... FAILED".into()],
                    }),
                    pending: vec!["check auth.rs".into()],
                    delivered: vec!["it 2: use /v2".into()],
                    question: None,
                },
                Detail {
                    question: Some("Postgres or SQLite?".into()),
                    ..Detail::default()
                },
            ],
            selected: 0,
            mode: Mode::Browse,
            message: String::new(),
        }
    }

    #[test]
    fn the_table_and_the_selected_loops_detail() {
        let rule = "─".repeat(114);
        let expected = format!(
            "\
ralph watch · /p
  loop           driver            iter   state            spend                  in it  last decision
› docs           ralph run         3/10   active           tok 12.3k/50.0k        2m     it 3: block: went on
  api            nobody (paused)   1/5    asks             tok 12.3k/50.0k        2m     it 3: block: went on
 docs {rule}
recent decisions
  it 2: block: went on
  it 3: block: went on
last check `make test`: failed (exit 2): exit 2
  │ test a ... FAILED
» guidance for the next iteration: check auth.rs
» guidance delivered in it 2: use /v2

↑↓ select · s say · p pause/resume · + add iterations · c cancel · r report · q quit"
        );
        let got = screen(&sample(), 120, 14);
        assert_eq!(got, expected, "\n{got}");
    }

    #[test]
    fn a_question_and_the_modes_show_on_the_screen() {
        let mut board = sample();
        board.select_next();
        let got = screen(&board, 120, 10);
        assert!(got.contains("› api"), "\n{got}");
        assert!(
            got.contains("? the agent asks: Postgres or SQLite?  (press s to answer)"),
            "\n{got}"
        );
        board.mode = Mode::Say("use SQLite".into());
        assert!(screen(&board, 120, 10).ends_with("say (Enter sends, Esc drops): use SQLite▏"));
        board.mode = Mode::ConfirmCancel;
        assert!(
            screen(&board, 120, 10)
                .ends_with("cancel api? y ends the loop now, any other key keeps it")
        );
    }

    #[test]
    fn an_empty_board_says_how_to_start() {
        let got = screen(&Board::default(), 80, 8);
        assert!(got.contains("No loop here yet"), "\n{got}");
    }
}
