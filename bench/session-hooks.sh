#!/usr/bin/env bash
# Times the session hooks (prompt, session-start, session-end) beside the Stop hook and
# `true`, as whole processes, with hyperfine, in a project without loops (the common path:
# one directory read) and in one where another session's loop lives (a directory read, the
# lock, one parse).
#
# usage: bench/session-hooks.sh      (builds the release binary first)
# env:   RALPH_BENCH_WARMUP=5 RALPH_BENCH_MIN_RUNS=1000 RALPH_BENCH_NO_BUILD=1 (use target/release as is)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
WARMUP=${RALPH_BENCH_WARMUP:-5}
MIN_RUNS=${RALPH_BENCH_MIN_RUNS:-1000}
command -v hyperfine >/dev/null || { echo "bench: install hyperfine (apt-get install hyperfine)" >&2; exit 1; }
[[ -n ${RALPH_BENCH_NO_BUILD:-} ]] || (cd "$REPO" && cargo build --release -p ralph-loop --quiet)
RALPH=$REPO/target/release/ralph

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export HOME=$WORK/home XDG_STATE_HOME=$WORK/state
mkdir -p "$HOME" "$XDG_STATE_HOME"
unset CLAUDE_PROJECT_DIR CLAUDE_CODE_SESSION_ID CLAUDE_PID

run() { # $1: project dir, $2: label
  local dir=$1 s=bench-session-0001
  printf '{"session_id":"%s","cwd":"%s","prompt":"hello"}\n' "$s" "$dir" > "$WORK/prompt.json"
  printf '{"session_id":"%s","cwd":"%s","source":"resume"}\n' "$s" "$dir" > "$WORK/start.json"
  printf '{"session_id":"%s","cwd":"%s","reason":"prompt_input_exit"}\n' "$s" "$dir" > "$WORK/end.json"
  printf '{"session_id":"%s","cwd":"%s","stop_hook_active":false,"last_assistant_message":"hi"}\n' "$s" "$dir" > "$WORK/stop.json"
  echo "## $2" >&2
  cd "$dir"
  # Each command reads its event through a shell redirect; hyperfine measures the shell's
  # own start-up and subtracts it (works with hyperfine 1.15, which has no --input).
  for hook in stop:stop prompt:prompt session-start:start session-end:end; do
    sub=${hook%%:*} file=${hook##*:}
    hyperfine --shell=sh --warmup "$WARMUP" --min-runs "$MIN_RUNS" --export-json "$WORK/$2-$sub.json" \
      -n "ralph hook $sub" "$RALPH hook $sub < $WORK/$file.json" >/dev/null 2>&1
  done
  hyperfine --shell=sh --warmup "$WARMUP" --min-runs "$MIN_RUNS" --export-json "$WORK/$2-true.json" \
    -n true "/bin/true < $WORK/prompt.json" >/dev/null 2>&1
  python3 - "$WORK" "$2" <<'PY'
import json, sys
work, label = sys.argv[1], sys.argv[2]
def mean(name):
    r = json.load(open(f"{work}/{label}-{name}.json"))["results"][0]
    return r["mean"] * 1000, r["stddev"] * 1000
t, _ = mean("true")
s, _ = mean("stop")
print(f"\n{label}\n")
print("| command | mean ms | ± | × true | × hook stop |")
print("|---|---|---|---|---|")
for name in ["true", "stop", "prompt", "session-start", "session-end"]:
    m, sd = mean(name)
    shown = "true" if name == "true" else f"ralph hook {name}"
    print(f"| `{shown}` | {m:.2f} | {sd:.2f} | {m/t:.1f} | {m/s:.2f} |")
PY
}

# On a busy machine hyperfine's means drift with the load; this pass interleaves the commands
# (one run of each per round) and reports the median wall time and the mean CPU time
# (user + system) of each, which the load barely moves.
interleaved() { # $1: project dir, $2: label
  cd "$1"
  python3 - "$WORK" "$2" "$RALPH" "$MIN_RUNS" <<'PY'
import os, resource, statistics, subprocess, sys, time
work, label, ralph, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cmds = [("true", ["/bin/true"], "prompt"), ("ralph hook stop", [ralph, "hook", "stop"], "stop"),
        ("ralph hook prompt", [ralph, "hook", "prompt"], "prompt"),
        ("ralph hook session-start", [ralph, "hook", "session-start"], "start"),
        ("ralph hook session-end", [ralph, "hook", "session-end"], "end")]
wall = {n: [] for n, _, _ in cmds}
cpu = {n: 0.0 for n, _, _ in cmds}
for _ in range(rounds):
    for name, argv, event in cmds:
        with open(f"{work}/{event}.json", "rb") as stdin:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall[name].append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name] += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
med = {n: statistics.median(v) * 1000 for n, v in wall.items()}
c = {n: v / rounds * 1000 for n, v in cpu.items()}
print(f"\n{label}, interleaved, {rounds} rounds\n")
print("| command | median wall ms | × true | × hook stop | CPU ms | × hook stop |")
print("|---|---|---|---|---|---|")
for name, _, _ in cmds:
    print(f"| `{name}` | {med[name]:.2f} | {med[name]/med['true']:.1f} | {med[name]/med['ralph hook stop']:.2f} | {c[name]:.2f} | {c[name]/c['ralph hook stop']:.2f} |")
PY
}

EMPTY=$WORK/empty
mkdir -p "$EMPTY/.claude"
run "$EMPTY" "no-loop"
interleaved "$EMPTY" "no-loop"

FOREIGN=$WORK/foreign
mkdir -p "$FOREIGN/.claude"
(cd "$FOREIGN" && "$RALPH" start --session-id someone-else --max-iterations 20 "Another session's task" >/dev/null)
run "$FOREIGN" "another-sessions-loop"
interleaved "$FOREIGN" "another-sessions-loop"
