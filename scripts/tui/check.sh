#!/bin/sh
# The terminal UI, as a user meets it: the pinned Claude Code client in tmux, with the plugin
# from this checkout, against a scripted local model (scripts/tui/mock_api.py, 127.0.0.1 only).
# It types what a user types and checks what the screen shows:
#
#   1. /ralph-loop arms at once (the hook's line) and the agent starts on the task;
#   2. /ralph-cancel typed while the agent works is queued, and runs when that reply ends:
#      the loop is cancelled at once, not iterations later (issue 26 item 2);
#   3. /ralph-loop, then Esc before the first reply, then the same /ralph-loop again: the
#      same loop, kept, not refused (item 4);
#   4. /ralph-status: answered by the hook, no model turn, the input box left empty (item 1).
#
# Usage: scripts/tui/check.sh            (needs tmux, python3, `npm ci --prefix tests/client`,
#                                         and `cargo build`; RALPH_BIN picks another binary)
# Each screen is printed; the exit code is 0 only if every check passed.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
claude=$root/tests/client/node_modules/@anthropic-ai/claude-code-linux-x64/claude
ralph_bin=${RALPH_BIN:-$root/target/debug/ralph}
for need in "$claude" "$ralph_bin"; do
    [ -x "$need" ] || { echo "missing: $need" >&2; exit 2; }
done
command -v tmux >/dev/null || { echo "missing: tmux" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/ralph-tui-XXXXXX")
session=ralph-tui-$$
mock_pid=
cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
    [ -n "$mock_pid" ] && kill "$mock_pid" 2>/dev/null || true
    rm -rf "$work" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

mkdir -p "$work/home" "$work/project/.claude"
project=$work/project
# Every turn takes a few seconds, so that there is time to type while the agent works.
python3 "$root/scripts/tui/mock_api.py" "$work/port" "$work/requests.log" \
    "sleep:10:Working on the guide, part one." \
    "sleep:10:Working on the guide, part two." &
mock_pid=$!
while [ ! -s "$work/port" ]; do sleep 0.1; done
port=$(cat "$work/port")
cat > "$work/home/.claude.json" <<EOF
{"hasCompletedOnboarding": true, "theme": "dark",
 "customApiKeyResponses": {"approved": ["test"], "rejected": []},
 "projects": {"$project": {"hasTrustDialogAccepted": true}}}
EOF

tmux new-session -d -s "$session" -x 200 -y 50 \
    "cd '$project' && env -i PATH='$PATH' LANG=C.UTF-8 TERM=xterm-256color HOME='$work/home' \
     XDG_STATE_HOME='$work/home/.local/state' RALPH_BIN='$ralph_bin' \
     ANTHROPIC_BASE_URL=http://127.0.0.1:$port ANTHROPIC_API_KEY=test \
     CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 \
     DISABLE_ERROR_REPORTING=1 '$claude' --plugin-dir '$root/plugin'; sleep 600"

screen() { tmux capture-pane -p -t "$session" | grep -v '^[[:space:]]*$'; }
# Waits up to $2 seconds for the screen to show $1 (a fixed string).
wait_for() {
    i=0
    while [ "$i" -lt $(($2 * 10)) ]; do
        screen | grep -qF -- "$1" && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
# Types a line and sends it. The first Enter may only pick the slash-command menu's entry
# (`/ralph-loop` becomes `/ralph:ralph-loop`); while the text is still in the input box,
# Enter again.
type_line() {
    tmux send-keys -t "$session" -l "$1"
    sleep 1
    tmux send-keys -t "$session" Enter
    words=$(printf '%s' "$1" | cut -d' ' -f2-3)
    n=0
    while [ "$n" -lt 5 ]; do
        sleep 1
        screen | grep '^❯' | grep -qF -- "$words" || return 0
        tmux send-keys -t "$session" Enter
        n=$((n + 1))
    done
}
failures=0
check() { # what, expected text, seconds
    if wait_for "$2" "$3"; then echo "ok: $1"; else echo "FAILED: $1 (no \"$2\" on screen)"; failures=$((failures + 1)); fi
    echo "----- screen -----"; screen | tail -n 22; echo "------------------"
}
status() { "$ralph_bin" status --json 2>/dev/null | python3 -c 'import json,sys
for l in json.load(sys.stdin)["loops"]:
    print(l["name"], l["state"], l["outcome"], l["iteration"])' ; }

wait_for "❯" 30 || { echo "the client did not start"; screen; exit 1; }
sleep 3 # the input box takes keys a moment after it is drawn

# 1. Arming.
type_line "/ralph-loop Write the user guide --max-iterations 10 --completion-promise DONE"
check "/ralph-loop arms before the first turn" "armed for this session, at most 10 iterations" 15
check "the agent works on the task" "Working on the guide, part one." 15

# 2. A command typed while the agent works: queued, then run when the reply ends.
wait_for "esc to interrupt" 15 || true
type_line "/ralph-cancel"
check "/ralph-cancel is queued" "Queued" 5
check "the queued message goes first" "your queued message goes first" 20
check "the loop is cancelled at once" "Cancelled loop \`ralph\`" 10
(cd "$project" && status)

# 3. Esc before the first reply, then the same command again.
type_line "/ralph-loop Write the changelog --max-iterations 5"
check "armed again" "armed for this session, at most 5 iterations" 10
tmux send-keys -t "$session" Escape
sleep 2
if screen | grep '^❯' | tail -n 1 | grep -qF "ralph-loop Write the changelog"; then
    echo "ok: Esc un-sent the command: it is back in the input box"
else
    echo "FAILED: Esc did not put the command back in the input box"; failures=$((failures + 1))
fi
echo "----- screen -----"; screen | tail -n 12; echo "------------------"
(cd "$project" && status)
tmux send-keys -t "$session" Enter
check "re-sent: the same loop, kept" "already armed for this session" 10
# End it the way a user would while the agent works: a queued /ralph-cancel.
wait_for "esc to interrupt" 15 || true
type_line "/ralph-cancel"
check "the kept loop is cancelled at the reply's end" "Cancelled loop \`ralph\` at iteration 1." 30

# 4. /ralph-status while idle: answered by the hook.
before=$(grep -c '"turn' "$work/requests.log" || true)
type_line "/ralph-status"
check "/ralph-status is answered by the hook" "Original prompt: /ralph-status" 10
after=$(grep -c '"turn' "$work/requests.log" || true)
if [ "$before" = "$after" ]; then echo "ok: /ralph-status made no model request"; else
    echo "FAILED: /ralph-status made a model request"; failures=$((failures + 1)); fi
(cd "$project" && status)

echo "model requests:"; cut -c1-160 "$work/requests.log"
[ "$failures" -eq 0 ] && echo "all TUI checks passed" || echo "$failures TUI check(s) failed"
[ "$failures" -eq 0 ]
