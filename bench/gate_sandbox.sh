#!/usr/bin/env bash
# What the gate's sandbox (bubblewrap, issue 45) adds to one gate: the same Stop hook, whose
# loop runs `--check true` at every stop, timed with `--gate-sandbox off` and with the default
# (sandboxed where bubblewrap works), alternating ABBA so load drifts hit both sides alike.
# The difference is what one sandboxed gate costs: ralph's look at what to bind, bubblewrap's
# probe (once per hook process) and bubblewrap's namespaces and mounts.
#
# usage: bench/gate_sandbox.sh     (Linux, with bubblewrap)
# env:   RALPH=path/to/ralph       [target/release/ralph, built when missing]
#        RALPH_BENCH_ROUNDS=50     (each round: 2 stops per side)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
RALPH=${RALPH:-$REPO/target/release/ralph}
ROUNDS=${RALPH_BENCH_ROUNDS:-50}
command -v bwrap >/dev/null || { echo "bench: install bubblewrap" >&2; exit 1; }
[ -x "$RALPH" ] || cargo build --release -p ralph-loop --manifest-path "$REPO/Cargo.toml"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export HOME=$work/home XDG_STATE_HOME=$work/home/.local/state CLAUDE_CODE_STOP_HOOK_BLOCK_CAP=0
mkdir -p "$HOME"
for side in off sandboxed; do
    mkdir -p "$work/$side/.claude"
    flags=()
    [ "$side" = off ] && flags=(--gate-sandbox off)
    (cd "$work/$side" && "$RALPH" start --session-id "s-$side" --max-iterations 100000 \
        --stuck-after 0 --completion-promise DONE --check true "${flags[@]}" bench >/dev/null)
done

# One stop of `side`, in nanoseconds.
stop() {
    local side=$1 start end
    local event="{\"session_id\":\"s-$side\",\"cwd\":\"$work/$side\",\"last_assistant_message\":\"working\"}"
    start=$(date +%s%N)
    (cd "$work/$side" && printf '%s' "$event" | "$RALPH" hook stop >/dev/null)
    end=$(date +%s%N)
    echo $(( end - start ))
}

: > "$work/off.ns"; : > "$work/sandboxed.ns"
for _ in $(seq 1 3); do stop off >/dev/null; stop sandboxed >/dev/null; done
for _ in $(seq 1 "$ROUNDS"); do
    stop off >> "$work/off.ns"; stop sandboxed >> "$work/sandboxed.ns"
    stop sandboxed >> "$work/sandboxed.ns"; stop off >> "$work/off.ns"
done
grep -q 'check `true` passed' "$work/sandboxed/.claude/ralph/logs/"* 2>/dev/null || true
for side in off sandboxed; do
    sort -n "$work/$side.ns" | awk -v side="$side" '
        { v[NR] = $1; sum += $1 }
        END { printf "%-10s stops %d  mean %.1f ms  median %.1f ms  min %.1f ms\n",
              side, NR, sum / NR / 1e6, v[int((NR + 1) / 2)] / 1e6, v[1] / 1e6 }'
done
