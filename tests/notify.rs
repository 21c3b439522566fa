//! `--notify-url` and `--notify`: a loop that ends tells a webhook (a
//! plain `TcpListener` on 127.0.0.1 here) and the desktop; a webhook that
//! never answers, or a closed port, costs the stop less than a second and
//! changes nothing; a URL changed in the file after arming is never called.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::describe;
use crate::support::project::{LOOP, Project};
#[cfg(unix)]
use crate::support::{held_until, wait_for_file};

/// How long a stop may take before the test calls it hung: never what decides a pass (a
/// saturated machine can take seconds to start a debug binary).
const HANG_GUARD: Duration = Duration::from_secs(60);

/// One request as the test server read it: its request line and its JSON body.
struct Posted {
    request_line: String,
    body: Value,
}

/// A webhook on 127.0.0.1 that answers `200 OK` to each request and hands
/// what it got to the test.
fn webhook() -> (String, mpsc::Receiver<Posted>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if let Some(posted) = read_request(&mut stream) {
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                let _ = tx.send(posted);
            }
        }
    });
    (format!("http://127.0.0.1:{port}"), rx)
}

fn read_request(stream: &mut TcpStream) -> Option<Posted> {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        // Header names are case-insensitive (HTTP/1.1 clients send either).
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length").then_some(value)
            })
            .and_then(|n| n.trim().parse().ok())?;
        if body.len() >= length {
            return Some(Posted {
                request_line: head.lines().next()?.to_owned(),
                body: serde_json::from_str(&body[..length]).ok()?,
            });
        }
    }
}

/// Arms a loop of one iteration for session s1 with `flags`.
fn arm(p: &Project, flags: &[&str]) {
    let mut args = vec!["start", "--session-id", "s1", "--max-iterations", "1"];
    args.extend_from_slice(flags);
    args.push("Tidy the docs");
    let out = p.ralph_in(&args, p.root(), b"", &[]);
    assert!(out.status.success(), "{}", describe(&out));
}

/// The Stop that ends the loop (its one iteration is used up); how long it took.
fn last_stop(p: &Project) -> Duration {
    let event =
        json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": "done for now"});
    let started = Instant::now();
    let out = p.ralph_in(
        &["hook", "stop"],
        p.root(),
        event.to_string().as_bytes(),
        &[("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0")],
    );
    let took = started.elapsed();
    assert!(out.status.success(), "{}", describe(&out));
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        answer.contains("stopped at its iteration limit"),
        "{}",
        describe(&out)
    );
    took
}

/// The ended loop's log lines, from the history.
fn history_log(p: &Project) -> Vec<Value> {
    let out = p.ralph_in(&["log", "--json"], p.root(), b"", &[]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn notify_lines(p: &Project) -> Vec<String> {
    history_log(p)
        .iter()
        .filter(|l| l["decision"] == "notify")
        .filter_map(|l| l["why"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_webhook_gets_the_json_when_a_loop_ends() {
    let p = Project::new();
    let (base, posted) = webhook();
    let url = format!("{base}/hooks/ralph?k=1#mytopic");
    arm(&p, &["--notify-url", &url]);
    assert!(
        p.read(LOOP).contains(&format!("notify_url: \"{url}\"")),
        "recorded at arming"
    );
    last_stop(&p);
    let got = posted.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(got.request_line, "POST /hooks/ralph?k=1 HTTP/1.1");
    let b = &got.body;
    assert_eq!(b["loop"], "ralph");
    assert_eq!(b["project"], p.root().display().to_string());
    assert_eq!(b["outcome"], "max_iterations");
    assert_eq!(b["iterations"], 1);
    assert!(b["why"].as_str().unwrap().contains("iteration"), "{b}");
    assert_eq!(b["cost_usd"], Value::Null);
    // Slack-compatible webhooks show `text`; ntfy's JSON form reads topic, title, message.
    assert!(
        b["text"]
            .as_str()
            .unwrap()
            .starts_with("ralph `ralph` stopped at its iteration limit: "),
        "{b}"
    );
    assert_eq!(b["topic"], "mytopic");
    assert_eq!(b["title"], "ralph `ralph` stopped at its iteration limit");
    assert!(b["message"].is_string(), "{b}");
    assert_eq!(notify_lines(&p), vec!["url: posted (HTTP 200)".to_owned()]);
    assert!(
        posted.recv_timeout(Duration::from_millis(300)).is_err(),
        "posted once"
    );
}

#[test]
fn a_webhook_that_never_answers_or_a_closed_port_costs_the_stop_under_a_second() {
    // Accepts and then says nothing, holding every connection open.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}/hook", silent.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming() {
            held.push(s);
        }
    });
    // A port nobody listens on any more.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    for (url, why) in [(silent_url, "no answer within"), (closed_url, "connect")] {
        let p = Project::new();
        arm(&p, &["--notify-url", &url]);
        // The silent server's stop ends by ralph's own budget (700 ms, said as "no answer
        // within" below), not by the test's clock; the wall time is only a hang guard.
        let took = last_stop(&p);
        assert!(took < HANG_GUARD, "the stop took {took:?} with {url}");
        let lines = notify_lines(&p);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("url: failed: ") && lines[0].contains(why),
            "{lines:?}"
        );
        // The loop ended as it would have without the webhook.
        let status = p.ralph_in(&["status", "--json"], p.root(), b"", &[]);
        let v: Value = serde_json::from_slice(&status.stdout).unwrap();
        assert_eq!(v["loops"][0]["outcome"], "max_iterations", "{v}");
        assert!(!p.exists(LOOP));
    }
}

