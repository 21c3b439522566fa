//! Fresh-context iterations: run an agent process with the prompt on its
//! stdin, wait for it (or stop it on request), and read its reply.
//!
//! Any command that reads a prompt on stdin and prints its reply works. When
//! the output is Claude Code's `--output-format json` object, the reply is
//! its `result` and the tokens come from its `usage`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use ralph_fs::process::{GroupChild, Stop, scratch_file, shell, spawn_in_group, stop_group};
use ralph_state::money::Money;

/// What one agent run produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentReply {
    pub text: String,
    /// Tokens reported by the agent (input + cache creation + output), if any.
    pub tokens: Option<u64>,
    /// Tool uses the agent was refused (Claude Code's `permission_denials`),
    /// each in one escaped line: `Write src/a.rs`, `Bash: echo x > f`.
    pub denials: Vec<String>,
    /// Claude Code's `is_error` and `subtype` (`success`, `error_max_turns`, …).
    pub is_error: bool,
    pub subtype: Option<String>,
    /// What the run cost, as the agent reports it (Claude Code's
    /// `total_cost_usd`), rounded up to the micro-dollar; `None`: not said.
    pub cost: Option<Money>,
    /// The run ended on a rate or usage limit (Claude Code's
    /// `api_error_status` 429, or `api_error_type` `rate_limit_error` or
    /// `billing_error`): what it said, escaped. Not a failed iteration.
    pub limit: Option<String>,
    /// Why the cost the agent reported was not believed and the call was
    /// charged its whole cap instead ([`charge`]).
    pub overcharged: Option<&'static str>,
    /// What the API's own usage cost, counted by ralph's meter
    /// (`meter.rs`), when the agent's calls went through it; the reply's
    /// `cost` is then never less ([`charge_metered`]).
    pub metered: Option<Money>,
}

/// Claude Code's result when `--max-budget-usd` stopped it.
pub(crate) const BUDGET_SPENT: &str = "error_max_budget_usd";

/// Whether `command` is Claude Code in print mode (`claude -p …`), which
/// takes `--max-budget-usd`.
fn is_claude_print(command: &str) -> bool {
    let mut words = command.split_whitespace();
    words.next() == Some("claude") && words.any(|w| w == "-p" || w == "--print")
}

/// The agent's command with what is left of a dollar budget, for Claude
/// Code in print mode (`claude -p …`, which stops itself once it spent
/// `--max-budget-usd`), so one iteration cannot run far past the budget:
/// each call's cap is what is left, never the whole budget. Any other
/// command is left as it is (it has no such flag).
pub(crate) fn with_budget(command: &str, left: Option<Money>) -> String {
    match left {
        Some(left) if is_claude_print(command) && !command.contains("--max-budget-usd") => {
            format!("{command} --max-budget-usd {}", left.decimal())
        }
        _ => command.to_owned(),
    }
}

/// What one call may cost at most, when ralph can hold the agent to it:
/// Claude Code in print mode with a JSON result (`--output-format json` or
/// `stream-json`) under a dollar budget, capped at what is left of it.
/// `None`: the agent reports no cost ralph could check.
pub(crate) fn call_cap(command: &str, left: Option<Money>) -> Option<Money> {
    let json = command
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .any(|w| w[0] == "--output-format" && matches!(w[1], "json" | "stream-json"))
        || command.contains("--output-format=json")
        || command.contains("--output-format=stream-json");
    left.filter(|_| is_claude_print(command) && json)
}

/// How the agent's process ended, as far as the cost it reports goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessEnd {
    /// It exited by itself with this code (Claude Code: 0, or 1 for an
    /// error result).
    Exited(i32),
    /// A signal ended it (or the shell or sandbox around it reported one:
    /// an exit code above 128).
    Killed,
}

impl From<ExitStatus> for ProcessEnd {
    fn from(status: ExitStatus) -> Self {
        #[cfg(unix)]
        if std::os::unix::process::ExitStatusExt::signal(&status).is_some() {
            return Self::Killed;
        }
        match status.code() {
            Some(code) if code <= 128 => Self::Exited(code),
            _ => Self::Killed,
        }
    }
}

