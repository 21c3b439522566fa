//! `ralph report`: pages of a short loop, a budget-ended loop and a fleet of
//! three, rendered in headless Chromium (the DOM checked, a screenshot kept
//! in `target/report-screenshots/`), loaded with the network off, and with
//! hostile strings that must stay text. Chromium comes from
//! `apt-get install chromium` (`.ci/run`); without it, and without `CI`,
//! these tests are reported as ignored.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::project::Project;
use crate::support::{describe, repo_root};
#[cfg(unix)]
use crate::support::{held_until, wait_for_file};

/// A loop that hit its token budget at iteration 5, with a failing gate on
/// the way, a cost per iteration and a receipt: every series the page has.
fn budget_loop(p: &Project, task: &str) {
    p.write(
        ".claude/ralph/history/20261201T100500Z-budget.md",
        &format!(
            "---\nactive: false\niteration: 5\nmax_iterations: 20\nsession_id: s1\ncompletion_promise: \"DONE\"\n\
             started_at: \"2026-12-01T10:00:00Z\"\nmax_tokens: 50000\nverify: \"cargo test\"\nmax_verify_failures: 3\n\
             verify_failures: 2\ntokens_used: 52000\nsame_reply_count: 1\nno_progress_count: 2\n\
             max_cost: 1\ncost_usd: 0.65\ncheck: \"cargo check\"\n\
             outcome: token_budget\nended_at: \"2026-12-01T10:05:00Z\"\n---\n\n{task}\n"
        ),
    );
    // As ralph logs them: `cost_usd` is the running total after each turn.
    let lines = [
        r#"{"time":"2026-12-01T10:00:40Z","iteration":1,"decision":"block","why":"no promise yet","tokens":9000,"cost_usd":0.11,"check":{"passed":false,"status":"exit 1","failures":6}}"#,
        r#"{"time":"2026-12-01T10:01:30Z","iteration":2,"decision":"block","why":"promise refused: `cargo test` failed\nLast lines of its output:\nFAILED parser::utf8","tokens":21000,"cost_usd":0.26,"verification":{"passed":false,"status":"exit 101","failures":4},"check":{"passed":true,"status":"exit 0"}}"#,
        r#"{"time":"2026-12-01T10:02:10Z","iteration":3,"decision":"block","why":"no promise yet","tokens":30000,"cost_usd":0.38,"a_field_from_a_newer_ralph":{"x":1}}"#,
        r#"{"time":"2026-12-01T10:03:50Z","iteration":4,"decision":"block","why":"promise refused","tokens":41000,"cost_usd":0.52,"verification":{"passed":false,"status":"exit 101","failures":1}}"#,
        "not json at all",
        r#"{"time":"2026-12-01T10:05:00Z","iteration":5,"decision":"end","outcome":"token_budget","why":"the token budget of 50000 is used up (52000)","tokens":52000,"cost_usd":0.65,"receipt":{"branch":"main","commit":"4be1c3a","checks":"2 of 3 passed"}}"#,
    ];
    p.write(
        ".claude/ralph/history/20261201T100500Z-budget.log.jsonl",
        &(lines.join("\n") + "\n"),
    );
}

/// Three stories of a `--parallel` run, each with its record.
fn fleet_of_three(p: &Project, first_title: &str) {
    let stories = [
        ("US-1", "merged", "completed", 3, 12000, 95, first_title),
        (
            "US-2",
            "conflict",
            "completed",
            5,
            30500,
            240,
            "rebase conflicted in src/lib.rs",
        ),
        (
            "US-3",
            "ended",
            "max_iterations",
            8,
            48000,
            610,
            "hit its iteration limit",
        ),
    ];
    for (id, state, outcome, iterations, tokens, seconds, note) in stories {
        let record = serde_json::json!({
            "story": id, "state": state, "outcome": outcome, "iterations": iterations,
            "tokens": tokens, "seconds": seconds, "branch": format!("ralph/{id}"), "note": note,
        });
        p.write(
            &format!(".claude/ralph/stories/{id}.json"),
            &record.to_string(),
        );
    }
}

/// A short loop, really run: three iterations of the example agent.
fn short_loop(p: &Project, task: &str) {
    let agent = repo_root().join("examples/fake-agent.sh");
    let out = p.ralph_in(
        &[
            "run",
            "--agent",
            agent.to_str().unwrap(),
            "--completion-promise",
            "DONE",
            "--max-iterations",
            "5",
            task,
        ],
        p.root(),
        b"",
        &[],
    );
    assert!(out.status.success(), "{}", describe(&out));
}

