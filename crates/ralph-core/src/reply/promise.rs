//! Finding `<promise>…</promise>` in a reply, the way a person would read it.
//!
//! A tag counts only when the agent *says* it, not when it quotes it:
//! - it lies outside fenced code blocks, inline code spans and `>` quotes;
//! - nothing but whitespace follows the closing tag on its line, so a
//!   sentence such as "I will output <promise>DONE</promise> when done"
//!   (the agent repeating its instructions) is not a promise;
//! - bare text equal to the promise is not a promise.
//!
//! The text inside is compared after collapsing whitespace on both sides.

const OPEN: &str = "<promise>";
const CLOSE: &str = "</promise>";

/// Collapses every run of whitespace to one space and trims the ends.
pub fn normalise(text: &str) -> String {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Whether `a` and `b` are equal once normalised, without building either.
pub(crate) fn same_words(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

/// The normalised contents of every tag that counts as a promise, in order.
pub fn spoken_promises(reply: &str) -> Vec<String> {
    let mut found = Vec::new();
    for_each_promise(reply, |inner| {
        found.push(normalise(inner));
        true
    });
    found
}

/// Whether `reply` speaks the promise `expected`.
pub fn speaks(reply: &str, expected: &str) -> bool {
    if expected.split_whitespace().next().is_none() {
        return false;
    }
    let mut spoken = false;
    for_each_promise(reply, |inner| {
        spoken = same_words(inner, expected);
        !spoken
    });
    spoken
}

/// Calls `visit` with the raw text inside each tag that counts as a
/// promise, in order, until it returns `false`.
///
/// Memory stays in proportion to the reply: the reply is read in place, and
/// what is code or quotation is one bit per byte (an eighth of the reply),
/// never a copy of it.
fn for_each_promise(reply: &str, visit: impl FnMut(&str) -> bool) {
    for_each_tag(reply, OPEN, CLOSE, visit);
}

/// The question the agent ends its turn with, said as a promise is said
/// (`<question>…</question>` on its own, outside code and quotes), normalised;
/// the last one when there are several.
pub(crate) fn spoken_question(reply: &str) -> Option<String> {
    let mut found = None;
    for_each_tag(reply, "<question>", "</question>", |inner| {
        let text = normalise(inner);
        if !text.is_empty() {
            found = Some(text);
        }
        true
    });
    found
}

/// [`for_each_promise`] for any pair of tags.
fn for_each_tag(reply: &str, open_tag: &str, close_tag: &str, mut visit: impl FnMut(&str) -> bool) {
    if !reply.contains(close_tag) {
        return;
    }
    let masked = mask_quoted(reply);
    let unmasked_at = |at: usize, len: usize| !masked.any(at..at + len);
    let mut from = 0;
    while let Some(close_at) = reply[from..].find(close_tag).map(|i| i + from) {
        let after = close_at + close_tag.len();
        if !unmasked_at(close_at, close_tag.len()) {
            from = after;
            continue;
        }
        // The tag a close belongs to is the nearest open before it: a stray,
        // unclosed `<promise>` earlier in the reply must not swallow it.
        let mut search_end = close_at;
        let open_at = loop {
            match reply[from..search_end].rfind(open_tag).map(|i| i + from) {
                Some(at) if unmasked_at(at, open_tag.len()) => break Some(at),
                Some(at) => search_end = at,
                None => break None,
            }
        };
        if let Some(open_at) = open_at {
            let inner = open_at + open_tag.len()..close_at;
            let line_end = reply[after..].find('\n').map_or(reply.len(), |i| i + after);
            let rest_of_line = &reply[after..line_end];
            let plain = rest_of_line.trim().is_empty()
                && !masked.any(after..line_end)
                && !masked.any(inner.clone())
                && !reply[inner.clone()].contains(MASK);
            if plain && !visit(&reply[inner]) {
                return;
            }
        }
        from = after;
    }
}

/// Once stood in for code and quotation in a masked copy of the reply; a
/// tag whose text holds it still never counts (the fuzz target checks it).
const MASK: char = '\u{E000}';

/// One bit per byte of the reply: set where the byte is code or quotation.
struct Mask {
    bits: Vec<u64>,
}

impl Mask {
    fn new(len: usize) -> Self {
        Self {
            bits: vec![0; len.div_ceil(64)],
        }
    }

    fn set(&mut self, range: std::ops::Range<usize>) {
        for i in range {
            self.bits[i / 64] |= 1 << (i % 64);
        }
    }

    /// Whether any byte in `range` is masked.
    fn any(&self, range: std::ops::Range<usize>) -> bool {
        range
            .into_iter()
            .any(|i| self.bits[i / 64] & (1 << (i % 64)) != 0)
    }
}

/// Marks code blocks, code spans and quoted lines of `text` (their line
/// breaks stay unmasked, so "rest of the line" still means the same).
fn mask_quoted(text: &str) -> Mask {
    let mut masked = Mask::new(text.len());
    let mut fence: Option<(char, usize)> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let content = line.strip_suffix('\n').unwrap_or(line);
        let whole = start..start + content.len();
        let trimmed = content.trim_start_matches(' ');
        let indent = content.len() - trimmed.len();
        let opener = fence_marker(trimmed).filter(|_| indent <= 3);
        match (fence, opener) {
            (None, Some(marker)) => {
                fence = Some(marker);
                masked.set(whole);
            }
            (Some((ch, len)), Some((c2, l2)))
                if ch == c2 && l2 >= len && is_bare_fence(trimmed) =>
            {
                fence = None;
                masked.set(whole);
            }
            (Some(_), _) => masked.set(whole),
            (None, None) if trimmed.starts_with('>') => masked.set(whole),
            (None, None) => mask_code_spans(&mut masked, start, content),
        }
    }
    masked
}

/// A line opening or closing a fence: three or more backticks or tildes.
fn fence_marker(line: &str) -> Option<(char, usize)> {
    let ch = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = line.chars().take_while(|c| *c == ch).count();
    (len >= 3).then_some((ch, len))
}

fn is_bare_fence(line: &str) -> bool {
    line.trim_end().chars().all(|c| c == '`' || c == '~')
}

/// The backtick runs of a line, as (start, length) in bytes, left to right.
fn backtick_runs(line: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let bytes = line.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        let start = i + bytes[i..].iter().position(|&b| b == b'`')?;
        let len = bytes[start..].iter().take_while(|&&b| b == b'`').count();
        i = start + len;
        Some((start, len))
    })
}

