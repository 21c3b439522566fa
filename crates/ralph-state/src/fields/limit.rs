//! "0 means unlimited", in one place: a limit a loop file writes as a
//! whole number, 0 for none (`max_iterations: 0`, `stuck_after: 0`,
//! `max_tokens: 0`). Readers ask the typed value whether it is set, reached
//! or what is left; writers write [`Limit::count`] back, so the file keeps
//! the number it always had; people read [`Limit`]'s `Display` (`∞` for
//! none).

use std::fmt;
use std::num::NonZeroU64;

use crate::fields::values::{StateError, number};

/// A count that ends something once reached, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Limit {
    /// Written as 0: no count ends it.
    #[default]
    Unlimited,
    /// Ends once the count reaches this.
    AtMost(NonZeroU64),
}

impl Limit {
    /// The limit a loop file's number means: 0 is none.
    pub const fn new(count: u64) -> Self {
        match NonZeroU64::new(count) {
            Some(n) => Self::AtMost(n),
            None => Self::Unlimited,
        }
    }

    /// The limit in the frontmatter field `field` (a whole number no larger
    /// than `cap`, 0 for none); `None` when the field is absent or blank.
    pub fn read(
        field: &'static str,
        value: Option<&str>,
        cap: u64,
    ) -> Result<Option<Self>, StateError> {
        Ok(number(field, value, cap)?.map(Self::new))
    }

    /// The last count allowed, when there is one.
    pub const fn get(self) -> Option<u64> {
        match self {
            Self::AtMost(n) => Some(n.get()),
            Self::Unlimited => None,
        }
    }

    /// The number a loop file writes: 0 for none.
    pub const fn count(self) -> u64 {
        match self {
            Self::AtMost(n) => n.get(),
            Self::Unlimited => 0,
        }
    }

    pub const fn is_set(self) -> bool {
        matches!(self, Self::AtMost(_))
    }

    /// Whether `count` has reached the limit (never, without one).
    pub const fn reached(self, count: u64) -> bool {
        match self {
            Self::AtMost(n) => count >= n.get(),
            Self::Unlimited => false,
        }
    }

    /// What is left before `count` reaches the limit (`None`: no limit).
    pub const fn remaining(self, count: u64) -> Option<u64> {
        match self {
            Self::AtMost(n) => Some(n.get().saturating_sub(count)),
            Self::Unlimited => None,
        }
    }

    /// This limit, or `fallback` when there is none.
    pub const fn or(self, fallback: Self) -> Self {
        match self {
            Self::AtMost(_) => self,
            Self::Unlimited => fallback,
        }
    }
}

impl From<u64> for Limit {
    fn from(count: u64) -> Self {
        Self::new(count)
    }
}

/// As people read it: the number, or `∞` for none (`3/∞`).
impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AtMost(n) => write!(f, "{n}"),
            Self::Unlimited => f.write_str("∞"),
        }
    }
}

/// As `ralph status --json` has always shown it: the file's number.
impl serde::Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_unlimited_and_reads_back_as_written() {
        assert_eq!(Limit::new(0), Limit::Unlimited);
        assert_eq!(Limit::from(0), Limit::default());
        for written in [0, 1, 7, crate::fields::values::MAX_COUNT] {
            let limit = Limit::read("stuck_after", Some(&written.to_string()), u64::MAX)
                .unwrap()
                .unwrap();
            assert_eq!(limit.count(), written, "{written} written back as itself");
            assert_eq!(limit.is_set(), written > 0);
            assert_eq!(limit.get(), (written > 0).then_some(written));
        }
        assert_eq!(Limit::read("stuck_after", None, 9), Ok(None));
        assert_eq!(Limit::read("stuck_after", Some(" "), 9), Ok(None));
        assert!(Limit::read("stuck_after", Some("10"), 9).is_err());
        assert!(Limit::read("stuck_after", Some("-1"), 9).is_err());
    }

    #[test]
    fn a_limit_prints_its_number_or_infinity() {
        assert_eq!(Limit::new(20).to_string(), "20");
        assert_eq!(Limit::Unlimited.to_string(), "∞");
        assert_eq!(format!("3/{}", Limit::new(0)), "3/∞");
        assert_eq!(serde_json::to_value(Limit::new(0)).unwrap(), 0);
        assert_eq!(serde_json::to_value(Limit::new(5)).unwrap(), 5);
    }

    #[test]
    fn reached_and_remaining_never_end_an_unlimited_count() {
        let three = Limit::new(3);
        assert!(!three.reached(2) && three.reached(3) && three.reached(4));
        assert_eq!(three.remaining(1), Some(2));
        assert_eq!(three.remaining(5), Some(0));
        assert!(!Limit::Unlimited.reached(u64::MAX));
        assert_eq!(Limit::Unlimited.remaining(0), None);
        assert_eq!(Limit::Unlimited.or(three), three);
        assert_eq!(Limit::new(1).or(three), Limit::new(1));
    }
}
