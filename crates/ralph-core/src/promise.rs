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
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The normalised contents of every tag that counts as a promise, in order.
pub fn spoken_promises(reply: &str) -> Vec<String> {
    let prose = mask_quoted(reply);
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(close_at) = prose[from..].find(CLOSE).map(|i| i + from) {
        // The tag a close belongs to is the nearest open before it: a stray,
        // unclosed `<promise>` earlier in the reply must not swallow it.
        let after = close_at + CLOSE.len();
        if let Some(open_at) = prose[from..close_at].rfind(OPEN).map(|i| i + from) {
            let inner = &prose[open_at + OPEN.len()..close_at];
            let rest_of_line = prose[after..].split('\n').next().unwrap_or("");
            if rest_of_line.trim().is_empty() && !inner.contains(MASK) {
                found.push(normalise(inner));
            }
        }
        from = after;
    }
    found
}

/// Whether `reply` speaks the promise `expected`.
pub fn speaks(reply: &str, expected: &str) -> bool {
    let expected = normalise(expected);
    !expected.is_empty() && spoken_promises(reply).contains(&expected)
}

/// Stands in for every character of code or quotation, so that no tag can
/// be found inside them. (A private-use character: never part of a tag.)
const MASK: char = '\u{E000}';

/// Returns `text` with code blocks, code spans and quoted lines masked,
/// keeping line breaks so that "rest of the line" still means the same.
fn mask_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fence: Option<(char, usize)> = None;
    for line in text.split_inclusive('\n') {
        let (content, newline) = match line.strip_suffix('\n') {
            Some(c) => (c, "\n"),
            None => (line, ""),
        };
        let trimmed = content.trim_start_matches(' ');
        let indent = content.len() - trimmed.len();
        let opener = fence_marker(trimmed).filter(|_| indent <= 3);
        match (fence, opener) {
            (None, Some(marker)) => {
                fence = Some(marker);
                mask_all(&mut out, content);
            }
            (Some((ch, len)), Some((c2, l2)))
                if ch == c2 && l2 >= len && is_bare_fence(trimmed) =>
            {
                fence = None;
                mask_all(&mut out, content);
            }
            (Some(_), _) => mask_all(&mut out, content),
            (None, None) if trimmed.starts_with('>') => mask_all(&mut out, content),
            (None, None) => mask_code_spans(&mut out, content),
        }
        out.push_str(newline);
    }
    out
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

fn mask_all(out: &mut String, content: &str) {
    out.extend(content.chars().map(|_| MASK));
}

/// Masks inline code spans: a run of N backticks up to the next run of
/// exactly N backticks on the same line. An unmatched run is literal text.
/// Linear in the line's length: the runs are indexed once, by length.
fn mask_code_spans(out: &mut String, line: &str) {
    let chars: Vec<char> = line.chars().collect();
    // Every backtick run as (start, length), left to right.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '`' {
            let len = chars[i..].iter().take_while(|c| **c == '`').count();
            runs.push((i, len));
            i += len;
        } else {
            i += 1;
        }
    }
    // For each run, the index of the next run of the same length.
    let mut next_same = vec![usize::MAX; runs.len()];
    let mut last_of_len: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for (k, &(_, len)) in runs.iter().enumerate().rev() {
        if let Some(&later) = last_of_len.get(&len) {
            next_same[k] = later;
        }
        last_of_len.insert(len, k);
    }
    let mut pos = 0;
    let mut k = 0;
    while k < runs.len() {
        let (start, len) = runs[k];
        out.extend(&chars[pos..start]);
        match next_same[k] {
            usize::MAX => {
                out.extend(std::iter::repeat_n('`', len));
                pos = start + len;
                k += 1;
            }
            closing => {
                let end = runs[closing].0 + runs[closing].1;
                out.extend(std::iter::repeat_n(MASK, end - start));
                pos = end;
                k = closing + 1;
            }
        }
    }
    out.extend(&chars[pos..]);
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
