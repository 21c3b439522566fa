//! A count in words, its noun agreeing with it (`1 iteration`, `3
//! iterations`): every sentence ralph shows with a count a loop file or a
//! flag can set to one goes through here.

/// `n` and the noun for it: `one` when `n` is 1, else `many`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
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
        assert_eq!(
            count(u64::MAX, "reply", "replies"),
            format!("{} replies", u64::MAX)
        );
    }
}
