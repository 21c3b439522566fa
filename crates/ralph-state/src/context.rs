//! How full the agent's context is: the tokens the last request sent (the
//! transcript's last main-chain `usage`: input + cache creation + cache
//! read) against the window the client reported for the session (the status
//! line's `context_window.context_window_size`). The window is never
//! guessed: 1M-token models exist, and dividing by 200,000 would call a
//! session at 19 % nearly full. Pure: the numbers in, the words out.

use serde::{Deserialize, Serialize};

/// The context one request sent, and the window it was sent into when the
/// client said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fill {
    /// Input + cache creation + cache read of the last request.
    pub tokens: u64,
    /// The model's context window, when the status line reported it.
    pub window: Option<u64>,
}

impl Fill {
    /// Whole percent of the window used, rounded up (a window of 0 reads as
    /// unknown); `None` when the window is unknown.
    pub fn percent(&self) -> Option<u64> {
        let window = self.window.filter(|&w| w > 0)?;
        Some(
            self.tokens
                .saturating_mul(100)
                .div_ceil(window)
                .min(u64::from(u32::MAX)),
        )
    }

    /// `41% of 200k` or `82k, window unknown`.
    pub fn words(&self) -> String {
        match (self.percent(), self.window) {
            (Some(p), Some(w)) => format!("{p}% of {}", tokens_short(w)),
            _ => format!("{}, window unknown", tokens_short(self.tokens)),
        }
    }

    /// The shortest form: `41%`, or `82k` when the window is unknown.
    pub fn short(&self) -> String {
        match self.percent() {
            Some(p) => format!("{p}%"),
            None => tokens_short(self.tokens),
        }
    }
}

/// `950`, `82k`, `1.2M`: a token count at a glance (rounded down, so a
/// figure never reads fuller than it is).
pub(crate) fn tokens_short(tokens: u64) -> String {
    if tokens >= 1_000_000 {
        let tenths = tokens / 100_000;
        if tenths.is_multiple_of(10) {
            format!("{}M", tenths / 10)
        } else {
            format!("{}.{}M", tenths / 10, tenths % 10)
        }
    } else if tokens >= 1_000 {
        format!("{}k", tokens / 1_000)
    } else {
        tokens.to_string()
    }
}

/// `--fresh-via`: how a loop goes on in a fresh context at `--fresh-at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FreshVia {
    /// The user types `/clear`; the same client's new conversation goes on.
    #[default]
    Clear,
    /// A detached `ralph run` takes the loop over.
    Run,
}

/// A `--fresh-at` threshold: a share of the window, or a token count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threshold {
    Percent(u64),
    Tokens(u64),
}

impl Threshold {
    /// `60`, `60%`, `150k`, `150000`, `1.5M`… A bare number up to 100 is a
    /// percentage; above 100 or with `k`/`M`, tokens.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let bad = || {
            format!(
                "--fresh-at takes a percentage of the context window (1 to 99, e.g. 60) or tokens (e.g. 150k), not {t:?}"
            )
        };
        if let Some(p) = t.strip_suffix('%') {
            let p: u64 = p.trim().parse().map_err(|_| bad())?;
            return (1..=99)
                .contains(&p)
                .then_some(Self::Percent(p))
                .ok_or_else(bad);
        }
        let (digits, scale) = match t.char_indices().last() {
            Some((i, 'k' | 'K')) => (&t[..i], 1_000f64),
            Some((i, 'm' | 'M')) => (&t[..i], 1_000_000f64),
            _ => {
                let n: u64 = t.parse().map_err(|_| bad())?;
                return match n {
                    1..=99 => Ok(Self::Percent(n)),
                    1_000.. => Ok(Self::Tokens(n)),
                    _ => Err(bad()),
                };
            }
        };
        let n: f64 = digits.trim().parse().map_err(|_| bad())?;
        if !n.is_finite() || n <= 0.0 || n * scale > 100_000_000.0 {
            return Err(bad());
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "finite, positive and at most 1e8, checked above"
        )]
        let tokens = (n * scale).round() as u64;
        (tokens >= 1_000)
            .then_some(Self::Tokens(tokens))
            .ok_or_else(bad)
    }

    /// As the loop file keeps it: `60%` or `150000`.
    pub fn render(&self) -> String {
        match self {
            Self::Percent(p) => format!("{p}%"),
            Self::Tokens(t) => t.to_string(),
        }
    }

    /// `60% of the context window` or `150k tokens of context`.
    pub fn words(&self) -> String {
        match self {
            Self::Percent(p) => format!("{p}% of the context window"),
            Self::Tokens(t) => format!("{} tokens of context", tokens_short(*t)),
        }
    }

    /// Whether `fill` reached the threshold; `None` when it cannot be told
    /// (a percentage with the window unknown).
    pub fn reached(&self, fill: &Fill) -> Option<bool> {
        match self {
            // Exact, not the rounded-up percentage: 59.5 % has not reached 60 %.
            Self::Percent(p) => fill
                .window
                .filter(|&w| w > 0)
                .map(|w| fill.tokens.saturating_mul(100) >= p.saturating_mul(w)),
            Self::Tokens(t) => Some(fill.tokens >= *t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentage_is_of_the_window_the_client_reported_never_a_guess() {
        let fill = |tokens, window| Fill { tokens, window };
        assert_eq!(fill(82_000, Some(200_000)).percent(), Some(41));
        assert_eq!(fill(190_000, Some(1_000_000)).percent(), Some(19));
        assert_eq!(fill(190_000, Some(1_000_000)).words(), "19% of 1M");
        assert_eq!(fill(190_000, None).percent(), None);
        assert_eq!(fill(190_000, None).words(), "190k, window unknown");
        assert_eq!(fill(1, Some(0)).percent(), None, "a window of 0 is unknown");
        assert_eq!(fill(1, Some(200_000)).percent(), Some(1), "rounded up");
        assert_eq!(fill(u64::MAX, Some(1)).percent(), Some(u64::from(u32::MAX)));
        assert_eq!(tokens_short(1_500_000), "1.5M");
        assert_eq!(tokens_short(999), "999");
    }

    #[test]
    fn a_threshold_is_a_share_of_the_window_or_tokens() {
        assert_eq!(Threshold::parse("60"), Ok(Threshold::Percent(60)));
        assert_eq!(Threshold::parse("60%"), Ok(Threshold::Percent(60)));
        assert_eq!(Threshold::parse("150k"), Ok(Threshold::Tokens(150_000)));
        assert_eq!(Threshold::parse("1.5M"), Ok(Threshold::Tokens(1_500_000)));
        assert_eq!(Threshold::parse("150000"), Ok(Threshold::Tokens(150_000)));
        for bad in ["0", "100%", "500", "-5", "k", "x", "1e400k", "0.5k", ""] {
            assert!(Threshold::parse(bad).is_err(), "{bad}");
        }
        let t = Threshold::parse("60%").unwrap();
        assert_eq!(Threshold::parse(&t.render()), Ok(t));
        let unknown = Fill {
            tokens: 150_000,
            window: None,
        };
        assert_eq!(t.reached(&unknown), None, "a percentage needs the window");
        assert_eq!(Threshold::Tokens(150_000).reached(&unknown), Some(true));
        let known = Fill {
            tokens: 120_000,
            window: Some(200_000),
        };
        assert_eq!(t.reached(&known), Some(true));
        assert_eq!(Threshold::Percent(61).reached(&known), Some(false));
    }
}
