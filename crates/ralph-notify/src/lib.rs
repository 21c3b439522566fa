//! The courier of a loop's last word (`ralph_state::fields::notice`):
//! a desktop notification (`--notify`) and a JSON POST to a webhook
//! (`--notify-url`). None delays its caller by more than [`BUDGET`].
//!
//! Internal to ralph: its API is the `ralph` command and the plugin, not this
//! crate; `pub` here names only what another of ralph's crates uses.
//!
//! The webhook is posted with ureq (rustls for `https://`), on a thread the
//! caller waits for at most [`BUDGET`], name lookup and TLS included
//! (docs/decisions/http-client.md). Desktop notifications are handed to `notify-send`
//! (Linux), `osascript` (macOS) or PowerShell (Windows), detached; the
//! terminal bell, when stderr is a terminal, is the floor. Whoever ends a
//! loop hands [`send`] its last word once the project's lock is let go
//! (`lifecycle::Tell::send`): the Stop hook through the binary, the commands
//! and `ralph run` themselves.

use std::io::{IsTerminal, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use serde::Serialize;

use ralph_state::fields::notice::{Delivery, EndNotice, Settings};
use ralph_state::money::Money;

/// The longest a notification may hold up its caller.
pub(crate) const BUDGET: Duration = Duration::from_millis(700);

/// What the webhook receives. `text` is what Slack-compatible webhooks
/// show; `title`, `message` and `topic` (the URL's `#fragment`, never sent
/// by HTTP itself) are ntfy's JSON publishing fields; the rest are the facts.
/// The cost is sent exactly, twice over: `cost_usd` as a decimal string
/// (`"0.15"`, never a float a reader would round) and `cost_micro_usd` as
/// whole micro-dollars (`150000`); both `null` when nothing was counted.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Message {
    #[serde(rename = "loop")]
    pub loop_name: String,
    pub project: String,
    pub outcome: String,
    pub why: String,
    pub iterations: u64,
    #[serde(serialize_with = "exact_decimal")]
    pub cost_usd: Option<Money>,
    pub cost_micro_usd: Option<u64>,
    pub title: String,
    pub message: String,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
}

impl Message {
    /// The message about a loop's end.
    pub fn ended(ending: &EndNotice) -> Self {
        let EndNotice {
            loop_name: name,
            project,
            outcome,
            why,
            iterations,
            cost: cost_usd,
        } = ending;
        let (iterations, cost_usd) = (*iterations, *cost_usd);
        let (_, headline) = outcome.headline();
        let project_name = std::path::Path::new(project)
            .file_name()
            .map_or_else(|| project.to_owned(), |n| n.to_string_lossy().into_owned());
        let title = format!("ralph `{name}` {headline}");
        let cost = cost_usd
            .map(|c| format!(", {}", c.dollars()))
            .unwrap_or_default();
        let message = format!(
            "{why} ({}{cost}; {project_name})",
            ralph_state::plural::iterations(iterations)
        );
        Self {
            loop_name: name.to_owned(),
            project: project.to_owned(),
            outcome: outcome.as_str().to_owned(),
            why: why.to_owned(),
            iterations,
            cost_usd,
            cost_micro_usd: cost_usd.map(|c| c.0),
            text: format!("{title}: {message}"),
            title,
            message,
            topic: None,
        }
    }
}

/// `Some(money)` as its exact decimal text, `None` as `null`.
fn exact_decimal<S: serde::Serializer>(cost: &Option<Money>, s: S) -> Result<S::Ok, S::Error> {
    match cost {
        Some(c) => s.serialize_str(&c.decimal()),
        None => s.serialize_none(),
    }
}

/// The courier: tells `ending` as `settings` ask; returns what happened to each
/// channel (`("url", …)`, `("desktop", …)`), within [`BUDGET`] in all.
pub fn send(settings: &Settings, ending: &EndNotice) -> Vec<(&'static str, Delivery)> {
    let message = &Message::ended(ending);
    let mut out = Vec::new();
    if settings.desktop {
        out.push(("desktop", desktop(message)));
    }
    if let Some(url) = &settings.url {
        out.push(("url", post(url, message, BUDGET)));
    }
    out
}

/// A desktop notification through the platform's own tool, detached; the
/// terminal bell when stderr is a terminal.
fn desktop(message: &Message) -> Delivery {
    if std::io::stderr().is_terminal() {
        let _ = std::io::stderr().write_all(b"\x07");
    }
    let title = ralph_fs::display::line(&message.title).into_owned();
    let body = ralph_fs::display::line(&message.message).into_owned();
    let (program, args): (&'static str, Vec<String>) = if cfg!(windows) {
        (
            "powershell",
            vec![
                "-NoProfile".into(),
                "-Command".into(),
                windows_toast(&title, &body),
            ],
        )
    } else if cfg!(target_os = "macos") {
        (
            "osascript",
            vec![
                "-e".into(),
                format!(
                    "display notification {} with title {}",
                    applescript_string(&body),
                    applescript_string(&title)
                ),
            ],
        )
    } else {
        ("notify-send", vec!["--app-name=ralph".into(), title, body])
    };
    match detach(program, &args) {
        Ok(()) => Delivery::HandedOff(program),
        Err(e) => Delivery::Failed(format!("{program}: {e}")),
    }
}