#[test]
fn a_notify_url_changed_in_the_file_is_never_called() {
    let p = Project::new();
    let (armed_url, _armed) = webhook();
    let planted = TcpListener::bind("127.0.0.1:0").unwrap();
    planted.set_nonblocking(true).unwrap();
    let planted_url = format!("http://{}/steal", planted.local_addr().unwrap());
    arm(&p, &["--notify-url", &armed_url]);
    let text = p.read(LOOP);
    let edited = text.replace(&armed_url, &planted_url);
    assert_ne!(text, edited);
    std::fs::write(p.path(LOOP), edited).unwrap();
    let event = json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": "done"});
    let out = p.ralph_in(
        &["hook", "stop"],
        p.root(),
        event.to_string().as_bytes(),
        &[],
    );
    assert!(out.status.success(), "{}", describe(&out));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        planted.accept().is_err(),
        "the URL planted in the file was called: {}",
        describe(&out)
    );
}

#[cfg(unix)]
#[test]
fn notify_hands_the_desktop_a_notification_and_does_not_wait() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    arm(&p, &["--notify"]);
    assert!(p.read(LOOP).contains("\nnotify: true\n"));
    let bin = tempfile::tempdir().unwrap();
    let seen = bin.path().join("seen");
    let tool = if cfg!(target_os = "macos") {
        "osascript"
    } else {
        "notify-send"
    };
    let (release, finished) = (bin.path().join("release"), bin.path().join("finished"));
    std::fs::write(
        bin.path().join(tool),
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}.part' && mv '{0}.part' '{0}'\n{}",
            seen.display(),
            held_until(&release, &finished)
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        bin.path().join(tool),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let event = json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": "done"});
    let out = p.ralph_in(
        &["hook", "stop"],
        p.root(),
        event.to_string().as_bytes(),
        &[("PATH", &path)],
    );
    assert!(out.status.success(), "{}", describe(&out));
    // The tool is held until the test lets it go: had the hook waited for it, it would
    // have finished by now.
    assert!(!finished.exists(), "the hook waited for {tool}");
    std::fs::write(&release, "").unwrap();
    assert!(wait_for_file(&seen), "{tool} never ran");
    let args = std::fs::read_to_string(&seen).unwrap();
    assert!(
        args.contains("ralph `ralph` stopped at its iteration limit"),
        "{args}"
    );
    assert_eq!(notify_lines(&p), vec![format!("desktop: handed to {tool}")]);
}

