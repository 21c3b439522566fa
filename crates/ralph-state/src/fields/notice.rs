//! What a loop tells when it ends, as its file records it: a desktop
//! notification (`notify`) and a JSON POST to a webhook (`notify_url`), the
//! message they carry and what became of each. Sending is not done here:
//! ending a loop returns its last word as data (`lifecycle::Tell`), and
//! whoever ended it sends it after the lock through a [`Courier`] it names
//! (the `ralph-notify` crate, with its HTTP client), so the crate a stop
//! links holds no network code and no global. A notification is best
//! effort: one that fails is logged and never changes the loop.

use crate::money::Money;

/// The longest URL a loop may record.
pub(crate) const MAX_URL: usize = 2048;

/// What a loop asks to be told with, as its file records it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// `notify: true`: a desktop notification.
    pub desktop: bool,
    /// `notify_url`: the webhook to POST to (checked by [`check_url`]).
    pub url: Option<String>,
}

impl Settings {
    pub fn any(&self) -> bool {
        self.desktop || self.url.is_some()
    }

    /// What the arming banner says of these settings. Only the webhook's
    /// host: the banner reaches the model, and a webhook's path is often
    /// its secret.
    pub fn summary(&self) -> Option<String> {
        let host = self
            .url
            .as_deref()
            .and_then(Target::parse)
            .map(|t| format!("a POST to {}", t.host));
        match (self.desktop, host) {
            (false, None) => None,
            (true, None) => Some("a desktop notification".to_owned()),
            (false, Some(h)) => Some(h),
            (true, Some(h)) => Some(format!("a desktop notification and {h}")),
        }
    }

    /// The loop-file fields of these settings, for a new loop.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.desktop {
            out.push(("notify", "true".to_owned()));
        }
        if let Some(url) = &self.url {
            out.push(("notify_url", crate::fields::frontmatter::quote(url)));
        }
        out
    }
}

/// Why a webhook URL was refused when arming.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("--notify-url `{0}`: give an http:// or https:// URL, e.g. https://ntfy.sh/mytopic")]
    Scheme(String),
    #[error("--notify-url: the URL has no host")]
    NoHost,
    #[error("--notify-url: a URL may not hold spaces or control characters")]
    Characters,
    #[error("--notify-url: longer than {MAX_URL} bytes")]
    TooLong,
}

/// A webhook URL as a loop may record it: http or https, a host, no
/// whitespace or control characters, not absurdly long.
pub fn check_url(url: &str) -> Result<String, UrlError> {
    let url = url.trim();
    if url.len() > MAX_URL {
        return Err(UrlError::TooLong);
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError::Characters);
    }
    let parsed = Target::parse(url).ok_or_else(|| UrlError::Scheme(url.to_owned()))?;
    if parsed.host.is_empty() {
        return Err(UrlError::NoHost);
    }
    Ok(url.to_owned())
}

/// The facts of a loop's end that a notification tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndNotice {
    pub loop_name: String,
    /// The project's folder, as a path the user reads.
    pub project: String,
    pub outcome: crate::fields::outcome::Outcome,
    pub why: String,
    pub iterations: u64,
    /// What the loop spent, as its log's last running total.
    pub cost: Option<Money>,
}

/// What a loop spent, from its decision log: each line's `cost_usd` is the
/// running total after that turn, so the figure is the last one logged,
/// never a sum of them (`None` when no line has one). Only a regular file,
/// never through a link, only its end.
pub(crate) fn logged_cost(log: &std::path::Path) -> Option<Money> {
    let bytes = ralph_fs::safe_fs::read_tail(log, ralph_fs::safe_fs::LOG_TAIL_CAP).ok()?;
    String::from_utf8_lossy(&bytes)
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|l| l.get("cost_usd").and_then(Money::from_json_up))
}

/// What became of one notification, for the loop's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Posted; the server answered with this status.
    Posted(u16),
    /// Handed to another program (notify-send, osascript, PowerShell), not waited for.
    HandedOff(&'static str),
    Failed(String),
}