/// How many result objects (`{"type":"result",…}`) the agent printed, one
/// per line as Claude Code prints them.
pub(crate) fn result_lines(stdout: &str) -> usize {
    stdout
        .lines()
        .filter(|line| {
            serde_json::from_str::<Value>(line.trim())
                .is_ok_and(|v| v.get("type").and_then(Value::as_str) == Some("result"))
        })
        .count()
}

/// Why the cost in a reply cannot be believed, if it cannot: the agent
/// writes what ralph reads, so a client that died by a signal, printed more
/// than one result, or none, may have printed a cost of its own making
/// (`total_cost_usd: 0`) and killed the real client before it spoke.
pub fn distrusted(ending: ProcessEnd, results: usize) -> Option<&'static str> {
    match (ending, results) {
        (ProcessEnd::Killed, _) => Some("the agent's client died by a signal"),
        (_, 0) => Some("the agent's client gave no result"),
        (_, 1) => None,
        _ => Some("the agent's client printed more than one result"),
    }
}

/// The reply with the cost ralph counts: the one reported, or the call's
/// whole `cap` when the report is [`distrusted`] (nothing to charge without
/// a cap: the agent's cost was never counted).
pub(crate) fn charge(
    mut reply: AgentReply,
    cap: Option<Money>,
    ending: impl Into<ProcessEnd>,
    stdout: &str,
) -> AgentReply {
    if let (Some(cap), Some(why)) = (cap, distrusted(ending.into(), result_lines(stdout))) {
        reply.cost = Some(reply.cost.map_or(cap, |said| said.max(cap)));
        reply.overcharged = Some(why);
        // Nor is a rate limit it says struck: a limit is not counted.
        reply.limit = None;
    }
    reply
}

/// The reply charged the larger of what it reports (or was charged by
/// [`charge`]) and what the meter counted of the API's own usage: an agent
/// that prints `total_cost_usd: 0` is charged what its calls cost. Nor is a
/// rate or usage limit it reports believed unless the API answered one
/// through the meter (`api_limited`): the iteration is judged and charged.
pub(crate) fn charge_metered(
    mut reply: AgentReply,
    metered: Option<Money>,
    api_limited: bool,
) -> AgentReply {
    if let Some(counted) = metered {
        reply.cost = Some(reply.cost.map_or(counted, |said| said.max(counted)));
        reply.metered = Some(counted);
        if !api_limited {
            reply.limit = None;
        }
    }
    reply
}

/// One denial in a line: the tool and what it was asked to touch or run.
fn denial_line(item: &Value) -> String {
    let tool = item
        .get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or("a tool");
    let input = item.get("tool_input");
    let target = ["file_path", "command", "path", "url", "pattern"]
        .iter()
        .find_map(|k| input.and_then(|i| i.get(k)).and_then(Value::as_str));
    let line = match target {
        Some(t) => format!("{tool} {}", t.lines().next().unwrap_or("")),
        None => tool.to_owned(),
    };
    let short: String = line.chars().take(80).collect();
    let short = if short.len() < line.len() {
        format!("{short}…")
    } else {
        short
    };
    ralph_state::messages::escape_controls(&short)
}