/// `ralph report ARGS`, the page's path from its output line.
fn report(p: &Project, args: &[&str]) -> PathBuf {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    let out = p.ralph_in(&all, p.root(), b"", &[]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Report written to "))
        .unwrap_or_else(|| panic!("no path in {stdout}"));
    PathBuf::from(path)
}

/// Headless Chromium on `page` with `extra` flags, stopped after a minute;
/// its own profile, so tests running at once never share one.
fn chromium(page: &Path, extra: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium (apt-get install chromium)");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "chromium hung on {}",
            page.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The DOM as Chromium built it.
fn dom(page: &Path) -> String {
    chromium(page, &["--dump-dom"])
}

/// A screenshot of `page` kept as `target/report-screenshots/<name>.png`;
/// returns its path.
fn screenshot(page: &Path, name: &str) -> PathBuf {
    screenshot_sized(page, name, "1000,1400")
}

/// [`screenshot`] in a window of `size` (`width,height`).
fn screenshot_sized(page: &Path, name: &str, size: &str) -> PathBuf {
    let dir = repo_root().join("target/report-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&png);
    chromium(
        page,
        &[
            &format!("--window-size={size}"),
            &format!("--screenshot={}", png.display()),
        ],
    );
    let bytes = std::fs::read(&png).unwrap_or_default();
    assert!(
        bytes.starts_with(b"\x89PNG"),
        "no screenshot of {}",
        page.display()
    );
    png
}

fn count(dom: &str, needle: &str) -> usize {
    dom.matches(needle).count()
}

#[test]
#[cfg_attr(
    no_chromium,
    ignore = "chromium not installed: apt-get install chromium"
)]
fn a_short_loop_shows_its_outcome_and_one_bar_per_iteration() {
    let p = Project::new();
    short_loop(&p, "Write three haiku about loops into haiku.txt");
    let page = report(&p, &[]);
    assert_eq!(page, p.path(".claude/ralph/reports/ralph.html"));
    let dom = dom(&page);
    assert!(dom.contains("class=\"badge ok\">completed<"), "{dom}");
    assert!(
        dom.contains("the agent gave the promise `DONE` at iteration 3"),
        "{dom}"
    );
    assert_eq!(count(&dom, "<g class=\"bar\""), 3, "{dom}");
    assert_eq!(count(&dom, "<g class=\"span"), 3, "{dom}");
    screenshot(&page, "short-loop");
}

#[test]
#[cfg_attr(
    no_chromium,
    ignore = "chromium not installed: apt-get install chromium"
)]
fn a_budget_ended_loop_shows_the_budget_the_checks_and_the_receipt() {
    let p = Project::new();
    budget_loop(&p, "Port the parser to the new API");
    let page = report(&p, &["--name", "budget"]);
    let dom = dom(&page);
    assert!(dom.contains("stopped: budget reached"), "{dom}");
    assert!(
        dom.contains("the token budget of 50000 is used up"),
        "{dom}"
    );
    // The line that is not JSON is skipped; the other five are iterations.
    assert_eq!(count(&dom, "<g class=\"bar\""), 5, "{dom}");
    assert_eq!(count(&dom, "<g class=\"cost-bar\""), 5, "{dom}");
    assert_eq!(count(&dom, "class=\"budget\""), 1, "{dom}");
    assert!(dom.contains("budget 50,000"), "{dom}");
    assert!(dom.contains("$0.65"), "the total cost: {dom}");
    // The gate refused twice; `--check` failed once (6 failures) and passed once.
    assert_eq!(count(&dom, "class=\"check fail\""), 3, "{dom}");
    assert!(
        dom.contains("✗ 4") && dom.contains("✗ 1") && dom.contains("✗ 6"),
        "{dom}"
    );
    assert!(dom.contains("$0.65 / $1.00"), "the dollar meter: {dom}");
    assert!(
        dom.contains("2 / 3"),
        "refused promises against their limit: {dom}"
    );
    assert!(
        dom.contains("breaker reached"),
        "the token meter is full: {dom}"
    );
    assert!(dom.contains("4be1c3a"), "the receipt: {dom}");
    screenshot(&page, "budget-loop");
    // The README's picture (docs/images/report.png) is this one.
    screenshot_sized(&page, "readme", "860,1060");
}

