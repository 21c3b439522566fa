//! A count in words, its noun agreeing with it (`1 iteration`, `3
//! iterations`): every sentence ralph shows with a count a loop file or a
//! flag can set to one goes through here.

/// `n` and the noun for it: `one` when `n` is 1, else `many`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The noun alone, agreeing with `n`, for a count written another way
/// (`1,000 tokens`).
pub fn noun<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// `1 time`, `3 times`.
pub fn times(n: u64) -> String {
    count(n, "time", "times")
}

/// `1 of 3 stories passes`, `0 of 1 story pass`: the noun agrees with the
/// total, the verb with the passing.
pub(crate) fn stories_pass(pass: u64, total: u64) -> String {
    format!(
        "{pass} of {} {}",
        count(total, "story", "stories"),
        noun(pass, "passes", "pass")
    )
}

/// `1 iteration`, `3 iterations`.
pub fn iterations(n: u64) -> String {
    count(n, "iteration", "iterations")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(iterations(1), "1 iteration");
        assert_eq!(iterations(0), "0 iterations");
        assert_eq!(iterations(2), "2 iterations");
        assert_eq!(count(1, "reply", "replies"), "1 reply");
        assert_eq!(times(1), "1 time");
        assert_eq!(times(2), "2 times");
        assert_eq!(noun(1, "token", "tokens"), "token");
        assert_eq!(noun(1000, "token", "tokens"), "tokens");
        assert_eq!(stories_pass(0, 1), "0 of 1 story pass");
        assert_eq!(stories_pass(1, 3), "1 of 3 stories passes");
        assert_eq!(stories_pass(2, 3), "2 of 3 stories pass");
        assert_eq!(
            count(u64::MAX, "reply", "replies"),
            format!("{} replies", u64::MAX)
        );
    }
}