/// An AppleScript string literal.
fn applescript_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A PowerShell script that shows a toast with `title` and `body`, both
/// passed as single-quoted literals (a `'` is doubled; nothing expands).
fn windows_toast(title: &str, body: &str) -> String {
    let lit = |t: &str| format!("'{}'", t.replace('\'', "''"));
    format!(
        "[Windows.UI.Notifications.ToastNotificationManager, Windows.UI.Notifications, ContentType = WindowsRuntime] | Out-Null; \
         $x = [Windows.UI.Notifications.ToastNotificationManager]::GetTemplateContent([Windows.UI.Notifications.ToastTemplateType]::ToastText02); \
         $t = $x.GetElementsByTagName('text'); $t.Item(0).AppendChild($x.CreateTextNode({})) | Out-Null; \
         $t.Item(1).AppendChild($x.CreateTextNode({})) | Out-Null; \
         [Windows.UI.Notifications.ToastNotificationManager]::CreateToastNotifier('ralph').Show([Windows.UI.Notifications.ToastNotification]::new($x))",
        lit(title),
        lit(body)
    )
}

/// Starts `program` with `args` and no stdio, in a process group of its
/// own (a hook's group may be stopped when the hook answers), and does not
/// wait for it; a thread reaps it if the caller lives on.
fn detach(program: &str, args: &[String]) -> std::io::Result<()> {
    let mut command = ralph_fs::process::program(program)?;
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
    }
    let mut child = command.spawn()?;
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// POSTs `message` as JSON to `url` (`http://` or `https://`, TLS by
/// rustls), on a thread the caller waits for at most `budget`, name lookup,
/// connection, TLS and answer included: the stop that ends a loop answers
/// right after, whatever the server does.
pub fn post(url: &str, message: &Message, budget: Duration) -> Delivery {
    if ralph_state::fields::notice::check_url(url).is_err() {
        return Delivery::Failed(format!("not an http(s) URL: {url}"));
    }
    let mut message = message.clone();
    message.topic = ralph_state::fields::notice::topic(url);
    let body = serde_json::to_string(&message).unwrap_or_default();
    // The fragment is the topic (in the body), never sent in the request.
    let url = url.split_once('#').map_or(url, |(u, _)| u).to_owned();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(post_json(&url, &body, budget));
    });
    match rx.recv_timeout(budget) {
        Ok(Ok(status)) if (200..300).contains(&status) => Delivery::Posted(status),
        Ok(Ok(status)) => Delivery::Failed(format!("the server answered HTTP {status}")),
        Ok(Err(e)) => Delivery::Failed(e),
        Err(_) => Delivery::Failed(format!("no answer within {} ms", budget.as_millis())),
    }
}

/// One POST through ureq; the status code of the answer, whatever it is.
fn post_json(url: &str, body: &str, budget: Duration) -> Result<u16, String> {
    // A little past the caller's wait, so that a silent server reads as
    // "no answer within" the budget the user can look up.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(budget + Duration::from_millis(200)))
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent("ralph")
        .build()
        .into();
    agent
        .post(url)
        .header("Content-Type", "application/json")
        .send(body)
        .map(|answer| answer.status().as_u16())
        .map_err(|e| failure_words(&e))
}

/// What went wrong, in the log's words: where it failed, then ureq's why.
fn failure_words(error: &ureq::Error) -> String {
    match error {
        ureq::Error::Io(e) => format!("connection: {e}"),
        ureq::Error::ConnectionFailed => "connection failed".to_owned(),
        ureq::Error::HostNotFound => "the host name did not resolve".to_owned(),
        ureq::Error::Timeout(_) => "no answer in time".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_state::fields::outcome::Outcome;

    #[test]
    fn the_message_has_slack_and_ntfy_fields() {
        let m = Message::ended(&EndNotice {
            loop_name: "docs".into(),
            project: "/p/site".into(),
            outcome: Outcome::Completed,
            why: "done".into(),
            iterations: 3,
            cost: Some(Money(500_000)),
        });
        let v: serde_json::Value = serde_json::to_value(&m).unwrap();
        assert_eq!(
            (&v["cost_usd"], &v["cost_micro_usd"]),
            (&serde_json::json!("0.5"), &serde_json::json!(500_000))
        );
        assert_eq!(v["loop"], "docs");
        assert_eq!(v["outcome"], "completed");
        assert_eq!(v["iterations"], 3);
        assert_eq!(
            v["text"],
            "ralph `docs` completed: done (3 iterations, $0.50; site)"
        );
        assert_eq!(v["title"], "ralph `docs` completed");
        assert!(v.get("topic").is_none());
    }

    #[test]
    fn the_cost_is_sent_exactly_as_a_string_and_in_micro_dollars() {
        let m = Message::ended(&EndNotice {
            loop_name: "l".into(),
            project: "/p".into(),
            outcome: Outcome::MaxIterations,
            why: "x".into(),
            iterations: 3,
            cost: Some(Money(150_000)),
        });
        let body = serde_json::to_string(&m).unwrap();
        assert!(
            body.contains(r#""cost_usd":"0.15","cost_micro_usd":150000"#),
            "{body}"
        );
        assert!(m.text.contains("$0.15"), "{}", m.text);
    }

    #[test]
    fn one_iteration_reads_as_one_iteration() {
        let m = Message::ended(&EndNotice {
            loop_name: "l".into(),
            project: "/p/site".into(),
            outcome: Outcome::Completed,
            why: "done".into(),
            iterations: 1,
            cost: None,
        });
        assert_eq!(m.message, "done (1 iteration; site)");
    }

    #[test]
    fn a_url_ralph_would_never_call_is_not_posted() {
        let m = Message::ended(&EndNotice {
            loop_name: "l".into(),
            project: "/p".into(),
            outcome: Outcome::Completed,
            why: "x".into(),
            iterations: 1,
            cost: None,
        });
        assert_eq!(
            post("ftp://example.com/x", &m, BUDGET),
            Delivery::Failed("not an http(s) URL: ftp://example.com/x".into())
        );
    }
}