#[test]
fn a_bad_url_arms_nothing_and_says_why() {
    let p = Project::new();
    for (url, says) in [
        ("ftp://example.com/x", "give an http:// or https:// URL"),
        (
            "http://user:secret@example.com/",
            "give an http:// or https:// URL",
        ),
        ("http://exa mple.com/", "spaces or control characters"),
    ] {
        let out = p.ralph_in(
            &["start", "--session-id", "s1", "--notify-url", url, "task"],
            p.root(),
            b"",
            &[],
        );
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{}",
            describe(&out)
        );
        assert!(!p.exists(LOOP));
    }
    // The slash command's raw arguments take the same options.
    let out = p.ralph_in(
        &["start", "--session-id", "s1", "--raw-arguments"],
        p.root(),
        b"Tidy the docs --notify --notify-url http://127.0.0.1:9/x",
        &[],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let text = p.read(LOOP);
    assert!(
        text.contains("\nnotify: true\n") && text.contains("notify_url: \"http://127.0.0.1:9/x\""),
        "{text}"
    );
}

/// `https://` is posted by ralph itself over TLS (no `curl`, no other
/// program): the server sees a TLS handshake, never the URL's secret path in
/// the clear, and a server that says nothing costs the stop under a second.
#[test]
fn https_is_posted_over_tls_by_ralph_itself_within_the_budget() {
    let p = Project::new();
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "https://{}/services/T0/B0/SECRET",
        server.local_addr().unwrap()
    );
    let (tx, first_bytes) = mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut s in server.incoming().flatten() {
            let mut head = [0u8; 64];
            let n = s.read(&mut head).unwrap_or(0);
            let _ = tx.send(head[..n].to_vec());
            held.push(s); // says nothing back
        }
    });
    let out = p.ralph_in(
        &[
            "start",
            "--session-id",
            "s1",
            "--max-iterations",
            "1",
            "--notify-url",
            &url,
            "task",
        ],
        p.root(),
        b"",
        &[],
    );
    let banner = String::from_utf8_lossy(&out.stdout);
    assert!(
        banner.contains("When it ends: a POST to 127.0.0.1."),
        "{banner}"
    );
    assert!(
        !banner.contains("SECRET"),
        "the banner reaches the model: {banner}"
    );
    let event = json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": "done"});
    let started = Instant::now();
    // No curl anywhere on PATH: ralph needs no other program for TLS.
    let out = p.ralph_in(
        &["hook", "stop"],
        p.root(),
        event.to_string().as_bytes(),
        &[("PATH", "/nonexistent")],
    );
    assert!(out.status.success(), "{}", describe(&out));
    // Ended by ralph's own budget (the "no answer within" below); the wall time is only a
    // hang guard.
    assert!(
        started.elapsed() < HANG_GUARD,
        "the stop waited {:?} on a silent server",
        started.elapsed()
    );
    let hello = first_bytes.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(hello.first(), Some(&0x16), "not a TLS handshake: {hello:?}");
    assert!(
        !String::from_utf8_lossy(&hello).contains("SECRET"),
        "the path went in the clear"
    );
    let lines = notify_lines(&p);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("url: failed: no answer within"),
        "{lines:?}"
    );
}

/// In the real Claude Code client: `/ralph-loop … --notify-url` arms the loop in the
/// UserPromptSubmit hook, and the Stop hook that ends it posts to the webhook.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn the_real_clients_stop_hook_posts_when_the_loop_ends() {
    use crate::support::mock_api::{MockApi, Reply};
    use crate::support::sandbox_or_skip;
    let sandbox = sandbox_or_skip!("the_real_clients_stop_hook_posts_when_the_loop_ends");
    let (base, posted) = webhook();
    let api = MockApi::start(vec![Reply::text("step one"), Reply::text("step two")]);
    let run = sandbox.claude(
        &api,
        &format!(
            "/ralph-loop Refactor the config loader --max-iterations 2 --notify-url {base}/hook"
        ),
        &[],
    );
    assert!(run.status.success(), "{}", run.describe());
    let got = posted
        .recv_timeout(Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("no POST\n{}\n{}", api.describe(), run.describe()));
    assert_eq!(got.request_line, "POST /hook HTTP/1.1");
    assert_eq!(got.body["outcome"], "max_iterations", "{}", got.body);
    assert_eq!(got.body["iterations"], 2, "{}", got.body);
    assert_eq!(got.body["loop"], "ralph", "{}", got.body);
}

/// A `claude -p --output-format json` result that cost `usd` (what `ralph run` reads).
fn costing(usd: &str) -> String {
    format!(
        r#"{{"type":"result","subtype":"success","is_error":false,"result":"working","total_cost_usd":{usd},"usage":{{"input_tokens":1,"output_tokens":1}}}}"#
    )
}

