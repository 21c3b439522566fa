//! What a failing check or gate said, reduced to what the breakers compare:
//! a fingerprint of its output with what varies between runs masked
//! (numbers, durations, hex ids, temporary paths), and the number of
//! failures a test runner reported (cargo test, pytest, go test,
//! jest/vitest, TAP). Pure functions of the text.

use crate::fingerprint::fingerprint;

/// The output with what varies from run to run replaced by a placeholder:
/// a temporary path by `<tmp>`, a hex id (7 or more hex digits with a digit
/// among them, or `0x…`) by `<hex>`, every other run of digits by `N`
/// (so `took 0.53s` and `took 0.61s` read `took N.Ns`); whitespace runs
/// become one space, so a column that shifted does not count.
pub fn mask(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(1 << 16));
    let mut rest = text;
    let mut space = false;
    while let Some(c) = rest.chars().next() {
        if c.is_whitespace() {
            space = true;
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if space && !out.is_empty() {
            out.push(' ');
        }
        space = false;
        if let Some(len) = temp_path_len(rest) {
            out.push_str("<tmp>");
            rest = &rest[len..];
        } else if c.is_ascii_alphanumeric() {
            let len = rest
                .find(|ch: char| !ch.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            mask_word(&rest[..len], &mut out);
            rest = &rest[len..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Where temporary folders live: the path that follows is random.
const TEMP_PREFIXES: &[&str] = &[
    "/tmp/",
    "/var/tmp/",
    "/var/folders/",
    "/private/var/folders/",
    "/private/tmp/",
];

/// The length of a temporary path at the start of `text` (up to a space, a
/// quote, a bracket or a `:` before a line number), if it is one.
fn temp_path_len(text: &str) -> Option<usize> {
    let windows_temp = text.len() > 3
        && text.as_bytes()[1] == b':'
        && text.as_bytes()[0].is_ascii_alphabetic()
        && text
            .get(..text.find(char::is_whitespace).unwrap_or(text.len()))
            .is_some_and(|p| p.to_ascii_lowercase().contains("\\temp\\"));
    if !windows_temp && !TEMP_PREFIXES.iter().any(|p| text.starts_with(p)) {
        return None;
    }
    // A drive letter's `C:` is part of the path, not a line number's colon.
    let skip = if windows_temp { 2 } else { 0 };
    Some(
        text[skip..]
            .find(|c: char| c.is_whitespace() || "'\"`()[]<>,;:".contains(c))
            .map_or(text.len(), |end| end + skip)
            .max(1),
    )
}

fn mask_word(word: &str, out: &mut String) {
    let hex_digits = word
        .strip_prefix("0x")
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()));
    let is_hex_id = hex_digits.is_some()
        || (word.len() >= 7
            && word.bytes().all(|b| b.is_ascii_hexdigit())
            && word.bytes().any(|b| b.is_ascii_digit()));
    if is_hex_id {
        out.push_str("<hex>");
        return;
    }
    let mut in_digits = false;
    for c in word.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
}

/// The fingerprint of a failure: which command, and its masked output.
pub fn failure_fingerprint(command: &str, output: &str) -> String {
    fingerprint(&format!("{command}\0{}", mask(output)))
}

/// The number of failures a test runner reported in `output`, when its
/// summary is there: cargo test (the `test result:` lines, summed over the
/// test binaries), pytest (the closing `== … ==` line: failed plus errors),
/// jest and vitest (the `Tests:` line), go test (top-level `--- FAIL:`
/// lines), TAP (`# fail N`, else the `not ok` lines after a plan).
/// `None`: no summary recognised.
pub fn failure_count(output: &str) -> Option<u64> {
    cargo(output)
        .or_else(|| pytest(output))
        .or_else(|| jest(output))
        .or_else(|| go(output))
        .or_else(|| tap(output))
}

/// The number written just before `word` in `line` (`3 failed` → 3).
fn count_before(line: &str, word: &str) -> Option<u64> {
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || ",;|".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .find(|pair| pair[1].trim_end_matches(['.', ')']) == word)
        .and_then(|pair| pair[0].parse().ok())
}

fn sum(counts: impl Iterator<Item = u64>) -> Option<u64> {
    let mut total: Option<u64> = None;
    for n in counts {
        total = Some(total.unwrap_or(0).saturating_add(n));
    }
    total
}

fn cargo(output: &str) -> Option<u64> {
    sum(output
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("test result: "))
        .map(|l| count_before(l, "failed").unwrap_or(0)))
}

fn pytest(output: &str) -> Option<u64> {
    let line = output.lines().rev().find(|l| {
        let t = l.trim();
        t.starts_with('=')
            && t.ends_with('=')
            && [" passed", " failed", " error"]
                .iter()
                .any(|w| t.contains(w))
    })?;
    let failed = count_before(line, "failed").unwrap_or(0);
    let errors = count_before(line, "errors")
        .or_else(|| count_before(line, "error"))
        .unwrap_or(0);
    Some(failed.saturating_add(errors))
}

fn jest(output: &str) -> Option<u64> {
    let line = output.lines().rev().find(|l| {
        let t = l.trim_start();
        (t.starts_with("Tests:") || t.starts_with("Tests "))
            && (t.contains(" passed") || t.contains(" failed"))
    })?;
    Some(count_before(line, "failed").unwrap_or(0))
}

fn go(output: &str) -> Option<u64> {
    let mut fails = 0u64;
    let mut seen = false;
    for line in output.lines() {
        if line.starts_with("--- FAIL:") {
            fails = fails.saturating_add(1);
            seen = true;
        } else if line.starts_with("ok  \t") || line.starts_with("FAIL\t") || line == "PASS" {
            seen = true;
        }
    }
    seen.then_some(fails)
}

fn tap(output: &str) -> Option<u64> {
    if let Some(n) = output
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("# fail "))
        .and_then(|n| n.trim().parse().ok())
    {
        return Some(n);
    }
    let has_plan = output.lines().any(|l| {
        l.trim()
            .strip_prefix("1..")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    has_plan.then(|| {
        output
            .lines()
            .filter(|l| l.starts_with("not ok"))
            .count()
            .try_into()
            .unwrap_or(u64::MAX)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations_counts_ids_and_temp_paths_are_masked() {
        assert_eq!(mask("took 0.53s"), mask("took 0.61s"));
        assert_eq!(mask("took   0.53s\n"), "took N.Ns");
        assert_eq!(
            mask("Running (target/debug/deps/ralph-3fa9c2b1d4e5f6a7) 0xdeadbeef"),
            "Running (target/debug/deps/ralph-<hex>) <hex>"
        );
        assert_eq!(
            mask("error in /tmp/.tmpAbC123/src/lib.rs:12:5"),
            "error in <tmp>:N:N"
        );
        assert_eq!(
            mask("at C:\\Users\\me\\AppData\\Local\\Temp\\x1\\a.rs"),
            "at <tmp>"
        );
        // Words stay words: `deadline` has no digit, `cafe` is short.
        assert_eq!(mask("deadline cafe"), "deadline cafe");
        assert_ne!(
            failure_fingerprint("cargo check", "error[E0308]: mismatched types"),
            failure_fingerprint("cargo check", "error[E0425]: cannot find value")
        );
        assert_ne!(
            failure_fingerprint("a", "same"),
            failure_fingerprint("b", "same"),
            "another command's failure is another failure"
        );
    }

    #[test]
    fn failure_counts_of_the_common_runners() {
        let cargo = "running 5 tests\ntest a ... FAILED\ntest result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\nrunning 1 test\ntest result: FAILED. 0 passed; 1 failed; 0 ignored\n";
        assert_eq!(failure_count(cargo), Some(3));
        assert_eq!(
            failure_count("test result: ok. 7 passed; 0 failed; 0 ignored"),
            Some(0)
        );
        assert_eq!(
            failure_count(
                "FAILED t.py::test_a\n===== 2 failed, 3 passed, 1 error in 0.12s =====\n"
            ),
            Some(3)
        );
        assert_eq!(
            failure_count("========== 5 passed in 0.20s =========="),
            Some(0)
        );
        assert_eq!(
            failure_count("Tests:       4 failed, 10 passed, 14 total\n"),
            Some(4)
        );
        assert_eq!(
            failure_count("      Tests  2 failed | 5 passed (7)\n"),
            Some(2)
        );
        assert_eq!(
            failure_count(
                "--- FAIL: TestA (0.00s)\n    --- FAIL: TestA/sub (0.00s)\n--- FAIL: TestB (0.00s)\nFAIL\nFAIL\texample.com/m\t0.01s\n"
            ),
            Some(2)
        );
        assert_eq!(failure_count("PASS\nok  \texample.com/m\t0.01s\n"), Some(0));
        assert_eq!(
            failure_count("1..3\nok 1 a\nnot ok 2 b\nnot ok 3 c\n"),
            Some(2)
        );
        assert_eq!(
            failure_count("TAP version 13\n# pass 4\n# fail 1\n"),
            Some(1)
        );
        assert_eq!(failure_count("error: could not compile `x`"), None);
        assert_eq!(failure_count(""), None);
    }

    proptest! {
        /// Masking never panics, is stable under a second pass, and two
        /// outputs that differ only in their numbers mask the same.
        #[test]
        fn masking_is_idempotent_and_blind_to_numbers(
            text in "\\PC{0,200}",
            a in 0u64..1_000_000,
            b in 0u64..1_000_000,
        ) {
            let once = mask(&text);
            prop_assert_eq!(mask(&once), once.clone());
            prop_assert!(!once.bytes().any(|b| b.is_ascii_digit()), "{}", once);
            let with = |n: u64| format!("{text} took {n}.{}s", n % 100);
            prop_assert_eq!(mask(&with(a)), mask(&with(b)));
        }

        /// Any text gives a count or none without panicking, and a cargo
        /// summary's failed count is read back exactly.
        #[test]
        fn counts_never_panic_and_read_back(text in "\\PC{0,300}", n in 0u64..10_000) {
            let _ = failure_count(&text);
            let summary = format!("test result: FAILED. 1 passed; {n} failed; 0 ignored\n");
            prop_assert_eq!(failure_count(&summary), Some(n));
        }
    }
}
