//! Where `say!` lines go: stdout, or, while a command runs inside the UserPromptSubmit hook
//! (`prompt.rs`), a buffer that becomes the hook's answer, so the user reads exactly what
//! the command prints in a terminal.

use std::cell::RefCell;
use std::io::Write as _;

thread_local! {
    static BUFFER: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Prints one line (already escaped by `say!`), or keeps it when output is being captured.
pub(crate) fn emit(line: &str) {
    let kept = BUFFER.with(|b| match b.borrow_mut().as_mut() {
        Some(buffer) => {
            buffer.push_str(line);
            buffer.push('\n');
            true
        }
        None => false,
    });
    if !kept {
        let _ = writeln!(std::io::stdout(), "{line}");
    }
}

/// Runs `command` with its `say!` lines kept, and returns its result with them.
pub(super) fn captured<T>(command: impl FnOnce() -> T) -> (T, String) {
    BUFFER.with(|b| *b.borrow_mut() = Some(String::new()));
    let result = command();
    let text = BUFFER.with(|b| b.borrow_mut().take()).unwrap_or_default();
    (result, text)
}

#[cfg(test)]
mod tests {
    #[test]
    fn lines_are_kept_only_while_captured() {
        let ((), text) = super::captured(|| {
            super::emit("one");
            super::emit("two");
        });
        assert_eq!(text, "one\ntwo\n");
        let ((), again) = super::captured(|| ());
        assert_eq!(again, "", "nothing left over from the last capture");
    }
}
