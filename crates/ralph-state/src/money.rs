//! Dollar amounts as whole micro-dollars (`$2.50` is 2 500 000): read from
//! decimal text exactly, added without wrapping, written back exactly. No
//! float ever holds a sum, so a budget never drifts from what was typed.

/// A number of micro-dollars (millionths of a US dollar).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Money(pub u64);

/// Micro-dollars in a dollar.
pub const MICROS: u64 = 1_000_000;
/// The largest amount a loop file holds: a billion dollars.
pub const MAX_MONEY: Money = Money(1_000_000_000 * MICROS);

/// Why a dollar amount was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("expected a dollar amount such as `5` or `2.50` (digits, at most one `.`)")]
    Syntax,
    #[error("more than 6 decimals: ralph counts whole micro-dollars")]
    TooPrecise,
    #[error("past the largest amount ralph accepts ($1000000000)")]
    TooLarge,
}

impl Money {
    /// Reads `5`, `2.50`, `$0.000125` exactly (a leading `$` and `_`
    /// separators are allowed; nothing negative, no exponent).
    pub fn parse(text: &str) -> Result<Self, MoneyError> {
        let t = text.trim().trim_matches(['"', '\'']).trim();
        let t = t.strip_prefix('$').unwrap_or(t).replace('_', "");
        let (whole, frac) = t.split_once('.').unwrap_or((&t, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (whole.is_empty() && frac.is_empty()) || !digits(whole) || !digits(frac) {
            return Err(MoneyError::Syntax);
        }
        let frac = frac.trim_end_matches('0');
        if frac.len() > 6 {
            return Err(MoneyError::TooPrecise);
        }
        let whole = whole.trim_start_matches('0');
        if whole.len() > 10 {
            return Err(MoneyError::TooLarge);
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| MoneyError::TooLarge)?
        };
        let frac: u64 = format!("{frac:0<6}")
            .parse()
            .map_err(|_| MoneyError::Syntax)?;
        let micros = whole
            .checked_mul(MICROS)
            .and_then(|w| w.checked_add(frac))
            .ok_or(MoneyError::TooLarge)?;
        if micros > MAX_MONEY.0 {
            return Err(MoneyError::TooLarge);
        }
        Ok(Self(micros))
    }

    /// Reads a JSON number (`total_cost_usd`: 0.0123456789) exactly as
    /// written, rounded up to the micro-dollar: a cost is never made smaller.
    pub fn from_json_up(value: &serde_json::Value) -> Option<Self> {
        let text = match value {
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::String(s) => s.clone(),
            _ => return None,
        };
        if text.contains(['e', 'E', '-']) {
            // serde_json writes tiny or huge floats with an exponent; read it
            // as a float only to round up (never used for sums).
            let f: f64 = text.parse().ok()?;
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "finite and not negative, checked first; `as` saturates, then the cap"
            )]
            let micros = |f: f64| ((f * MICROS as f64).ceil() as u64).min(MAX_MONEY.0);
            return (f.is_finite() && f >= 0.0).then(|| Self(micros(f)));
        }
        let (whole, frac) = text.split_once('.').unwrap_or((&text, ""));
        let (kept, rest) = frac.split_at(frac.len().min(6));
        let base = Self::parse(&format!("{whole}.{kept}")).ok()?;
        let up = u64::from(rest.bytes().any(|b| b != b'0'));
        Some(base.plus(Self(up)))
    }

    /// The sum, held at [`MAX_MONEY`].
    pub fn plus(self, other: Self) -> Self {
        Self(self.0.saturating_add(other.0).min(MAX_MONEY.0))
    }

    /// What is left of `self` after `spent` (0 when it is spent).
    pub fn minus(self, spent: Self) -> Self {
        Self(self.0.saturating_sub(spent.0))
    }

    /// `2.5`, `0.000125`, `3`: exact, no trailing zeros (what a loop file
    /// and `--max-budget-usd` are given).
    pub fn decimal(self) -> String {
        let (whole, frac) = (self.0 / MICROS, self.0 % MICROS);
        if frac == 0 {
            return whole.to_string();
        }
        let frac = format!("{frac:06}");
        format!("{whole}.{}", frac.trim_end_matches('0'))
    }

    /// `$2.50`, `$0.0012`: cents, and more digits only when an amount is
    /// below a cent (what people read).
    pub fn dollars(self) -> String {
        let (whole, frac) = (self.0 / MICROS, self.0 % MICROS);
        if whole == 0 && frac > 0 && frac < 10_000 {
            return format!("${}", self.decimal());
        }
        format!("${whole}.{:02}", frac / 10_000)
    }
}

