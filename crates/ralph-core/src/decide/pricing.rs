//! What a model's tokens cost: the price table ralph ships
//! (`templates/pricing/prices.json`, with the date it was checked and its
//! source), a user's own table over it (`~/.config/ralph/prices.json`), and
//! the price of the tokens a transcript shows, per model. An unknown model
//! is priced at the dearest rate known and named, never counted as free.

use std::path::{Path, PathBuf};

use serde_json::Value;

use ralph_state::money::ModelTokens;
use ralph_state::money::{MICROS, Money};

/// The table ralph ships.
const SHIPPED: &str = include_str!("../../templates/pricing/prices.json");
/// The most a user's table may hold.
const MAX_TABLE_BYTES: u64 = 256 * 1024;

/// A model's prices in micro-dollars per million tokens (so `$3 / MTok`
/// is 3 000 000, and one token costs that many millionths of a micro-dollar).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Rate {
    pub input: u64,
    pub output: u64,
    pub cache_write: u64,
    pub cache_read: u64,
}

impl Rate {
    /// The price of `tokens` in millionths of a micro-dollar (exact; u128
    /// holds any count a file allows times any price).
    fn cost(&self, t: &ModelTokens) -> u128 {
        let m = |n: u64, p: u64| u128::from(n) * u128::from(p);
        m(t.input, self.input)
            + m(t.output, self.output)
            + m(t.cache_write, self.cache_write)
            + m(t.cache_write_1h, self.input.saturating_mul(2))
            + m(t.cache_read, self.cache_read)
    }

    /// Column by column, the dearer of the two.
    fn max(self, o: Self) -> Self {
        Self {
            input: self.input.max(o.input),
            output: self.output.max(o.output),
            cache_write: self.cache_write.max(o.cache_write),
            cache_read: self.cache_read.max(o.cache_read),
        }
    }
}

/// A price table: the shipped one, or the user's over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PriceTable {
    /// When its prices were checked, as the table says.
    pub checked: String,
    pub source: String,
    /// Model id prefixes and their prices; the longest prefix that matches wins.
    models: Vec<(String, Rate)>,
    /// The user's table, when one was read over the shipped one.
    pub user_file: Option<PathBuf>,
}

/// Why a price table was refused: the file, the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PriceError {
    #[error("the price table {file} could not be read ({why}); fix or remove it")]
    Read { file: String, why: String },
    #[error(
        "the price table {file} is not valid JSON ({detail}); write it as the shipped table is written (docs/cost.md)"
    )]
    Json { file: String, detail: String },
    #[error("the price table {file}: field `{field}` {problem}")]
    Field {
        file: String,
        field: String,
        problem: String,
    },
}

/// The price of some tokens, and the models it had to guess.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Priced {
    /// Rounded up to the micro-dollar: never less than the exact figure.
    pub cost: Money,
    /// Models the table does not know, priced at its dearest rate.
    pub unknown: Vec<String>,
}

impl PriceTable {
    /// The table ralph ships.
    pub(crate) fn shipped() -> Result<Self, PriceError> {
        parse(SHIPPED, "ralph's own price table")
    }

    /// The shipped table with the user's over it, when `user` is a file
    /// (a missing file is no error; anything else about it is).
    pub(crate) fn load(user: Option<&Path>) -> Result<Self, PriceError> {
        let mut table = Self::shipped()?;
        let Some(path) = user else { return Ok(table) };
        let shown = ralph_fs::display::line(&path.display().to_string()).into_owned();
        let text = match read_own(path) {
            Ok(Some(text)) => text,
            Ok(None) => return Ok(table),
            Err(why) => return Err(PriceError::Read { file: shown, why }),
        };
        let theirs = parse(&text, &shown)?;
        for (model, rate) in theirs.models {
            table.models.retain(|(m, _)| *m != model);
            table.models.push((model, rate));
        }
        table.checked = theirs.checked;
        table.source = theirs.source;
        table.user_file = Some(path.to_owned());
        Ok(table)
    }

    /// The price of one model's tokens: its rate, or the dearest one when
    /// the table does not know it (`false`).
    pub(crate) fn rate(&self, model: &str) -> (Rate, bool) {
        let id = model.find("claude-").map_or(model, |i| &model[i..]);
        let known = self
            .models
            .iter()
            .filter(|(prefix, _)| {
                id.strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '[', '@', ':']))
            })
            .max_by_key(|(prefix, _)| prefix.len());
        match known {
            Some((_, rate)) => (*rate, true),
            None => (self.dearest(), false),
        }
    }

    /// Every column at its highest price in the table.
    fn dearest(&self) -> Rate {
        self.models
            .iter()
            .fold(Rate::default(), |acc, (_, r)| acc.max(*r))
    }

    /// The price of each model's tokens, summed.
    pub(crate) fn price(&self, usage: &[(String, ModelTokens)]) -> Priced {
        let mut exact: u128 = 0;
        let mut unknown = Vec::new();
        for (model, tokens) in usage {
            let (rate, known) = self.rate(model);
            // A model with no tokens (the client's `<synthetic>` lines) costs nothing to name.
            if !known && *tokens != ModelTokens::default() && !unknown.contains(model) {
                unknown.push(model.clone());
            }
            exact = exact.saturating_add(rate.cost(tokens));
        }
        // Millionths of a micro-dollar to micro-dollars, rounded up.
        let micros = exact.div_ceil(u128::from(MICROS));
        Priced {
            cost: Money(u64::try_from(micros).unwrap_or(u64::MAX)).plus(Money(0)),
            unknown,
        }
    }
}

