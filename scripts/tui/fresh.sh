#!/bin/sh
# `--fresh-at` in the terminal UI, as a user meets it: the pinned Claude Code client in tmux,
# with the plugin from this checkout and `ralph statusline` as its status line, against the
# scripted local model (scripts/tui/mock_api.py, 127.0.0.1 only) reporting a 700k context (70 % of the 1M window it reports for its model) for
# every request. It types what a user types and prints each screen (docs/guide.md shows them):
#
#   1. /ralph-loop … --fresh-at 60: refused while the status line has not reported the
#      window, then armed once one turn has passed;
#   2. the wrap-up turn, then the pause and its one line: type /clear, then any message;
#   3. /clear, then a message: the fresh conversation takes the loop on, with its task.
#
# Usage: scripts/tui/fresh.sh   (needs tmux, python3, `npm ci --prefix tests/client`, `cargo build`)
# The exit code is 0 only if every check passed.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
claude=$root/tests/client/node_modules/@anthropic-ai/claude-code-linux-x64/claude
ralph_bin=${RALPH_BIN:-$root/target/debug/ralph}
for need in "$claude" "$ralph_bin"; do
    [ -x "$need" ] || { echo "missing: $need" >&2; exit 2; }
done
command -v tmux >/dev/null || { echo "missing: tmux" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/ralph-tui-XXXXXX")
session=ralph-tui-fresh-$$
mock_pid=
cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
    [ -n "$mock_pid" ] && kill "$mock_pid" 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$work" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

mkdir -p "$work/home/.claude" "$work/project/.claude"
project=$work/project
MOCK_CONTEXT=700000 MOCK_WHEN="continues in this fresh conversation" \
MOCK_THEN="Read PROGRESS.md; chapter three is written. <promise>DONE</promise>" \
python3 "$root/scripts/tui/mock_api.py" "$work/port" "$work/requests.log" \
    "sleep:2:Hello." \
    "sleep:3:Chapter one is written." \
    "sleep:3:Chapter two is written." \
    "sleep:3:Notes for the next agent are in PROGRESS.md; committed." \
    "sleep:3:Still here." &
mock_pid=$!
while [ ! -s "$work/port" ]; do sleep 0.1; done
port=$(cat "$work/port")
cat > "$work/home/.claude.json" <<EOF
{"hasCompletedOnboarding": true, "theme": "dark",
 "customApiKeyResponses": {"approved": ["test"], "rejected": []},
 "projects": {"$project": {"hasTrustDialogAccepted": true}}}
EOF
cat > "$work/home/.claude/settings.json" <<EOF
{"statusLine": {"type": "command", "command": "'$ralph_bin' statusline"}}
EOF

tmux new-session -d -s "$session" -x 160 -y 50 \
    "cd '$project' && env -i PATH='$PATH' LANG=C.UTF-8 TERM=xterm-256color HOME='$work/home' \
     XDG_STATE_HOME='$work/home/.local/state' RALPH_BIN='$ralph_bin' \
     ANTHROPIC_BASE_URL=http://127.0.0.1:$port ANTHROPIC_API_KEY=test \
     CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 \
     DISABLE_ERROR_REPORTING=1 '$claude' --plugin-dir '$root/plugin'; sleep 600"

screen() { tmux capture-pane -p -t "$session" | grep -v '^[[:space:]]*$'; }
wait_for() { # text, seconds
    i=0
    while [ "$i" -lt $(($2 * 10)) ]; do
        screen | grep -qF -- "$1" && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
type_line() { # the first Enter may only pick the slash-command menu's entry
    tmux send-keys -t "$session" -l "$1"
    sleep 1
    tmux send-keys -t "$session" Enter
    words=$(printf '%s' "$1" | cut -d' ' -f1-2)
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
    echo "----- screen -----"; screen | tail -n 24; echo "------------------"
}
loop_field() { sed -n "s/^$1: *//p" "$project/.claude/ralph-loop.local.md" 2>/dev/null | tr -d '"'; }

wait_for "❯" 30 || { echo "the client did not start"; screen; exit 1; }
sleep 3

arm="/ralph-loop Write the user guide --max-iterations 10 --completion-promise DONE --fresh-at 60"
# 1. Before any turn the status line may not have reported the window: refused, with the fix.
type_line "$arm"
if wait_for "has not seen its size" 10; then
    echo "ok: refused while the window is unknown"
    echo "----- screen -----"; screen | tail -n 24; echo "------------------"
    type_line "hello"
    wait_for "Hello." 20 || true
    sleep 3
    type_line "$arm"
fi
check "armed with --fresh-at 60" "armed for this session" 20

# 2. The wrap-up turn, then the pause and its line.
check "the pause says what to type" "type /clear, then any message" 60
[ "$(loop_field active)" = false ] && echo "ok: paused" || { echo "FAILED: not paused"; failures=$((failures + 1)); }
iteration=$(loop_field iteration)

# 3. /clear, then any message: the fresh conversation goes on at the same iteration.
type_line "/clear"
sleep 3
echo "----- screen after /clear -----"; screen | tail -n 24; echo "------------------"
[ "$(loop_field active)" = true ] && echo "ok: active again after /clear" || { echo "FAILED: not active after /clear"; failures=$((failures + 1)); }
[ "$(loop_field iteration)" = "$iteration" ] && echo "ok: the same iteration ($iteration)" || { echo "FAILED: iteration moved"; failures=$((failures + 1)); }
type_line "go on"
check "the fresh conversation works on the task to its end" "chapter three is written" 30
check "the loop completed" "completed" 20

echo "model requests:"; cut -c1-200 "$work/requests.log"
echo "decision log:"; cut -c1-240 "$project"/.claude/ralph/history/*.jsonl 2>/dev/null || cut -c1-240 "$project"/.claude/ralph/logs/*.jsonl
[ "$failures" -eq 0 ] && echo "all TUI checks passed" || echo "$failures TUI check(s) failed"
[ "$failures" -eq 0 ]