/// The page's text: every figure and sentence as it will show, without Chromium.
fn page_of(p: &Project, args: &[&str]) -> String {
    std::fs::read_to_string(report(p, args)).unwrap()
}

#[test]
fn the_page_shows_check_results_a_dollar_meter_and_line_breaks_as_line_breaks() {
    let p = Project::new();
    budget_loop(&p, "Port the parser");
    let page = page_of(&p, &["--name", "budget"]);
    assert!(page.contains("--check per iteration"), "the --check row");
    assert!(
        page.contains("--verify gate per iteration"),
        "the gate's row"
    );
    assert!(
        page.contains("<th>dollars (--max-cost)</th><td class=\"num\">$0.65 / $1.00</td>"),
        "the dollar meter"
    );
    assert!(page.contains("$0.65 spent of $1.00"), "the total, once");
    // Each iteration's own spend: 0.11, 0.15, 0.12, 0.14, 0.13.
    for micros in [110_000, 150_000, 120_000, 140_000, 130_000] {
        assert!(
            page.contains(&format!("data-micro-usd=\"{micros}\"")),
            "{micros}"
        );
    }
    // A reason of several lines keeps its line breaks; never `\n` as two characters.
    assert!(!page.contains("\\n"), "a literal backslash-n on the page");
    assert!(page.contains("failed\nLast lines of its output:\nFAILED parser::utf8"));
    // The token budget's label sits inside the chart (its line is near the top).
    let label = page.split("class=\"budget-label\"").nth(1).unwrap();
    let y: f64 = label
        .split("y=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(y >= 11.0, "an 11px label at y={y} is cut off at the top");
}

#[test]
fn a_real_loop_shows_its_receipt_and_a_name_shows_every_run() {
    let p = Project::new();
    let agent = repo_root().join("examples/fake-agent.sh");
    for _ in 0..2 {
        let _ = std::fs::remove_file(p.path("haiku.txt"));
        let out = p.ralph_in(
            &[
                "run",
                "--agent",
                agent.to_str().unwrap(),
                "--completion-promise",
                "DONE",
                "--verify",
                "grep -c . haiku.txt",
                "--check",
                "test -f haiku.txt",
                "--max-iterations",
                "5",
                "Write three haiku",
            ],
            p.root(),
            b"",
            &[("FAKE_AGENT_DELAY", "0")],
        );
        assert!(out.status.success(), "{}", describe(&out));
    }
    let page = page_of(&p, &["--name", "ralph"]);
    assert_eq!(
        page.matches("<section class=\"loop ").count(),
        2,
        "both runs"
    );
    assert!(
        page.contains("<figcaption>Receipt</figcaption>"),
        "the receipt"
    );
    assert!(
        page.contains("grep -c . haiku.txt"),
        "the receipt's command"
    );
    assert!(
        page.contains("--check per iteration"),
        "the --check results"
    );
}

#[test]
#[cfg_attr(
    no_chromium,
    ignore = "chromium not installed: apt-get install chromium"
)]
fn a_fleet_of_three_has_one_row_per_story() {
    let p = Project::new();
    fleet_of_three(&p, "merged into main");
    budget_loop(&p, "Story US-3");
    let page = report(&p, &["--all"]);
    assert_eq!(page, p.path(".claude/ralph/reports/all.html"));
    let dom = dom(&page);
    assert_eq!(count(&dom, "<tr class=\"story "), 3, "{dom}");
    for id in ["US-1", "US-2", "US-3"] {
        assert!(dom.contains(&format!("<code>ralph/{id}</code>")), "{dom}");
    }
    assert!(dom.contains("rebase conflicted in src/lib.rs"), "{dom}");
    screenshot(&page, "fleet");
}

/// Everything a page could fetch: a `src`, an `href`, a CSS `url(` or `@import`.
fn loads_something(page: &str) -> Option<&'static str> {
    [
        "src=", "href=", "url(", "@import", "http://", "https://", "<script", "<link",
    ]
    .into_iter()
    .find(|needle| page.contains(needle))
}