/// What tokens the API itself reported cost (`ralph run`'s meter): by the
/// shipped table with the user's over it (the shipped one alone when the
/// user's cannot be read), a model the table does not know at its dearest
/// rate; the models it had to guess, for the run to tell.
pub fn price_metered(usage: &[(String, ModelTokens)]) -> (Money, Vec<String>) {
    let table =
        PriceTable::load(user_file_from_env().as_deref()).or_else(|_| PriceTable::shipped());
    match table {
        Ok(table) => {
            let priced = table.price(usage);
            (priced.cost, priced.unknown)
        }
        // The shipped table is part of the binary: it always reads.
        Err(_) => (Money(0), Vec::new()),
    }
}

/// The user's price table: `$XDG_CONFIG_HOME/ralph/prices.json`, else
/// `~/.config/ralph/prices.json`.
pub(crate) fn user_file(config_home: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    config_home
        .map(Path::to_owned)
        .or_else(|| home.map(|h| h.join(".config")))
        .map(|dir| dir.join("ralph").join("prices.json"))
}

/// The user's table as this process's environment names it.
pub(crate) fn user_file_from_env() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    user_file(
        config.as_deref(),
        ralph_state::storage::registry::home_from_env().as_deref(),
    )
}

/// Reads the user's table: a regular file of theirs, never through a link
/// (`None`: there is none).
fn read_own(path: &Path) -> Result<Option<String>, String> {
    match ralph_fs::safe_fs::kind_at(path) {
        None => return Ok(None),
        Some(kind) if !kind.is_file() => {
            return Err(format!(
                "it is {}, not a regular file",
                ralph_fs::safe_fs::describe(kind)
            ));
        }
        Some(_) => {}
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
        if meta.uid() != rustix::process::getuid().as_raw() {
            return Err("it belongs to another user".into());
        }
    }
    ralph_fs::safe_fs::read_text(path, MAX_TABLE_BYTES)
        .map(Some)
        .map_err(|e| e.to_string())
}