/// Who carries a loop's last word: tells `ending` as `settings` ask and
/// says what became of each channel (`("url", …)`, `("desktop", …)`). The
/// binary and `ralph run` name `ralph_notify::send`; the libraries below it
/// only hand over what to tell ([`crate::lifecycle::Tell`]).
pub type Courier = fn(&Settings, &EndNotice) -> Vec<(&'static str, Delivery)>;

/// What became of each channel without a courier (a test, a fuzz target):
/// logged as failed rather than passed over in silence.
pub(crate) fn undelivered(settings: &Settings) -> Vec<(&'static str, Delivery)> {
    let none = || Delivery::Failed("this program sends no notifications".to_owned());
    let mut out = Vec::new();
    if settings.desktop {
        out.push(("desktop", none()));
    }
    if settings.url.is_some() {
        out.push(("url", none()));
    }
    out
}

/// The webhook's topic: its URL's `#fragment`, which HTTP never sends
/// (ntfy reads it from the body).
pub fn topic(url: &str) -> Option<String> {
    Target::parse(url).and_then(|t| t.fragment)
}

/// Where a webhook URL posts, in words for the user (`ralph adopt`): its host, port and
/// path, escaped; `None` for a URL ralph would never call.
pub fn destination(url: &str) -> Option<String> {
    let url = check_url(url).ok()?;
    let t = Target::parse(&url)?;
    Some(format!(
        "host {}, port {}, path {}",
        ralph_fs::display::line(&t.host),
        t.port,
        ralph_fs::display::line(&t.path)
    ))
}

/// An http(s) URL taken apart, as far as a POST needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
    /// The path and query, `/` when empty.
    path: String,
    fragment: Option<String>,
}

impl Target {
    fn parse(url: &str) -> Option<Self> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            (true, url.strip_prefix("https://")?)
        };
        let (rest, fragment) = match rest.split_once('#') {
            Some((r, f)) => (r, Some(f.to_owned()).filter(|f| !f.is_empty())),
            None => (rest, None),
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, ""),
        };
        // Credentials in the URL are not supported: they would be sent in the clear.
        if authority.contains('@') {
            return None;
        }
        let default = if tls { 443 } else { 80 };
        let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
            let (host, after) = rest.split_once(']')?;
            match after.strip_prefix(':') {
                Some(p) => (host.to_owned(), p.parse().ok()?),
                None if after.is_empty() => (host.to_owned(), default),
                None => return None,
            }
        } else {
            match authority.split_once(':') {
                Some((h, p)) => (h.to_owned(), p.parse().ok()?),
                None => (authority.to_owned(), default),
            }
        };
        let path = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("/{path}")
        };
        Some(Self {
            host,
            port,
            path,
            fragment,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_apart_and_bad_ones_refused() {
        let t = Target::parse("http://127.0.0.1:8080/hook?x=1#topic").unwrap();
        assert_eq!(
            (
                t.host.as_str(),
                t.port,
                t.path.as_str(),
                t.fragment.as_deref()
            ),
            ("127.0.0.1", 8080, "/hook?x=1", Some("topic"))
        );
        let t = Target::parse("https://ntfy.sh").unwrap();
        assert_eq!((t.port, t.path.as_str()), (443, "/"));
        assert_eq!(Target::parse("http://ntfy.sh").unwrap().port, 80);
        assert!(check_url("ftp://x").is_err());
        assert!(check_url("http://").is_err());
        assert!(check_url("http://a b").is_err());
        assert!(check_url("http://user:pw@host/").is_err());
        assert!(check_url("http://host:99999/").is_err());
        assert!(check_url(&format!("https://h/{}", "a".repeat(MAX_URL))).is_err());
        assert_eq!(
            check_url(" https://hooks.slack.com/services/T/B/X ").unwrap(),
            "https://hooks.slack.com/services/T/B/X"
        );
    }

    #[test]
    fn the_banner_names_only_the_webhooks_host() {
        let s = Settings {
            desktop: true,
            url: Some("https://hooks.slack.com/services/T0/B0/SECRET".into()),
        };
        let words = s.summary().unwrap();
        assert_eq!(
            words,
            "a desktop notification and a POST to hooks.slack.com"
        );
        assert_eq!(Settings::default().summary(), None);
    }

    #[test]
    fn the_cost_is_the_last_running_total_never_a_sum_of_them() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("l.log.jsonl");
        // Three iterations of $0.05 each: the log carries 0.05, 0.1, 0.15.
        let lines = [
            r#"{"decision":"block","iteration":1,"cost_usd":0.05,"why":"x"}"#,
            r#"{"decision":"block","iteration":2,"cost_usd":0.1,"why":"x"}"#,
            r#"{"decision":"end","iteration":3,"cost_usd":0.15,"why":"x"}"#,
            r#"{"decision":"notify","why":"url: posted (HTTP 200)"}"#,
        ];
        std::fs::write(&log, lines.join("\n")).unwrap();
        assert_eq!(logged_cost(&log), Some(Money(150_000)));
    }
}