#[test]
#[cfg_attr(
    no_chromium,
    ignore = "chromium not installed: apt-get install chromium"
)]
fn the_page_loads_whole_with_the_network_off() {
    let p = Project::new();
    short_loop(&p, "Write three haiku about loops into haiku.txt");
    budget_loop(&p, "Port the parser");
    fleet_of_three(&p, "merged");
    for args in [&["--name", "ralph"][..], &["--name", "budget"], &["--all"]] {
        let page = report(&p, args);
        let html = std::fs::read_to_string(&page).unwrap();
        assert_eq!(loads_something(&html), None, "{html}");
        assert!(html.contains("default-src 'none'"), "{html}");
        // Every name resolves to nothing and every request goes to a closed port.
        let dom = chromium(
            &page,
            &[
                "--dump-dom",
                "--host-resolver-rules=MAP * ~NOTFOUND",
                "--proxy-server=127.0.0.1:9",
            ],
        );
        assert!(dom.contains("<summary>Iterations</summary>"), "{dom}");
        assert!(dom.trim_end().ends_with("</html>"), "{dom}");
    }
}

#[test]
#[cfg_attr(
    no_chromium,
    ignore = "chromium not installed: apt-get install chromium"
)]
fn hostile_strings_stay_text() {
    let p = Project::new();
    let hostile = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>";
    budget_loop(&p, hostile);
    fleet_of_three(&p, "</td></tr></table><script>alert(2)</script>");
    // A reply, a reason and a receipt from the project, hostile too.
    p.write(
        ".claude/ralph/history/20261201T100500Z-budget.log.jsonl",
        &format!(
            "{}\n",
            serde_json::json!({"time": "2026-12-01T10:05:00Z", "iteration": 1, "decision": "end",
                "why": "</p><iframe src=\"javascript:alert(3)\"></iframe>",
                "receipt": {"<b onmouseover=alert(4)>": "<svg onload=alert(5)>"}})
        ),
    );
    let page = report(&p, &["--all"]);
    let html = std::fs::read_to_string(&page).unwrap();
    for bad in ["<script", "<img", "<iframe", "<b ", "<svg onload"] {
        assert!(!html.contains(bad), "{bad} in {html}");
    }
    let dom = dom(&page);
    assert!(
        !dom.contains("<script") && !dom.contains("<iframe"),
        "{dom}"
    );
    assert!(!dom.contains("pwned</title>"), "a script ran: {dom}");
    assert!(
        dom.contains("&lt;script&gt;document.title"),
        "the task shown: {dom}"
    );
    assert!(
        dom.contains("&lt;svg onload=alert(5)&gt;"),
        "the receipt shown: {dom}"
    );
    assert_eq!(count(&dom, "<tr class=\"story "), 3, "{dom}");
}

#[test]
fn a_link_at_the_output_is_refused_and_a_plain_path_is_written() {
    let p = Project::new();
    budget_loop(&p, "task");
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    #[cfg(unix)]
    {
        let link = outside.path().join("r.html");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let out = p.ralph_in(
            &["report", "-o", link.to_str().unwrap()],
            p.root(),
            b"",
            &[],
        );
        assert!(!out.status.success(), "{}", describe(&out));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        // A linked reports folder in the project is refused too.
        std::os::unix::fs::symlink(outside.path(), p.path(".claude/ralph/reports")).unwrap();
        let out = p.ralph_in(&["report"], p.root(), b"", &[]);
        assert!(!out.status.success(), "{}", describe(&out));
        std::fs::remove_file(p.path(".claude/ralph/reports")).unwrap();
    }
    let plain = outside.path().join("plain.html");
    assert_eq!(report(&p, &["-o", plain.to_str().unwrap()]), plain);
    assert!(
        std::fs::read_to_string(&plain)
            .unwrap()
            .contains("budget reached")
    );
}