fn parse(text: &str, file: &str) -> Result<PriceTable, PriceError> {
    let value: Value = serde_json::from_str(text).map_err(|e| PriceError::Json {
        file: file.to_owned(),
        detail: e.to_string(),
    })?;
    let field_error = |field: &str, problem: &str| PriceError::Field {
        file: file.to_owned(),
        field: field.to_owned(),
        problem: problem.to_owned(),
    };
    let text_field = |name: &str| {
        value
            .get(name)
            .and_then(Value::as_str)
            .map(|t| ralph_fs::display::line(t).into_owned())
            .unwrap_or_default()
    };
    let Some(models) = value.get("models").and_then(Value::as_object) else {
        return Err(field_error(
            "models",
            "is missing; write `\"models\": { \"claude-…\": { \"input\": 3, \"output\": 15, \"cache_write\": 3.75, \"cache_read\": 0.3 } }`",
        ));
    };
    let mut out = Vec::new();
    for (model, prices) in models {
        let column = |name: &str| -> Result<u64, PriceError> {
            let field = format!("models.{}.{name}", ralph_fs::display::line(model));
            let Some(v) = prices.get(name) else {
                return Err(field_error(
                    &field,
                    "is missing; give the price in dollars per million tokens, e.g. 3.75",
                ));
            };
            let price = match v {
                Value::Number(n) => Money::parse(&n.to_string()),
                Value::String(s) => Money::parse(s),
                _ => Err(ralph_state::money::MoneyError::Syntax),
            };
            price.map(|m| m.0).map_err(|e| {
                field_error(
                    &field,
                    &format!(
                        "is `{}`: {e}; give dollars per million tokens, e.g. 3.75",
                        ralph_fs::display::line(&v.to_string())
                    ),
                )
            })
        };
        let rate = Rate {
            input: column("input")?,
            output: column("output")?,
            cache_write: column("cache_write")?,
            cache_read: column("cache_read")?,
        };
        out.push((model.trim().to_owned(), rate));
    }
    Ok(PriceTable {
        checked: text_field("checked"),
        source: text_field("source"),
        models: out,
        user_file: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(input: u64, output: u64, cache_write: u64, cache_read: u64) -> ModelTokens {
        ModelTokens {
            input,
            output,
            cache_write,
            cache_write_1h: 0,
            cache_read,
        }
    }

    #[test]
    fn the_shipped_table_parses_and_says_when_it_was_checked() {
        let t = PriceTable::shipped().unwrap();
        assert!(t.checked.starts_with("2026-"), "{}", t.checked);
        assert!(t.source.contains("platform.claude.com"));
        assert!(t.models.len() > 10);
    }

    #[test]
    fn models_match_by_their_longest_prefix() {
        let t = PriceTable::shipped().unwrap();
        let input = |m: &str| t.rate(m).0.input;
        assert_eq!(input("claude-opus-4-5-20251101"), 5 * MICROS);
        assert_eq!(input("claude-opus-4-20250514"), 15 * MICROS);
        assert_eq!(input("claude-opus-4-1"), 15 * MICROS);
        assert_eq!(input("claude-sonnet-4-6[1m]"), 3 * MICROS);
        assert_eq!(input("us.anthropic.claude-haiku-4-5-20251001-v1:0"), MICROS);
        assert!(t.rate("claude-opus-4-5").1);
        // A prefix must end at a word: claude-opus-45 is not claude-opus-4.
        assert!(!t.rate("claude-opus-45").1);
    }

    #[test]
    fn tokens_are_priced_exactly_and_rounded_up_once() {
        let t = PriceTable::shipped().unwrap();
        // Sonnet 4.6: 1000 in × $3 + 500 out × $15 + 2000 write × $3.75 + 10000 read × $0.30
        // = 0.003 + 0.0075 + 0.0075 + 0.003 = $0.021.
        let p = t.price(&[("claude-sonnet-4-6".into(), tokens(1000, 500, 2000, 10_000))]);
        assert_eq!(p.cost, Money(21_000));
        assert!(p.unknown.is_empty());
        // One input token of Haiku 3: $0.25 / 1e6 = 0.25 micro-dollars, rounded up to 1.
        let p = t.price(&[("claude-3-haiku-20240307".into(), tokens(1, 0, 0, 0))]);
        assert_eq!(p.cost, Money(1));
        // 1-hour cache writes cost twice the input price.
        let mut hour = tokens(0, 0, 0, 0);
        hour.cache_write_1h = 1_000_000;
        let p = t.price(&[("claude-opus-4-6".into(), hour)]);
        assert_eq!(p.cost, Money(10 * MICROS));
    }

    #[test]
    fn an_unknown_model_costs_the_dearest_rate_and_is_named() {
        let t = PriceTable::shipped().unwrap();
        let p = t.price(&[
            ("mystery-model".into(), tokens(1_000_000, 0, 0, 0)),
            ("mystery-model".into(), tokens(0, 1_000_000, 0, 0)),
        ]);
        let dearest = t.dearest();
        assert_eq!(p.cost.0, dearest.input + dearest.output);
        assert!(p.cost.0 >= 10 * MICROS + 50 * MICROS);
        assert_eq!(p.unknown, ["mystery-model"]);
    }

    #[test]
    fn a_users_table_overrides_the_shipped_one_and_errors_name_file_and_field() {
        let dir = std::env::temp_dir().join(format!("ralph-prices-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("prices.json");
        std::fs::write(
            &file,
            r#"{"checked":"2027-01-01","source":"my contract","models":{"claude-sonnet-4-6":{"input":"1","output":2,"cache_write":0,"cache_read":0},"claude-mock":{"input":1,"output":1,"cache_write":1,"cache_read":1}}}"#,
        )
        .unwrap();
        let t = PriceTable::load(Some(&file)).unwrap();
        assert_eq!(t.rate("claude-sonnet-4-6").0.input, MICROS);
        assert!(t.rate("claude-mock").1);
        assert_eq!(t.rate("claude-opus-4-6").0.input, 5 * MICROS, "others kept");
        std::fs::write(&file, r#"{"models":{"m":{"input":-1}}}"#).unwrap();
        let e = PriceTable::load(Some(&file)).unwrap_err().to_string();
        assert!(
            e.contains("prices.json") && e.contains("models.m.input"),
            "{e}"
        );
        std::fs::write(&file, "{").unwrap();
        assert!(matches!(
            PriceTable::load(Some(&file)),
            Err(PriceError::Json { .. })
        ));
        std::fs::remove_file(&file).unwrap();
        assert_eq!(
            PriceTable::load(Some(&file)).unwrap(),
            PriceTable::shipped().unwrap(),
            "no file: the shipped table"
        );
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc/passwd", &file).unwrap();
            let e = PriceTable::load(Some(&file)).unwrap_err().to_string();
            assert!(e.contains("not a regular file"), "{e}");
            std::fs::remove_file(&file).unwrap();
        }
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn the_users_file_is_in_their_config_folder() {
        assert_eq!(
            user_file(None, Some(Path::new("/h"))),
            Some(PathBuf::from("/h/.config/ralph/prices.json"))
        );
        assert_eq!(
            user_file(Some(Path::new("/x")), Some(Path::new("/h"))),
            Some(PathBuf::from("/x/ralph/prices.json"))
        );
    }
}
