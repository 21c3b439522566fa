//! `ralph watch`: the terminal and the keys around ralph-watch's board. The screen is
//! built again when a record changed (a stamp of a few `stat` calls every
//! [`LOOK_EVERY`]) and drawn again each second for the clocks; each key calls the code
//! the CLI command calls (`ralph say`, `pause`/`resume`, `resume --add-iterations`,
//! `cancel`, `report`), with the same rules. Quitting leaves every loop as it is.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::terminal::{self, EnterAlternateScreen, LeaveAlternateScreen};
use ralph_control::arguments::Targets;
use ralph_control::revive::{self, Raise};
use ralph_state::time::Timestamp;
use ralph_watch::board::{Board, BoardRow};
use ralph_watch::keys::{Action, Asked, Key};
use ralph_watch::records::{Stamp, Watched};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

use super::capture::captured;
use super::loops;
use crate::exit::{CmdResult, EdgeError, Failure};
use ralph_cli::{SayArgs, WatchArgs};

/// How often the records are looked at (a stamp of `stat` calls, no read).
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// How often the screen is drawn again with nothing changed (the clocks move).
const CLOCK_EVERY: Duration = Duration::from_secs(1);

pub(super) fn watch(args: WatchArgs) -> CmdResult {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Failure::usage(
            "ralph watch draws on a terminal, and this is not one; for scripts and pipes, `ralph status --json` gives the same records",
        ));
    }
    let watched = Watched {
        project: crate::env::project(),
        registry: crate::env::registry(),
        name: args.name,
    };
    let title = watched.project.root.display().to_string();
    let mut screen = Screen::open().map_err(terminal_failure)?;
    let result = run(&mut screen, &watched, title);
    drop(screen);
    result
}

fn terminal_failure(e: std::io::Error) -> Failure {
    EdgeError::Terminal(e).into()
}

/// The terminal in raw mode on the alternate screen, put back when dropped.
struct Screen {
    terminal: Terminal<CrosstermBackend<std::io::Stdout>>,
}

impl Screen {
    fn open() -> std::io::Result<Self> {
        terminal::enable_raw_mode()?;
        crossterm::execute!(std::io::stdout(), EnterAlternateScreen)?;
        let mut terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
        terminal.hide_cursor()?;
        terminal.clear()?;
        Ok(Self { terminal })
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = terminal::disable_raw_mode();
        let _ = crossterm::execute!(std::io::stdout(), LeaveAlternateScreen);
        let _ = self.terminal.show_cursor();
    }
}

/// The loop of the screen: look, build, draw, read a key.
fn run(screen: &mut Screen, watched: &Watched, title: String) -> CmdResult {
    let mut board = Board::default();
    let mut sources = Vec::new();
    let mut stamp: Option<Stamp> = None;
    let mut drawn_at: Option<Instant> = None;
    let mut dirty = true;
    loop {
        let now_stamp = watched.stamp();
        if stamp.as_ref() != Some(&now_stamp) || dirty {
            sources = watched.sources(Timestamp::now());
            stamp = Some(now_stamp);
            drawn_at = None;
        }
        if drawn_at.is_none_or(|at| at.elapsed() >= CLOCK_EVERY) {
            // The records read last, at the time now (the clocks move).
            board = Board::build(title.clone(), &sources, Timestamp::now(), &board);
            screen
                .terminal
                .draw(|f| ralph_watch::draw::draw(f, &board))
                .map_err(terminal_failure)?;
            drawn_at = Some(Instant::now());
        }
        dirty = false;
        if !event::poll(LOOK_EVERY).map_err(terminal_failure)? {
            continue;
        }
        match event::read().map_err(terminal_failure)? {
            Event::Key(key) if key.kind == KeyEventKind::Press => {
                match board_key(key).map_or(Asked::Nothing, |k| board.on_key(k)) {
                    Asked::Quit => return Ok(()),
                    Asked::Run(action) => board.message = act(&board, watched, action),
                    Asked::Nothing => {}
                }
                dirty = true;
            }
            // Drawn again at once to the new size.
            Event::Resize(..) => dirty = true,
            _ => {}
        }
    }
}

/// The terminal's key as the board reads it; `None`: a key the board has no use for.
fn board_key(key: KeyEvent) -> Option<Key> {
    Some(match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Key::Interrupt,
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        _ => return None,
    })
}

/// Runs `action` on the selected loop through the CLI command's code; what it printed
/// (or its error), on one line.
fn act(board: &Board, watched: &Watched, action: Action) -> String {
    let Some(row) = board.selected_row() else {
        return "No loop selected.".into();
    };
    let Some(project) = watched.project_of(row.story.as_deref()) else {
        return format!("The worktree of {} is gone.", row.title);
    };
    let (result, output) = captured(|| perform(row, &project, action));
    let mut text = output.lines().collect::<Vec<_>>().join(" · ");
    if let Err(failure) = result {
        text = format!("{text} ralph: {}", failure.message)
            .trim()
            .to_owned();
    }
    text
}

fn perform(
    row: &BoardRow,
    project: &ralph_state::storage::store::Project,
    action: Action,
) -> Result<(), Failure> {
    let selection = Targets {
        name: Some(row.name.clone()),
        all: false,
    };
    // Whoever runs the CLI command: the session of the agent running it, if any.
    let session = crate::env::session_from_env();
    match action {
        Action::Say(text) => {
            let args = SayArgs {
                text,
                name: Some(row.name.clone()),
                story: None,
                all: false,
                gate: false,
            };
            for line in super::say::say_as(project, &args, "ralph watch", session.as_deref())? {
                say!("{line}");
            }
        }
        Action::Toggle => {
            let resume = row.state == "paused" || row.state == "asks";
            loops::pause_or_resume_in(project, &selection, resume, session)?;
        }
        Action::Add(text) => {
            let iterations = text.parse().map_err(|_| {
                Failure::usage("type how many iterations to add (a whole number), then Enter")
            })?;
            let raise = Raise {
                iterations: Some(iterations),
                ..Raise::default()
            };
            // The key is the user's answer, on a terminal that must be the user's
            // as `ralph resume --add-*`'s is (`loops::users_terminal`): an agent can
            // run `ralph watch` in a pseudo-terminal of its own too.
            let started = || {
                crate::env::registry()
                    .and_then(|r| revive::peek(project, &r, Some(&row.name)))
                    .and_then(|(_, state)| state.started_at)
            };
            loops::users_terminal(
                &format!(
                    "Raise the bounds of loop `{}`",
                    ralph_fs::display::line(&row.name)
                ),
                "raise a loop's bounds: type `/ralph-resume …` in the session, or here in a terminal of yours that was open before the loop started",
                started,
            )?;
            // As `ralph resume --add-iterations`: the loop keeps its owner.
            loops::revive_in(project, Some(&row.name), &raise, None)?;
        }
        Action::Cancel => loops::cancel_in(project, &selection, session)?,
        Action::Report => {
            let selection = ralph_report::ReportScope::Name(row.name.clone());
            let path = super::report::write_report(project, &selection, None)?;
            say!("Report written to {}", path.display());
        }
    }
    Ok(())
}
