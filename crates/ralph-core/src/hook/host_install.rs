//! What `ralph install` adds to each host's configuration, as pure edits of
//! the parsed settings: ralph's hook entry (recognised by its command,
//! `… hook stop --host NAME`), and the text of its `ralph-loop` command or
//! skill. The files themselves are read and written by the CLI.

use serde_json::{Map, Value, json};

use crate::hook::host::Host;

/// The hook's time limit: above the longest `--verify` (14 min).
pub const HOOK_TIMEOUT_SECS: u64 = 900;

/// `ralph install` written by hand in a skill/command: the host's agent runs
/// `ralph start` with the user's arguments, raw, through a quoted here-doc.
pub const CODEX_SKILL: &str = "---
name: ralph-loop
description: Start a Ralph loop when the user asks for one ($ralph-loop TASK --completion-promise DONE ...) - ralph keeps this session working on the task until it is really done.
---

Run this shell command once, with the user's words after `$ralph-loop` in place of ARGUMENTS
(keep them exactly as written: the task and any --max-iterations, --completion-promise, --verify,
--max-duration, --abort-promise or --name options):

```sh
ralph start --raw-arguments <<'RALPH_ARGS_7f3a'
ARGUMENTS
RALPH_ARGS_7f3a
```

The loop is then armed and its output is your task: begin working on it. At every turn end ralph
gives the task back to you until you output the completion promise, as its output describes.
";

pub const GEMINI_COMMAND: &str = r#"description = "Start a Ralph loop: keep working on one task until it is really done"
prompt = """
!{printf '%s' {{args}} | ralph start --raw-arguments}

The loop is armed; the text above is your task. Begin working on it now.
"""
"#;

pub fn hook_args(host: Host) -> String {
    format!("hook stop --host {}", host.name())
}

pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+'))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Whether a hook entry is ralph's (for this host): its command runs
/// `… hook stop --host NAME`.
fn is_ours(entry: &Value, host: Host) -> bool {
    let marker = hook_args(host);
    ["command", "bash"].iter().any(|key| {
        entry
            .get(key)
            .and_then(Value::as_str)
            .is_some_and(|c| c.trim_end().ends_with(&marker))
    })
}

/// The event ralph listens to and its hook entry, in each host's schema.
pub fn entry(host: Host, command: &str) -> (&'static str, Value) {
    match host {
        Host::Codex | Host::Claude => (
            "Stop",
            json!({"hooks": [{"type": "command", "command": command, "timeout": HOOK_TIMEOUT_SECS}]}),
        ),
        Host::Gemini => (
            "AfterAgent",
            json!({"hooks": [{"name": "ralph", "type": "command", "command": command, "timeout": HOOK_TIMEOUT_SECS * 1000}]}),
        ),
        Host::Copilot => (
            "agentStop",
            json!({"type": "command", "bash": command, "timeoutSec": HOOK_TIMEOUT_SECS}),
        ),
    }
}

/// The hooks of a group (Codex, Gemini: `{"hooks": [...]}`) or the entry
/// itself (Copilot: a flat list).
fn group_entries(host: Host, group: &Value) -> Vec<&Value> {
    match host {
        Host::Copilot => vec![group],
        _ => group
            .get("hooks")
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default(),
    }
}

/// Adds ralph's entry unless an identical one is there; an older ralph entry
/// (another binary path) is replaced. Returns whether anything changed.
pub fn add_hook(root: &mut Map<String, Value>, host: Host, command: &str) -> Result<bool, String> {
    let (event, wanted) = entry(host, command);
    let hooks = object_at(root, "hooks")?;
    let list = hooks.entry(event).or_insert_with(|| json!([]));
    let list = list
        .as_array_mut()
        .ok_or_else(|| format!("`hooks.{event}` is not a list"))?;
    if list.contains(&wanted) {
        return Ok(false);
    }
    list.retain(|g| !group_entries(host, g).iter().any(|e| is_ours(e, host)));
    list.push(wanted);
    Ok(true)
}

/// Takes out every ralph entry for this host, and the lists it leaves empty.
pub fn remove_hook(root: &mut Map<String, Value>, host: Host) -> Result<bool, String> {
    let (event, _) = entry(host, "");
    let Some(hooks) = root.get_mut("hooks").and_then(Value::as_object_mut) else {
        return Ok(false);
    };
    let Some(list) = hooks.get_mut(event).and_then(Value::as_array_mut) else {
        return Ok(false);
    };
    let before = list.len();
    list.retain(|g| !group_entries(host, g).iter().any(|e| is_ours(e, host)));
    let changed = list.len() != before;
    if list.is_empty() {
        hooks.remove(event);
    }
    if hooks.is_empty() {
        root.remove("hooks");
    }
    Ok(changed)
}

fn object_at<'a>(
    root: &'a mut Map<String, Value>,
    key: &str,
) -> Result<&'a mut Map<String, Value>, String> {
    root.entry(key)
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| format!("`{key}` is not an object"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_keeps_other_hooks_and_is_idempotent() {
        for host in [Host::Codex, Host::Gemini, Host::Copilot] {
            let (event, _) = entry(host, "");
            let other = json!({"type": "command", "command": "other-tool", "bash": "other-tool"});
            let mut root: Map<String, Value> = serde_json::from_value(json!({
                "model": "x",
                "hooks": {event: [other.clone()], "PreToolUse": [1]}
            }))
            .unwrap();
            let old = format!("/bin/ralph {}", hook_args(host));
            assert!(add_hook(&mut root, host, &old).unwrap());
            let cmd = format!("/usr/bin/ralph {}", hook_args(host));
            assert!(
                add_hook(&mut root, host, &cmd).unwrap(),
                "a new path replaces the old entry"
            );
            assert!(
                !add_hook(&mut root, host, &cmd).unwrap(),
                "{host:?}: twice changes nothing"
            );
            let list = root["hooks"][event].as_array().unwrap();
            assert_eq!(list.len(), 2, "{host:?}: {list:?}");
            assert_eq!(list[0], other);
            assert!(remove_hook(&mut root, host).unwrap());
            assert!(!remove_hook(&mut root, host).unwrap());
            assert_eq!(root["hooks"][event], json!([other]));
            assert_eq!(root["model"], "x");
            assert_eq!(root["hooks"]["PreToolUse"], json!([1]));
        }
    }

    #[test]
    fn uninstall_leaves_no_empty_lists() {
        let mut root = Map::new();
        add_hook(&mut root, Host::Gemini, "ralph hook stop --host gemini").unwrap();
        remove_hook(&mut root, Host::Gemini).unwrap();
        assert!(root.is_empty(), "{root:?}");
    }

    #[test]
    fn quotes_paths_for_the_shell() {
        assert_eq!(shell_quote("/usr/bin/ralph"), "/usr/bin/ralph");
        assert_eq!(shell_quote("/a b/it's"), r"'/a b/it'\''s'");
    }
}