/// Reads an agent's stdout: Claude Code's JSON result object, or plain text.
pub(crate) fn parse_output(stdout: &str) -> AgentReply {
    let trimmed = stdout.trim();
    // A result without `result` text is an error result (max turns, the
    // budget spent): no reply, but its cost and subtype still count.
    if trimmed.starts_with('{')
        && let Ok(value) = serde_json::from_str::<Value>(trimmed)
        && let Some(result) = value
            .get("result")
            .and_then(Value::as_str)
            .or_else(|| (value.get("type").and_then(Value::as_str) == Some("result")).then_some(""))
    {
        let usage = value.get("usage");
        let field = |k: &str| {
            usage
                .and_then(|u| u.get(k))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        let tokens = usage.map(|_| {
            field("input_tokens") + field("cache_creation_input_tokens") + field("output_tokens")
        });
        let denials = value
            .get("permission_denials")
            .and_then(Value::as_array)
            .map(|items| items.iter().map(denial_line).collect())
            .unwrap_or_default();
        return AgentReply {
            text: result.to_owned(),
            tokens,
            denials,
            is_error: value.get("is_error").and_then(Value::as_bool) == Some(true),
            subtype: value
                .get("subtype")
                .and_then(Value::as_str)
                .map(ralph_state::messages::escape_controls),
            cost: value.get("total_cost_usd").and_then(Money::from_json_up),
            limit: limit_of(&value, result),
            overcharged: None,
            metered: None,
        };
    }
    AgentReply {
        text: trimmed.to_owned(),
        ..AgentReply::default()
    }
}

/// Whether a Claude Code result says a rate or usage limit stopped it
/// (checked in 2.1.328: a 429 gives `api_error_status: 429`,
/// `api_error_type: "rate_limit_error"`; a spent credit balance
/// `api_error_type: "billing_error"`; neither says when it resets).
fn limit_of(value: &Value, result: &str) -> Option<String> {
    let status = value.get("api_error_status").and_then(Value::as_u64);
    let kind = value.get("api_error_type").and_then(Value::as_str);
    let limited = status == Some(429) || matches!(kind, Some("rate_limit_error" | "billing_error"));
    limited.then(|| {
        let said =
            ralph_state::messages::escape_controls(result.lines().next().unwrap_or("").trim());
        let kind = kind.map_or_else(String::new, ralph_state::messages::escape_controls);
        match (said.is_empty(), kind.is_empty()) {
            (true, true) => "a rate or usage limit".to_owned(),
            (true, false) => kind,
            (false, true) => said,
            (false, false) => format!("{said} ({kind})"),
        }
    })
}

/// How an agent run ended.
#[derive(Debug)]
pub enum Finished {
    Exited {
        status: ExitStatus,
        stdout: String,
        stderr_tail: String,
        /// The API's usage, when the agent's calls went through ralph's
        /// meter (a sandboxed run under bubblewrap).
        metered: Option<crate::meter::Metered>,
    },
    /// The caller asked to stop; the agent's process group was killed.
    Interrupted,
}

/// Runs `command` through the shell ([`shell`]) in `root` with `prompt` on
/// stdin, in its own process group, calling `tick` about ten times a second
/// while it runs; when `stop` becomes true the whole group is terminated.
/// With a `sandbox` (`ralph run --sandbox`), the sandbox's tool runs
/// `sh -c COMMAND` confined, in the same process group, so Ctrl-C ends it
/// the same way.
pub fn run_confined(
    sandbox: Option<&crate::sandbox::Sandbox>,
    command: &str,
    root: &Path,
    prompt: &str,
    stop: &AtomicBool,
    tick: impl FnMut(),
) -> std::io::Result<Finished> {
    let mut process = match sandbox {
        Some(s) => s.command(command),
        None => shell(command)?,
    };
    // The model's API through ralph's meter, where the sandbox lets the
    // agent reach it and nothing else of the host (see `meter.rs`).
    let meter = match sandbox.filter(|s| s.meterable()) {
        Some(_) => Some(crate::meter::Meter::start(
            crate::meter::upstream_from_env(),
            crate::meter::key_from_env(),
        )?),
        None => None,
    };
    if let Some(meter) = &meter {
        meter.point(&mut process);
    }
    let forward = meter.as_ref().map(crate::meter::Meter::port);
    // The sandbox's network (pasta) lives as long as the agent's process.
    let mut network = None;
    let connect = |leader: u32| match sandbox {
        Some(s) => {
            network = s.connect(leader, forward).map_err(std::io::Error::other)?;
            Ok(())
        }
        None => Ok(()),
    };
    let finished = run_process(process, root, prompt, stop, tick, connect);
    drop(network);
    let counted = meter.map(crate::meter::Meter::finish);
    let mut finished = finished?;
    if let Finished::Exited { metered, .. } = &mut finished {
        *metered = counted;
    }
    // The agent's commits, made in its own git folder, join the project
    // once it is gone (nothing of it runs any more to change them); first,
    // any `.git` it made in the work tree leaves it, whatever the import says.
    if let Some(s) = sandbox {
        s.take_new_nested_git();
        s.import_git().map_err(std::io::Error::other)?;
    }
    // 127: the shell found no such command. In the sandbox that is most
    // often a program or script outside the folders it binds.
    if let (
        Some(s),
        Finished::Exited {
            status,
            stderr_tail,
            ..
        },
    ) = (sandbox, &mut finished)
        && status.code() == Some(127)
    {
        stderr_tail.push_str(&format!(
            "\nralph: a command was not found inside the sandbox, which shows the agent only {}. A program or script elsewhere (a folder above the project, a shim whose real program lives outside these) cannot run there: move it into the project, or install it where a bound folder holds it.",
            s.reach.bound_words()
        ));
    }
    Ok(finished)
}

fn run_process(
    mut sh: std::process::Command,
    root: &Path,
    prompt: &str,
    stop: &AtomicBool,
    mut tick: impl FnMut(),
    connect: impl FnOnce(u32) -> std::io::Result<()>,
) -> std::io::Result<Finished> {
    let mut stdout_file = scratch_file()?;
    let mut stderr_file = scratch_file()?;
    sh.current_dir(root)
        .stdin(Stdio::piped())
        .stdout(stdout_file.try_clone()?)
        .stderr(stderr_file.try_clone()?);
    let mut group = spawn_in_group(&mut sh)?;
    if let Err(e) = connect(group.child.id()) {
        terminate_group(&mut group);
        return Err(e);
    }
    let prompt = prompt.to_owned();
    let mut stdin = group.child.stdin.take();
    // A writer thread, so an agent that does not read its stdin cannot block us.
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            let _ = s.write_all(prompt.as_bytes());
        }
    });
    let status = loop {
        if let Some(status) = group.child.try_wait()? {
            break Some(status);
        }
        if stop.load(Ordering::SeqCst) {
            terminate_group(&mut group);
            break None;
        }
        tick();
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = writer.join();
    let Some(status) = status else {
        return Ok(Finished::Interrupted);
    };
    let mut stdout = String::new();
    stdout_file.seek(SeekFrom::Start(0))?;
    let mut bytes = Vec::new();
    stdout_file.read_to_end(&mut bytes)?;
    stdout.push_str(&String::from_utf8_lossy(&bytes));
    let mut err = Vec::new();
    stderr_file.seek(SeekFrom::Start(0))?;
    stderr_file.read_to_end(&mut err)?;
    let err = String::from_utf8_lossy(&err);
    let lines: Vec<&str> = err.lines().collect();
    let stderr_tail = lines[lines.len().saturating_sub(20)..].join("\n");
    Ok(Finished::Exited {
        status,
        stdout,
        stderr_tail,
        metered: None,
    })
}