/// Issue 37: each log line carries the running total, so every figure is the last total,
/// never a sum of totals; the webhook carries it exactly; the chart shows each iteration's own.
#[test]
fn every_money_figure_is_the_sum_of_what_each_iteration_reported() {
    let p = Project::new();
    let reported = ["0.05", "0.1", "0.05"];
    for (i, usd) in reported.iter().enumerate() {
        p.write(&format!(".agent/reply-{}", i + 1), &costing(usd));
    }
    p.write(
        ".agent/agent.sh",
        "cat > /dev/null; n=$(cat .agent/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > .agent/n; cat .agent/reply-$n\n",
    );
    // What each iteration reported, added up exactly: $0.20 (200 000 micro-dollars).
    let each: Vec<u64> = reported
        .iter()
        .map(|u| ralph_state::money::Money::parse(u).unwrap().0)
        .collect();
    let total: u64 = each.iter().sum();
    assert_eq!(total, 200_000);
    let (base, posted) = webhook();
    let out = p.ralph_in(
        &[
            "run",
            "--agent",
            "sh .agent/agent.sh",
            "--max-iterations",
            "3",
            "--max-cost",
            "5",
            "--notify-url",
            &base,
            "Tidy the docs",
        ],
        p.root(),
        b"",
        &[],
    );
    let shown = describe(&out);
    assert!(shown.contains("spent $0.20"), "the end message: {shown}");
    // The webhook: exact decimal text and whole micro-dollars.
    let b = posted.recv_timeout(Duration::from_secs(5)).unwrap().body;
    assert_eq!(
        (&b["cost_usd"], &b["cost_micro_usd"]),
        (&json!("0.2"), &json!(total)),
        "{b}"
    );
    assert!(b["text"].as_str().unwrap().contains("$0.20"), "{b}");
    // ralph status, in words and as JSON.
    let status = p.ralph_in(&["status"], p.root(), b"", &[]);
    assert!(
        describe(&status).contains("spent $0.20 of $5.00"),
        "{}",
        describe(&status)
    );
    let json_out = p.ralph_in(&["status", "--json"], p.root(), b"", &[]);
    let v: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(v["loops"][0]["cost_usd"], json!(0.2), "{v}");
    // The report: the total once, and each iteration's own spend.
    let rep = p.ralph_in(&["report", "--name", "ralph"], p.root(), b"", &[]);
    assert!(rep.status.success(), "{}", describe(&rep));
    let page = p.read(".claude/ralph/reports/ralph.html");
    assert!(page.contains("$0.20 spent of $5.00"), "the header");
    for micros in each {
        assert!(
            page.contains(&format!("data-micro-usd=\"{micros}\"")),
            "a bar of {micros}"
        );
    }
    assert!(
        !page.contains("$0.40") && !page.contains("$0.32"),
        "never a sum of totals"
    );
}

/// A loop ended by a command or by `ralph run`, not a stop, tells its last word too, once its
/// lock is let go (issue 47: no global courier; whoever ended the loop sends what ending it
/// returned): `ralph cancel`, and a run whose agent used up its iterations.
#[test]
fn cancel_and_a_runs_ending_send_the_ended_loops_last_word() {
    let p = Project::new();
    let (base, posted) = webhook();
    let url = format!("{base}/hooks/ralph");
    arm(&p, &["--notify-url", &url]);
    let out = p.ralph_in(&["cancel", "--name", "ralph"], p.root(), b"", &[]);
    assert!(out.status.success(), "{}", describe(&out));
    let got = posted.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(got.body["outcome"], "cancelled");
    assert_eq!(notify_lines(&p), vec!["url: posted (HTTP 200)".to_owned()]);

    let run = Project::new();
    run.write("agent.sh", "cat > /dev/null; echo working");
    let out = run.ralph_in(
        &[
            "run",
            "--agent",
            "sh agent.sh",
            "--max-iterations",
            "1",
            "--notify-url",
            &url,
            "Tidy the docs",
        ],
        run.root(),
        b"",
        &[],
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let got = posted.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(got.body["outcome"], "max_iterations");
    assert_eq!(
        notify_lines(&run),
        vec!["url: posted (HTTP 200)".to_owned()]
    );
}