#[test]
fn no_loop_no_report_and_an_unknown_name_is_named() {
    let p = Project::new();
    let out = p.ralph_in(&["report"], p.root(), b"", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to report"));
    budget_loop(&p, "task");
    let out = p.ralph_in(&["report", "--name", "nope"], p.root(), b"", &[]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no loop named `nope`"),
        "{}",
        describe(&out)
    );
}

#[cfg(unix)]
#[test]
fn open_hands_the_page_to_the_opener_and_does_not_wait() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    budget_loop(&p, "task");
    let bin = tempfile::tempdir().unwrap();
    let seen = bin.path().join("seen");
    let (release, finished) = (bin.path().join("release"), bin.path().join("finished"));
    let opener = bin.path().join(if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    });
    std::fs::write(
        &opener,
        // Written whole, then renamed: the test never reads a file the shell has only created.
        format!(
            "#!/bin/sh\necho \"$1\" > '{seen}.part' && mv '{seen}.part' '{seen}'\n{held}",
            seen = seen.display(),
            held = held_until(&release, &finished)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let out = p.ralph_in(&["report", "--open"], p.root(), b"", &[("PATH", &path)]);
    assert!(out.status.success(), "{}", describe(&out));
    // The opener is held until the test lets it go: had ralph waited for it, it would
    // have finished by now.
    assert!(!finished.exists(), "ralph waited for the opener");
    std::fs::write(&release, "").unwrap();
    assert!(wait_for_file(&seen), "the opener never ran");
    let opened = std::fs::read_to_string(&seen).unwrap();
    assert!(
        opened
            .trim_end()
            .ends_with(".claude/ralph/reports/budget.html"),
        "{opened}"
    );
}

#[cfg(unix)]
#[test]
fn open_without_a_browser_says_so_and_names_the_file() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    budget_loop(&p, "task");
    let bin = tempfile::tempdir().unwrap();
    let opener = bin.path().join(if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    });
    // What xdg-open does on a machine with no browser: it gives up, exit 3.
    std::fs::write(
        &opener,
        "#!/bin/sh\necho 'xdg-open: no method available' >&2\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let out = p.ralph_in(&["report", "--open"], p.root(), b"", &[("PATH", &path)]);
    assert!(out.status.success(), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!said.contains("in your browser."), "{said}");
    assert!(
        said.contains("Could not open it")
            && said.contains("exit status: 3")
            && said.contains("reports/budget.html in a browser yourself"),
        "{said}"
    );
    // No opener at all: said too.
    let empty = tempfile::tempdir().unwrap();
    let out = p.ralph_in(
        &["report", "--open"],
        p.root(),
        b"",
        &[("PATH", &empty.path().display().to_string())],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("could not start"), "{said}");
}

/// `line` with the figure after `elapsed ` (a wall-clock count of seconds) put as `…`.
fn without_elapsed(line: &str) -> String {
    match line.split_once(" elapsed ") {
        Some((head, tail)) => {
            let rest = tail.trim_start_matches(|c: char| c.is_ascii_digit() || "hms".contains(c));
            format!("{head} elapsed …{rest}")
        }
        None => line.to_owned(),
    }
}

#[test]
fn status_keeps_its_text_and_links_the_report_when_a_loop_ended() {
    let p = Project::new();
    let out = p.ralph_in(
        &[
            "start",
            "--name",
            "live",
            "--max-iterations",
            "3",
            "Keep going",
        ],
        p.root(),
        b"",
        &[("CLAUDE_CODE_SESSION_ID", "s1")],
    );
    assert!(out.status.success(), "{}", describe(&out));
    // The status's text without its closing `Hooks:` line (which binary the hooks run).
    // The live loop's `elapsed Ns` is the wall clock's: it ticks between the two calls
    // (more so on a loaded machine), so it is compared as `elapsed …`.
    let status = || {
        let out = p.ralph_in(&["status"], p.root(), b"", &[]).stdout;
        let text = String::from_utf8_lossy(&out).into_owned();
        let kept: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with("Hooks: "))
            .map(without_elapsed)
            .collect();
        kept.join("\n") + "\n"
    };
    let before = status();
    assert!(
        !before.contains("ralph report"),
        "no loop ended yet: {before}"
    );
    budget_loop(&p, "task");
    let after = status();
    let (text, last) = after.trim_end().rsplit_once('\n').unwrap();
    assert!(
        text.starts_with(before.trim_end()),
        "the live loop's lines come first, unchanged:\n{after}"
    );
    assert_eq!(
        last,
        "Report: `ralph report --name budget` writes .claude/ralph/reports/budget.html (`ralph report --all`: every loop)"
    );
    let page = report(&p, &["--name", "budget"]);
    assert_eq!(page, p.path(".claude/ralph/reports/budget.html"));
    // A live loop has its page too, before any iteration is logged.
    let live = std::fs::read_to_string(report(&p, &["--name", "live"])).unwrap();
    assert!(live.contains("class=\"badge live\">active<"), "{live}");
    assert!(
        live.contains("No iteration logged yet.") && live.contains("1 / 3"),
        "{live}"
    );
}