/// Masks inline code spans: a run of N backticks up to the next run of
/// exactly N backticks on the same line. An unmatched run is literal text.
/// Linear in the line's length, and the only memory is one entry per
/// distinct run length (at most the square root of twice the line's length):
/// a run opens a span exactly when a later run of its length exists, and the
/// span then ends at the first run of that length.
fn mask_code_spans(masked: &mut Mask, offset: usize, line: &str) {
    let mut last_of_len: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for (start, len) in backtick_runs(line) {
        last_of_len.insert(len, start);
    }
    let mut open: Option<(usize, usize)> = None;
    for (start, len) in backtick_runs(line) {
        match open {
            None if last_of_len.get(&len).is_some_and(|&last| last > start) => {
                open = Some((start, len));
            }
            None => {}
            Some((from, want)) if want == len => {
                masked.set(offset + from..offset + start + len);
                open = None;
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_promise_counts() {
        assert!(speaks("All tests pass.\n\n<promise>DONE</promise>", "DONE"));
        assert!(speaks("All tests pass. <promise>DONE</promise>\n", "DONE"));
        assert!(speaks("<promise>  ALL \n DONE </promise>", "ALL  DONE"));
    }

    #[test]
    fn bare_text_is_not_a_promise() {
        assert!(!speaks("DONE", "DONE"));
        assert!(!speaks("<promise>DONE", "DONE"));
    }

    #[test]
    fn case_matters() {
        assert!(!speaks("<promise>done</promise>", "DONE"));
    }

    #[test]
    fn code_does_not_count() {
        assert!(!speaks(
            "Use this:\n```\n<promise>DONE</promise>\n```\n",
            "DONE"
        ));
        assert!(!speaks("~~~~md\n<promise>DONE</promise>\n~~~~", "DONE"));
        assert!(!speaks("Say `<promise>DONE</promise>`", "DONE"));
        assert!(!speaks("Say ``<promise>DONE</promise>``", "DONE"));
        assert!(!speaks("> <promise>DONE</promise>", "DONE"));
    }

    #[test]
    fn code_then_real_promise_counts() {
        let reply = "```\n<promise>DONE</promise>\n```\nAll verified.\n<promise>DONE</promise>";
        assert!(speaks(reply, "DONE"));
    }

    #[test]
    fn unclosed_fence_hides_the_rest() {
        assert!(!speaks("```\n<promise>DONE</promise>", "DONE"));
    }

    #[test]
    fn quoted_instructions_do_not_count() {
        assert!(!speaks(
            "I will output <promise>DONE</promise> when all tests pass.",
            "DONE"
        ));
        assert!(!speaks(
            "Not yet: <promise>DONE</promise> is not true.",
            "DONE"
        ));
    }

    #[test]
    fn spans_pair_runs_of_equal_length() {
        assert!(!speaks("`` a ` b `` <promise>DONE</promise> ``", "DONE"));
        assert!(speaks("x ``` y ``\n<promise>DONE</promise>", "DONE"));
        assert!(!speaks("`a` `<promise>DONE</promise>`", "DONE"));
    }

    #[test]
    fn many_backtick_runs_stay_fast() {
        let line: String = (1..1500).map(|n| "`".repeat(n % 40 + 1) + "x").collect();
        let started = std::time::Instant::now();
        assert!(speaks(&format!("{line}\n<promise>DONE</promise>"), "DONE"));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn memory_stays_in_proportion_to_the_reply() {
        // The mask is one bit per byte; no per-character or per-run copy.
        let reply = "`a` ".repeat(250_000) + "\n<promise>DONE</promise>";
        let masked = mask_quoted(&reply);
        assert_eq!(masked.bits.len(), reply.len().div_ceil(64));
        assert!(speaks(&reply, "DONE"));
        assert!(!speaks(&format!("{reply} and more"), "DONE"));
    }

    #[test]
    fn same_words_is_normalised_equality() {
        assert!(same_words(" a \n b ", "a b"));
        assert!(!same_words("a b", "a  bc"));
        assert_eq!(normalise(" a \t b\n"), "a b");
    }

    #[test]
    fn lone_backtick_is_literal() {
        assert!(speaks("it's a ` mark\n<promise>DONE</promise>", "DONE"));
    }

    #[test]
    fn empty_expected_never_matches() {
        assert!(!speaks("<promise></promise>", ""));
        assert!(!speaks("<promise> </promise>", "  "));
    }

    #[test]
    fn a_stray_open_tag_does_not_hide_a_later_promise() {
        assert!(!speaks("<promise><promise>DONE</promise>", "<promise>DONE"));
        assert!(speaks(
            "I said <promise>maybe earlier.\n<promise>DONE</promise>",
            "DONE"
        ));
        assert!(speaks(
            "<promise>x</promise> and more\n<promise>DONE</promise>",
            "DONE"
        ));
    }
}
