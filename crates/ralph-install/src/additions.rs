//! What `ralph install` adds to each host's configuration, as pure edits of
//! the parsed settings: ralph's hook entry (recognised by its command,
//! `… hook stop --host NAME`), and the text of its `ralph-loop` command or
//! skill. The files themselves are read and written by the CLI.

use serde_json::{Value, json};

use ralph_core::hook::host::Host;
use ralph_state::json_edit::{self, Node};

/// The hook's time limit: above the longest `--verify` (14 min).
pub(crate) const HOOK_TIMEOUT_SECS: u64 = 900;

/// The Codex skill: it runs nothing. Codex runs the UserPromptSubmit hook
/// (`ralph hook prompt`, which `ralph install codex` adds) before the model
/// sees `$ralph-loop …`; the hook arms the loop from the prompt as data and
/// hands the model its activation text. The task never passes through a
/// shell, so no text in it (a here-doc's delimiter, a quote) can run as one.
pub(crate) const CODEX_SKILL: &str = "---
name: ralph-loop
description: Start a Ralph loop when the user asks for one ($ralph-loop TASK --completion-promise DONE ...) - ralph keeps this session working on the task until it is really done.
---

ralph's UserPromptSubmit hook armed a Ralph loop for this session when this prompt was sent,
and gave you its activation text (it starts with \"🔄 Ralph loop\"): your task and how to finish
it. Begin working on that task now. At every turn end ralph gives the task back to you until you
output the completion promise, as that text describes.

If there is no such text from ralph, the hook did not run and no loop is armed: tell the user so
in one sentence (run `ralph install codex` again to add ralph's prompt hook) and stop.
";

pub(crate) const GEMINI_COMMAND: &str = r#"description = "Start a Ralph loop: keep working on one task until it is really done"
prompt = """
!{printf '%s' {{args}} | ralph start --raw-arguments}

The loop is armed; the text above is your task. Begin working on it now.
"""
"#;

pub(crate) fn hook_args(host: Host) -> String {
    format!("hook stop --host {}", host.name())
}

pub(crate) fn shell_quote(s: &str) -> String {
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
/// `… hook stop --host NAME`, or, in the prompt event, `… hook prompt`.
fn is_ours(entry: &Value, host: Host) -> bool {
    let marker = hook_args(host);
    ["command", "bash"].iter().any(|key| {
        entry
            .get(key)
            .and_then(Value::as_str)
            .map(str::trim_end)
            .is_some_and(|c| c.ends_with(&marker) || c.ends_with(PROMPT_HOOK_ARGS))
    })
}

/// The prompt hook's arguments: it arms `$ralph-loop …` from the prompt as
/// data and answers ralph's other commands (`ralph hook prompt`).
pub(crate) const PROMPT_HOOK_ARGS: &str = "hook prompt";

/// The events ralph's hooks listen to on this host: the turn's end, and
/// for Codex the prompt (for its skill's arguments).
fn events(host: Host) -> &'static [&'static str] {
    match host {
        Host::Codex => &["Stop", "UserPromptSubmit"],
        _ => &[],
    }
}

/// The prompt hook's group for Codex: `command` is the stop hook's, with
/// `hook prompt` in place of `hook stop --host codex`.
fn prompt_entry(command: &str) -> Value {
    let base = command
        .trim_end()
        .strip_suffix(&hook_args(Host::Codex))
        .unwrap_or(command);
    json!({"hooks": [{"type": "command", "command": format!("{base}{PROMPT_HOOK_ARGS}"), "timeout": 30}]})
}

/// The event ralph listens to and its hook entry, in each host's schema.
pub(crate) fn entry(host: Host, command: &str) -> (&'static str, Value) {
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

/// Where the hook list of `event` is: its member's index in the root and
/// in `hooks`, when each is there.
fn member_index(node: &Node, key: &str) -> Option<usize> {
    node.members().iter().rposition(|m| m.key == key)
}

/// The settings text with one ralph entry of this host taken out (only the
/// entry: a user's hook in the same group stays), and the group, list and
/// `hooks` object it leaves empty; `None` when there is none.
fn remove_one(text: &str, host: Host) -> Result<Option<String>, String> {
    // The last event's entries first: the reverse of the order they were added in.
    for event in host_events(host).into_iter().rev() {
        if let Some(fewer) = remove_one_in(text, host, event)? {
            return Ok(Some(fewer));
        }
    }
    Ok(None)
}

/// Every event ralph adds a hook to on this host, in the order it adds them.
fn host_events(host: Host) -> Vec<&'static str> {
    let (stop, _) = entry(host, "");
    std::iter::once(stop)
        .chain(events(host).iter().copied().filter(|e| *e != stop))
        .collect()
}

fn remove_one_in(text: &str, host: Host, event: &str) -> Result<Option<String>, String> {
    let doc = parse_settings(text)?;
    let Some(hooks) = doc.get("hooks").filter(|h| h.is_object()) else {
        return Ok(None);
    };
    let Some(list) = hooks.get(event).filter(|l| l.is_array()) else {
        return Ok(None);
    };
    for (gi, group) in list.elements().iter().enumerate() {
        let inner: Vec<&json_edit::Node> = match host {
            Host::Copilot => vec![group],
            _ => group
                .get("hooks")
                .map(|h| h.elements().iter().collect())
                .unwrap_or_default(),
        };
        let Some(ei) = inner.iter().position(|e| is_ours(&e.to_value(text), host)) else {
            continue;
        };
        if inner.len() > 1 {
            let array = group.get("hooks").unwrap_or(group);
            return Ok(Some(json_edit::remove_element(text, array, ei)));
        }
        if list.elements().len() > 1 {
            return Ok(Some(json_edit::remove_element(text, list, gi)));
        }
        if hooks.members().len() > 1 {
            let index = member_index(hooks, event).unwrap_or(0);
            return Ok(Some(json_edit::remove_member(text, hooks, index)));
        }
        let index = member_index(&doc, "hooks").unwrap_or(0);
        return Ok(Some(json_edit::remove_member(text, &doc, index)));
    }
    Ok(None)
}

/// The settings document (comments allowed); an empty file is `{}`.
fn parse_settings(text: &str) -> Result<Node, String> {
    let doc = json_edit::parse(text).map_err(|e| format!("not valid JSON ({e}); fix it first"))?;
    if doc.is_object() {
        Ok(doc)
    } else {
        Err("expected a JSON object".to_owned())
    }
}

/// The text of a settings file ralph creates: what an uninstall that takes
/// everything out of it leaves, and so a file it may remove.
pub(crate) const EMPTY_SETTINGS: &str = "{}\n";

/// Adds ralph's entry to the settings text unless an identical one is
/// the only ralph entry there; older ralph entries (another binary path)
/// are taken out first, each alone. Every other byte stays. `version`:
/// a `"version": 1` member is added when missing (a repository's Copilot
/// hooks file). `None` when nothing changes.
pub(crate) fn add_hook(
    text: &str,
    host: Host,
    command: &str,
    version: bool,
) -> Result<Option<String>, String> {
    let (event, wanted) = entry(host, command);
    let stop = add_group(text, host, event, &wanted, version)?;
    if host != Host::Codex {
        return Ok(stop);
    }
    let after_stop = stop.as_deref().unwrap_or(text);
    match add_group(
        after_stop,
        host,
        "UserPromptSubmit",
        &prompt_entry(command),
        false,
    )? {
        Some(both) => Ok(Some(both)),
        None => Ok(stop),
    }
}

/// [`add_hook`] for one event's group.
fn add_group(
    text: &str,
    host: Host,
    event: &str,
    wanted: &Value,
    version: bool,
) -> Result<Option<String>, String> {
    let wanted = wanted.clone();
    let mut text = if text.trim().is_empty() {
        EMPTY_SETTINGS.to_owned()
    } else {
        text.to_owned()
    };
    let doc = parse_settings(&text)?;
    if let Some(hooks) = doc.get("hooks").filter(|h| !h.is_object()) {
        let _ = hooks;
        return Err("`hooks` is not an object".to_owned());
    }
    let list = doc.get("hooks").and_then(|h| h.get(event));
    if list.is_some_and(|l| !l.is_array()) {
        return Err(format!("`hooks.{event}` is not a list"));
    }
    let groups: Vec<Value> = list
        .map(|l| l.elements().iter().map(|g| g.to_value(&text)).collect())
        .unwrap_or_default();
    let ours = groups
        .iter()
        .filter(|g| group_entries(host, g).iter().any(|e| is_ours(e, host)))
        .count();
    let has_version = !version || doc.get("version").is_some();
    if ours == 1 && groups.contains(&wanted) && has_version {
        return Ok(None);
    }
    while let Some(fewer) = remove_one_in(&text, host, event)? {
        text = fewer;
    }
    if !has_version {
        let doc = parse_settings(&text)?;
        text = json_edit::insert_member(&text, &doc, "version", &json!(1));
    }
    let doc = parse_settings(&text)?;
    let text = match doc.get("hooks") {
        None => json_edit::insert_member(&text, &doc, "hooks", &json!({ event: [wanted] })),
        Some(hooks) => match hooks.get(event) {
            None => json_edit::insert_member(&text, hooks, event, &json!([wanted])),
            Some(list) => json_edit::push_element(&text, list, &wanted),
        },
    };
    Ok(Some(text))
}

/// Takes every ralph entry for this host out of the settings text, and the
/// groups, lists and `hooks` object that held only it: the bytes
/// [`add_hook`] added, and no other. `None` when there was none.
pub(crate) fn remove_hook(text: &str, host: Host) -> Result<Option<String>, String> {
    let mut text = text.to_owned();
    let mut changed = false;
    while let Some(fewer) = remove_one(&text, host)? {
        text = fewer;
        changed = true;
    }
    Ok(changed.then_some(text))
}

/// Whether the settings text holds ralph's turn-end hook for this host.
pub(crate) fn has_hook(text: &str, host: Host) -> bool {
    let (stop, _) = entry(host, "");
    remove_one_in(text, host, stop).is_ok_and(|r| r.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_keeps_other_hooks_and_is_idempotent() {
        for host in [Host::Codex, Host::Gemini, Host::Copilot] {
            let (event, _) = entry(host, "");
            let other = json!({"type": "command", "command": "other-tool", "bash": "other-tool"});
            let before = format!(
                "{{\n  // mine\n  \"model\": \"x\", \"n\": 12345678901234567890,\n  \"hooks\": {{\"{event}\": [{other}], \"PreToolUse\": [1]}}\n}}\n"
            );
            let old = format!("/bin/ralph {}", hook_args(host));
            let once = add_hook(&before, host, &old, false).unwrap().unwrap();
            let cmd = format!("/usr/bin/ralph {}", hook_args(host));
            let text = add_hook(&once, host, &cmd, false)
                .unwrap()
                .expect("a new path replaces the old entry");
            assert_eq!(
                add_hook(&text, host, &cmd, false).unwrap(),
                None,
                "{host:?}: twice changes nothing"
            );
            let doc = json_edit::parse(&text).unwrap();
            let list = doc
                .get("hooks")
                .unwrap()
                .get(event)
                .unwrap()
                .to_value(&text);
            assert_eq!(list.as_array().unwrap().len(), 2, "{host:?}: {list:?}");
            assert_eq!(list[0], other);
            let removed = remove_hook(&text, host).unwrap().unwrap();
            assert_eq!(removed, before, "{host:?}: every byte as before");
            assert_eq!(remove_hook(&removed, host).unwrap(), None);
        }
    }

    #[test]
    fn uninstall_keeps_a_users_hook_in_ralphs_group() {
        let mine = json!({"type": "command", "command": "notify-me"});
        let ralph = json!({"type": "command", "command": "/bin/ralph hook stop --host codex"});
        let text = format!("{{\"hooks\": {{\"Stop\": [{{\"hooks\": [{mine}, {ralph}]}}]}}}}");
        let removed = remove_hook(&text, Host::Codex).unwrap().unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&removed).unwrap(),
            json!({"hooks": {"Stop": [{"hooks": [mine]}]}})
        );
        assert!(has_hook(&text, Host::Codex) && !has_hook(&removed, Host::Codex));
    }

    #[test]
    fn uninstall_leaves_the_file_as_ralph_created_it() {
        let text = add_hook("", Host::Gemini, "ralph hook stop --host gemini", false)
            .unwrap()
            .unwrap();
        assert_eq!(
            remove_hook(&text, Host::Gemini).unwrap().unwrap(),
            EMPTY_SETTINGS
        );
    }

    #[test]
    fn quotes_paths_for_the_shell() {
        assert_eq!(shell_quote("/usr/bin/ralph"), "/usr/bin/ralph");
        assert_eq!(shell_quote("/a b/it's"), r"'/a b/it'\''s'");
    }
}
