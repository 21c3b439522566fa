//! An option's kind (a switch, a text, a whole number, a duration), the
//! checks its value gets (as clap applies them), and the error that names
//! the option and the fix. Shared by the guards' table (`guards`) and the
//! slash command's splitter (`control::arguments`).

/// What an option's value is, so the slash command checks it as clap does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// A switch: no value.
    Flag,
    Text,
    /// A whole number such as 10.
    Number,
    /// A duration with a unit, such as 90m or 2h.
    Duration,
    /// A dollar amount such as 5 or 2.50 (`money::Money`).
    Money,
    /// A switch that may carry a value after `=` (`--prd`, `--prd=x.json`):
    /// the next word is never taken, so the task cannot be mistaken for it.
    OptionalValue,
}

/// A duration value as ralph accepts it: digits with a unit (`90m`, `2h`,
/// `1h30m`, `45s`). A bare number is refused: `2` would silently be seconds.
pub fn check_duration(option: &str, value: &str) -> Result<String, ArgumentsError> {
    let text = value.trim();
    let bare = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if bare {
        return Err(ArgumentsError::DurationUnit {
            option: option.to_owned(),
            value: text.to_owned(),
        });
    }
    match crate::time::parse_duration(text) {
        Some(_) => Ok(text.to_owned()),
        None => Err(ArgumentsError::BadDuration {
            option: option.to_owned(),
            value: value.to_owned(),
        }),
    }
}

/// A dollar amount, read exactly (`5`, `2.50`); given back as written
/// without trailing zeros, the way a loop file stores it.
pub fn check_money(option: &str, value: &str) -> Result<String, ArgumentsError> {
    crate::money::Money::parse(value)
        .map(crate::money::Money::decimal)
        .map_err(|e| ArgumentsError::BadMoney {
            option: option.to_owned(),
            value: value.to_owned(),
            why: e.to_string(),
        })
}

/// A whole-number value, as clap reads `u64`.
pub fn check_number(option: &str, value: &str) -> Result<u64, ArgumentsError> {
    value
        .trim()
        .parse::<u64>()
        .map_err(|_| ArgumentsError::BadNumber {
            option: option.to_owned(),
            value: value.to_owned(),
        })
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentsError {
    #[error("`--{0}` needs a value, e.g. `{example}`", example = example(.0))]
    MissingValue(String),
    #[error(
        "`{word}` is not a ralph option{hint}; nothing was armed. Put words that belong to the task inside quotes, or after `--`",
        hint = .suggestion.map(|s| format!(" (did you mean `--{s}`?)")).unwrap_or_default()
    )]
    UnknownOption {
        word: String,
        suggestion: Option<&'static str>,
    },
    #[error(
        "`--{option} {value}` has no unit; nothing was armed. Write e.g. `--{option} {value}m` (minutes) or `--{option} {value}h` (hours); units: s, m, h, d"
    )]
    DurationUnit { option: String, value: String },
    #[error(
        "`--{option} {value}`: expected a duration such as 90m, 2h or 1h30m; nothing was armed"
    )]
    BadDuration { option: String, value: String },
    #[error("expected nothing, a loop name, `--name NAME` or `--all`, not `{0}`")]
    BadSelection(String),
    #[error("`--{option} {value}`: expected a whole number such as 10; nothing was armed")]
    BadNumber { option: String, value: String },
    #[error("`--{option} {value}`: {why}; nothing was armed")]
    BadMoney {
        option: String,
        value: String,
        why: String,
    },
    #[error("`--{option} {value}`: {why}; nothing was armed")]
    BadGlob {
        option: String,
        value: String,
        why: String,
    },
    #[error("{0}; nothing was armed")]
    BadFresh(String),
    /// An option in the slash command's table that arming does not know.
    #[error("unknown option --{0}")]
    NoSuchOption(String),
}

/// What the user typed is wrong.
impl ralph_fs::error::Exit for ArgumentsError {
    fn exit_class(&self) -> ralph_fs::error::ExitClass {
        ralph_fs::error::ExitClass::Usage
    }
}

/// A value that fits the option, for the "needs a value" message.
pub fn example(option: &str) -> String {
    let value = match option {
        "name" => "docs",
        "completion-promise" => "DONE",
        "abort-promise" => "BLOCKED",
        "max-duration" => "2h",
        "verify-timeout" => "5m",
        "verify" => "'cargo test'",
        "max-tokens" => "2000000",
        "session-id" => "<session id>",
        "protect" => "'tests/**'",
        "scope" => "'src/**'",
        "gate-setup" => "'uv sync --frozen'",
        "gate-setup-timeout" => "5m",
        "holdout" => "/home/me/acceptance",
        "fresh-at" => "60",
        "fresh-via" => "run",
        _ => "10",
    };
    format!("--{option} {value}")
}