/// SIGTERM to the group, a grace period for the agent to exit, then SIGKILL
/// to whatever of the group is left (a grandchild that ignored the TERM).
/// (By system call: no `kill` binary is needed on PATH.)
fn terminate_group(group: &mut GroupChild) {
    let asked = stop_group(group, Stop::Terminate).is_ok();
    let deadline = Instant::now() + Duration::from_secs(3);
    while asked && Instant::now() < deadline && !matches!(group.child.try_wait(), Ok(Some(_))) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // The group outlives its leader while a grandchild is in it, so this
    // runs even when the agent itself has exited.
    let _ = stop_group(group, Stop::Kill);
    let _ = group.child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_claude_json_and_plain_text() {
        let json = r#"{"type":"result","subtype":"success","result":"done\n<promise>X</promise>","usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":1000,"output_tokens":7}}"#;
        assert_eq!(
            parse_output(json),
            AgentReply {
                text: "done\n<promise>X</promise>".into(),
                tokens: Some(22),
                denials: vec![],
                is_error: false,
                subtype: Some("success".into()),
                cost: None,
                limit: None,
                overcharged: None,
                metered: None,
            }
        );
        let spent = parse_output(
            r#"{"type":"result","subtype":"error_max_budget_usd","is_error":true,"total_cost_usd":0.0512345,"errors":["budget"]}"#,
        );
        assert_eq!(
            (spent.text.as_str(), spent.cost, spent.subtype.as_deref()),
            ("", Some(Money(51_235)), Some(BUDGET_SPENT))
        );
        assert!(spent.is_error);
        // What Claude Code 2.1.328 printed for a 429 and for a spent credit balance.
        let limited = parse_output(
            r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"api_error_type":"rate_limit_error","terminal_reason":"api_error","result":"API Error: Request rejected (429) · rate limit","total_cost_usd":0}"#,
        );
        assert_eq!(
            limited.limit.as_deref(),
            Some("API Error: Request rejected (429) · rate limit (rate_limit_error)")
        );
        let billing = parse_output(
            r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":400,"api_error_type":"billing_error","result":"Credit balance is too low"}"#,
        );
        assert!(billing.limit.is_some());
        let overloaded = parse_output(
            r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":529,"api_error_type":"overloaded_error","result":"API Error: 529 Overloaded"}"#,
        );
        assert_eq!(overloaded.limit, None, "transient: not a limit");
        assert_eq!(
            parse_output("  plain reply \n"),
            AgentReply {
                text: "plain reply".into(),
                tokens: None,
                denials: vec![],
                is_error: false,
                subtype: None,
                cost: None,
                limit: None,
                overcharged: None,
                metered: None,
            }
        );
        assert_eq!(
            parse_output("{not json"),
            AgentReply {
                text: "{not json".into(),
                tokens: None,
                denials: vec![],
                is_error: false,
                subtype: None,
                cost: None,
                limit: None,
                overcharged: None,
                metered: None,
            }
        );
    }

    #[test]
    fn claude_in_print_mode_is_given_what_is_left_of_the_budget() {
        let left = Some(Money(1_250_000));
        assert_eq!(
            with_budget("claude -p --output-format json", left),
            "claude -p --output-format json --max-budget-usd 1.25"
        );
        assert_eq!(
            with_budget(crate::presets::resolve("claude").as_str(), left),
            format!(
                "{} --max-budget-usd 1.25",
                crate::presets::resolve("claude")
            )
        );
        assert_eq!(with_budget("claude -p", None), "claude -p");
        assert_eq!(with_budget("codex exec", left), "codex exec");
        assert_eq!(with_budget("./claude -p", left), "./claude -p");
        assert_eq!(
            with_budget("claude -p --max-budget-usd 9", left),
            "claude -p --max-budget-usd 9",
            "the user's own flag wins"
        );
    }

    #[test]
    fn a_client_killed_or_printing_no_result_or_two_is_charged_its_whole_cap() {
        let cap = Some(Money(3_000_000));
        let forged = r#"{"type":"result","result":"done","total_cost_usd":0}"#;
        let charged = |stdout: &str, ending| charge(parse_output(stdout), cap, ending, stdout);
        let honest = charged(forged, ProcessEnd::Exited(0));
        assert_eq!((honest.cost, honest.overcharged), (Some(Money(0)), None));
        let killed = charged(forged, ProcessEnd::Killed);
        assert_eq!(killed.cost, Some(Money(3_000_000)));
        assert_eq!(
            killed.overcharged,
            Some("the agent's client died by a signal")
        );
        let two = format!("{forged}\n{forged}\n");
        assert_eq!(charged(&two, ProcessEnd::Exited(0)).cost, cap);
        assert_eq!(charged("", ProcessEnd::Exited(0)).cost, cap);
        let limited = r#"{"type":"result","is_error":true,"api_error_status":429,"result":"x"}"#;
        assert_eq!(charged(limited, ProcessEnd::Killed).limit, None);
        // A cost above the cap stays as reported; without a cap nothing is charged.
        let dear = r#"{"type":"result","result":"x","total_cost_usd":9}"#;
        assert_eq!(
            charged(dear, ProcessEnd::Killed).cost,
            Some(Money(9_000_000))
        );
        let uncapped = charge(parse_output(forged), None, ProcessEnd::Killed, forged);
        assert_eq!(uncapped.cost, Some(Money(0)));
        assert_eq!(
            call_cap("claude -p --output-format json", cap),
            cap,
            "what is left, not the whole budget"
        );
        assert_eq!(
            call_cap("claude -p", cap),
            None,
            "plain text reports no cost"
        );
        assert_eq!(call_cap("codex exec --json", cap), None);
        assert_eq!(call_cap("claude -p --output-format json", None), None);
    }

    #[test]
    fn the_meters_count_is_charged_when_it_is_more_than_the_report() {
        let forged = parse_output(r#"{"type":"result","result":"x","total_cost_usd":0}"#);
        let metered = charge_metered(forged.clone(), Some(Money(1_500_525)), false);
        assert_eq!(
            (metered.cost, metered.metered),
            (Some(Money(1_500_525)), Some(Money(1_500_525)))
        );
        let dear = parse_output(r#"{"type":"result","result":"x","total_cost_usd":2}"#);
        assert_eq!(
            charge_metered(dear, Some(Money(5)), false).cost,
            Some(Money(2_000_000)),
            "the client's larger report stands"
        );
        let silent = charge_metered(parse_output("plain text"), Some(Money(7)), false);
        assert_eq!(silent.cost, Some(Money(7)), "an agent that reports nothing");
        assert_eq!(
            charge_metered(forged, None, false).cost,
            Some(Money(0)),
            "not metered"
        );
        let limited = r#"{"type":"result","is_error":true,"api_error_status":429,"result":"x"}"#;
        let said = |api_limited| charge_metered(parse_output(limited), Some(Money(1)), api_limited);
        assert_eq!(said(false).limit, None, "the API answered no limit");
        assert!(said(true).limit.is_some());
        assert!(
            charge_metered(parse_output(limited), None, false)
                .limit
                .is_some(),
            "not metered: believed as before"
        );
    }

    #[test]
    fn reads_permission_denials() {
        let json = r#"{"type":"result","subtype":"success","is_error":false,"result":"I could not write it","permission_denials":[{"tool_name":"Write","tool_use_id":"t1","tool_input":{"file_path":"/p/notes.txt","content":"x"}},{"tool_name":"Bash","tool_use_id":"t2","tool_input":{"command":"echo hi > f\u001b[2K\nrm -rf /"}}]}"#;
        let reply = parse_output(json);
        assert_eq!(
            reply.denials,
            ["Write /p/notes.txt", "Bash echo hi > f\\x1b[2K"]
        );
        assert!(!reply.is_error);
    }

    #[cfg(unix)]
    #[test]
    fn runs_an_agent_with_the_prompt_on_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let stop = AtomicBool::new(false);
        match run_confined(
            None,
            "tr a-z A-Z; echo oops >&2; exit 3",
            dir.path(),
            "hello",
            &stop,
            || {},
        )
        .unwrap()
        {
            Finished::Exited {
                status,
                stdout,
                stderr_tail,
                ..
            } => {
                assert_eq!(
                    (status.code(), stdout.as_str(), stderr_tail.as_str()),
                    (Some(3), "HELLO", "oops")
                );
            }
            Finished::Interrupted => panic!("not interrupted"),
        }
    }

    #[cfg(unix)]
    #[test]
    fn stop_terminates_the_agent() {
        let dir = tempfile::tempdir().unwrap();
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let mut ticks = 0;
        let finished = run_confined(None, "sleep 600", dir.path(), "", &stop, || {
            ticks += 1;
            if ticks == 3 {
                stop.store(true, Ordering::SeqCst);
            }
        })
        .unwrap();
        assert!(matches!(finished, Finished::Interrupted));
        // Far below the 600 s sleep: it was stopped (a hang guard, not a race).
        assert!(started.elapsed() < Duration::from_secs(120));
    }
}
