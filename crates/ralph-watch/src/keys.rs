//! What a key does on the board, pure: a move or a mode on the [`Board`], an [`Action`] for
//! the binary to run through the CLI's own code, or quitting. The binary turns the
//! terminal's key events into [`Key`]s and runs what comes back.

use crate::board::{Board, Mode};

/// A key as the board reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    Enter,
    Esc,
    Backspace,
    Char(char),
    /// Ctrl-C: quits in every mode.
    Interrupt,
}

/// What the selected loop is asked to do, as the CLI command would do it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `ralph say` the text typed.
    Say(String),
    /// `ralph pause`, or `ralph resume` when paused or asking.
    Toggle,
    /// `ralph resume --add-iterations` the number typed.
    Add(String),
    Cancel,
    Report,
}

/// What a key asks of the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    Nothing,
    Quit,
    Run(Action),
}

impl Board {
    /// One key: the board's new mode and selection, and what the binary is to do.
    pub fn on_key(&mut self, key: Key) -> Asked {
        if key == Key::Interrupt || (self.mode == Mode::Browse && key == Key::Char('q')) {
            return Asked::Quit;
        }
        let (mode, asked) = match (std::mem::take(&mut self.mode), key) {
            (Mode::Browse, key) => {
                self.message.clear();
                self.browse(key)
            }
            (Mode::Say(text), Key::Enter) => (Mode::Browse, Asked::Run(Action::Say(text))),
            (Mode::Add(text), Key::Enter) => (Mode::Browse, Asked::Run(Action::Add(text))),
            (Mode::Say(_) | Mode::Add(_), Key::Esc) => (Mode::Browse, Asked::Nothing),
            (Mode::Say(mut text), Key::Backspace) => {
                text.pop();
                (Mode::Say(text), Asked::Nothing)
            }
            (Mode::Add(mut text), Key::Backspace) => {
                text.pop();
                (Mode::Add(text), Asked::Nothing)
            }
            (Mode::Say(mut text), Key::Char(c)) => {
                text.push(c);
                (Mode::Say(text), Asked::Nothing)
            }
            (Mode::Add(mut text), Key::Char(c)) if c.is_ascii_digit() => {
                text.push(c);
                (Mode::Add(text), Asked::Nothing)
            }
            (Mode::ConfirmCancel, Key::Char('y')) => (Mode::Browse, Asked::Run(Action::Cancel)),
            (Mode::ConfirmCancel, _) => {
                self.message = "Kept: nothing was cancelled.".into();
                (Mode::Browse, Asked::Nothing)
            }
            (mode, _) => (mode, Asked::Nothing),
        };
        self.mode = mode;
        asked
    }

    fn browse(&mut self, key: Key) -> (Mode, Asked) {
        let selected = self.selected_row();
        let mode = match key {
            Key::Char('s') if selected.is_some() => Mode::Say(String::new()),
            Key::Char('+') if selected.is_some() => Mode::Add(String::new()),
            Key::Char('c') if selected.is_some_and(|r| r.live) => Mode::ConfirmCancel,
            _ => Mode::Browse,
        };
        let asked = match key {
            Key::Down | Key::Char('j') => {
                self.select_next();
                Asked::Nothing
            }
            Key::Up | Key::Char('k') => {
                self.select_previous();
                Asked::Nothing
            }
            Key::Char('p') => Asked::Run(Action::Toggle),
            Key::Char('r') => Asked::Run(Action::Report),
            _ => Asked::Nothing,
        };
        (mode, asked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::BoardRow;

    fn board_with_a_live_loop() -> Board {
        Board {
            rows: vec![BoardRow {
                name: "l".into(),
                live: true,
                ..BoardRow::default()
            }],
            ..Board::default()
        }
    }

    fn keys(board: &mut Board, keys: &[Key]) -> Vec<Asked> {
        keys.iter().map(|k| board.on_key(*k)).collect()
    }

    #[test]
    fn typed_guidance_is_said_on_enter_and_esc_drops_it() {
        let mut board = board_with_a_live_loop();
        let asked = keys(
            &mut board,
            &[
                Key::Char('s'),
                Key::Char('h'),
                Key::Char('i'),
                Key::Backspace,
                Key::Char('o'),
                Key::Enter,
            ],
        );
        assert_eq!(asked.last(), Some(&Asked::Run(Action::Say("ho".into()))));
        assert_eq!(board.mode, Mode::Browse);
        keys(&mut board, &[Key::Char('s'), Key::Char('x'), Key::Esc]);
        assert_eq!(board.mode, Mode::Browse);
    }

    #[test]
    fn only_digits_are_added_and_cancel_needs_a_yes() {
        let mut board = board_with_a_live_loop();
        let asked = keys(
            &mut board,
            &[Key::Char('+'), Key::Char('x'), Key::Char('5'), Key::Enter],
        );
        assert_eq!(asked.last(), Some(&Asked::Run(Action::Add("5".into()))));
        let asked = keys(&mut board, &[Key::Char('c'), Key::Char('n')]);
        assert_eq!(asked.last(), Some(&Asked::Nothing));
        assert_eq!(board.message, "Kept: nothing was cancelled.");
        let asked = keys(&mut board, &[Key::Char('c'), Key::Char('y')]);
        assert_eq!(asked.last(), Some(&Asked::Run(Action::Cancel)));
    }

    #[test]
    fn q_quits_only_when_browsing_and_ctrl_c_always() {
        let mut board = board_with_a_live_loop();
        keys(&mut board, &[Key::Char('s')]);
        assert_eq!(board.on_key(Key::Char('q')), Asked::Nothing);
        assert_eq!(board.mode, Mode::Say("q".into()));
        assert_eq!(board.on_key(Key::Interrupt), Asked::Quit);
        let mut board = Board::default();
        assert_eq!(board.on_key(Key::Char('q')), Asked::Quit);
        // Nothing selected: no mode that needs a loop.
        assert_eq!(board.on_key(Key::Char('s')), Asked::Nothing);
        assert_eq!(board.mode, Mode::Browse);
    }
}