impl serde::Serialize for Money {
    /// A JSON number of dollars (`ralph status --json`): the exact decimal
    /// text is short enough that a reader's float gets it back.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let value: f64 = self.decimal().parse().unwrap_or(0.0);
        s.serialize_f64(value)
    }
}

impl<'de> serde::Deserialize<'de> for Money {
    /// A dollar amount as `Serialize` writes it (a JSON number), read back
    /// exactly to the micro-dollar.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        Self::from_json_up(&value)
            .ok_or_else(|| serde::de::Error::custom("expected a dollar amount such as 2.5"))
    }
}

/// One model's tokens, as a transcript's `usage` splits them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelTokens {
    pub input: u64,
    pub output: u64,
    /// Cache writes at the 5-minute rate (all of `cache_creation_input_tokens`
    /// not said to be 1-hour writes).
    pub cache_write: u64,
    /// Cache writes the usage says are 1-hour writes (twice the input price).
    pub cache_write_1h: u64,
    pub cache_read: u64,
}

impl ModelTokens {
    pub fn add(&mut self, other: &Self) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
        self.cache_write_1h = self.cache_write_1h.saturating_add(other.cache_write_1h);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_read_exactly() {
        assert_eq!(Money::parse("5"), Ok(Money(5_000_000)));
        assert_eq!(Money::parse("2.50"), Ok(Money(2_500_000)));
        assert_eq!(Money::parse(" $0.000125 "), Ok(Money(125)));
        assert_eq!(Money::parse(".5"), Ok(Money(500_000)));
        assert_eq!(Money::parse("1_000"), Ok(Money(1_000_000_000)));
        assert_eq!(Money::parse("\"0.10\""), Ok(Money(100_000)));
        // 0.1 + 0.2 is 0.3 here, unlike in a float.
        let sum = Money::parse("0.1")
            .unwrap()
            .plus(Money::parse("0.2").unwrap());
        assert_eq!(sum, Money::parse("0.3").unwrap());
    }

    #[test]
    fn bad_amounts_are_refused_never_wrapped() {
        for bad in ["", ".", "-1", "1e3", "1.2.3", "abc", "1,5", "$"] {
            assert_eq!(Money::parse(bad), Err(MoneyError::Syntax), "{bad}");
        }
        assert_eq!(Money::parse("0.0000001"), Err(MoneyError::TooPrecise));
        assert_eq!(Money::parse("1000000001"), Err(MoneyError::TooLarge));
        assert_eq!(
            Money::parse("99999999999999999999"),
            Err(MoneyError::TooLarge)
        );
        assert_eq!(Money::parse("1000000000"), Ok(MAX_MONEY));
        assert_eq!(MAX_MONEY.plus(Money(1)), MAX_MONEY);
        assert_eq!(Money(1).minus(Money(5)), Money(0));
    }

    #[test]
    fn amounts_are_written_exactly_and_read_back() {
        for (micros, decimal, dollars) in [
            (2_500_000, "2.5", "$2.50"),
            (3_000_000, "3", "$3.00"),
            (125, "0.000125", "$0.000125"),
            (1_234_567, "1.234567", "$1.23"),
            (0, "0", "$0.00"),
        ] {
            let m = Money(micros);
            assert_eq!(
                (m.decimal().as_str(), m.dollars().as_str()),
                (decimal, dollars)
            );
            assert_eq!(Money::parse(&m.decimal()), Ok(m));
        }
    }

    #[test]
    fn a_reported_cost_is_rounded_up_to_the_micro_dollar() {
        let v = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
        assert_eq!(Money::from_json_up(&v("0.0123456789")), Some(Money(12_346)));
        assert_eq!(Money::from_json_up(&v("0.25")), Some(Money(250_000)));
        assert_eq!(Money::from_json_up(&v("2")), Some(Money(2_000_000)));
        assert_eq!(Money::from_json_up(&v("1e-7")), Some(Money(1)));
        assert_eq!(Money::from_json_up(&v("-1")), None);
        assert_eq!(Money::from_json_up(&v("null")), None);
        assert_eq!(
            serde_json::to_string(&Money(2_500_000)).unwrap(),
            "2.5",
            "status --json shows dollars"
        );
    }
}
