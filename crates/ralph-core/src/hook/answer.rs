//! The hook's answer on stdout. Built with serde, so quoting can never break
//! it, and printed as exactly one JSON document (or nothing at all).

use serde_json::json;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Allow the stop and say nothing.
    Silent,
    /// Allow the stop and tell the user something (never the model).
    Notice(String),
    /// Keep the session going: `reason` goes to the model, `status` to the user.
    Block { reason: String, status: String },
    /// `SessionStart` only: `context` reaches the model's next request
    /// (`additionalContext`, also after `/clear`), `status` the user.
    Context { context: String, status: String },
}

impl Answer {
    /// The exact bytes for stdout: empty for `Silent`, else one JSON object
    /// and a newline. `{"decision":"allow"}` is not valid and never produced.
    pub fn render(&self) -> String {
        let value = match self {
            Self::Silent => return String::new(),
            Self::Notice(message) => json!({ "systemMessage": message }),
            Self::Block { reason, status } => json!({
                "decision": "block",
                "reason": reason,
                "systemMessage": status,
            }),
            Self::Context { context, status } => json!({
                "hookSpecificOutput": {
                    "hookEventName": "SessionStart",
                    "additionalContext": context,
                },
                "systemMessage": status,
            }),
        };
        format!("{value}\n")
    }

    /// The same answer with one more line for the user.
    pub(crate) fn with_notice(self, extra: String) -> Self {
        match self {
            Self::Silent => Self::Notice(extra),
            Self::Notice(m) => Self::Notice(format!("{m}\n{extra}")),
            Self::Block { reason, status } => Self::Block {
                reason,
                status: format!("{status}\n{extra}"),
            },
            Self::Context { context, status } => Self::Context {
                context,
                status: format!("{status}\n{extra}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_valid_json() {
        assert_eq!(Answer::Silent.render(), "");
        let b = Answer::Block {
            reason: "say \"hi\"\n$HOME `x`".into(),
            status: "s".into(),
        };
        let v: serde_json::Value = serde_json::from_str(&b.render()).unwrap();
        assert_eq!(v["decision"], "block");
        assert_eq!(v["reason"], "say \"hi\"\n$HOME `x`");
        let n: serde_json::Value =
            serde_json::from_str(&Answer::Notice("m".into()).render()).unwrap();
        assert_eq!(n, json!({"systemMessage": "m"}));
    }
}
