#!/usr/bin/env bash
# One looping Stop as Claude Code runs it: the Stop command of plugin/hooks/hooks.json, run by
# `sh -c` with the event on stdin and CLAUDE_PLUGIN_ROOT set, the binary found where
# `claude plugin install` puts it (node_modules/@ralph-loop/ralph-linux-x64/bin/ralph), or
# through RALPH_BIN. In one hyperfine run, beside the floor (`sh -c /bin/true`), the binary
# called straight, and the shell-pipeline reference hook. Every command is
# `sh -c 'exec <event; …'` (hyperfine --shell=none), so nothing is subtracted.
# The loop runs with the no-progress breaker off (no `git status`), so what is timed is the
# stop itself and how it is started.
#
# usage: bench/launcher.sh RALPH_BINARY [OLD_PLUGIN_DIR]
#        OLD_PLUGIN_DIR: another plugin/ folder (say, a checkout's before a change) timed beside
#        this repository's, with the same binary.
# env:   RALPH_SHARED=/path/to/shared   where bench/reference-stop-hook.sh is
#        RALPH_BENCH_MIN_RUNS=50  RALPH_BENCH_WARMUP=5  RALPH_BENCH_ROUNDS=200
# A second pass interleaves the commands (one run of each per round, the loop restored before
# each) and reports the median wall time and the mean CPU time (user + system, every process
# of the command), which a busy machine's load barely moves.
set -euo pipefail
bin=$(realpath "${1:?usage: bench/launcher.sh RALPH_BINARY [OLD_PLUGIN_DIR]}")
old=${2:+$(realpath "$2")}
REPO=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${RALPH_SHARED:-$REPO/../shared}
REF=$SHARED/bench/reference-stop-hook.sh
[[ -f $REF ]] || { echo "launcher: no reference hook at $REF (set RALPH_SHARED)" >&2; exit 1; }
MIN_RUNS=${RALPH_BENCH_MIN_RUNS:-50}
ROUNDS=${RALPH_BENCH_ROUNDS:-200}
WARMUP=${RALPH_BENCH_WARMUP:-5}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ralph-launcher.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
SESSION=bench-session-0001
proj=$WORK/project
state=$WORK/state

# plugin NAME SOURCE: a plugin folder as `claude plugin install` leaves it.
plugin() {
  local dir=$WORK/$1
  cp -a "$2" "$dir"
  mkdir -p "$dir/node_modules/@ralph-loop/ralph-linux-x64/bin"
  cp "$bin" "$dir/node_modules/@ralph-loop/ralph-linux-x64/bin/ralph"
  echo "$dir"
}
new_plugin=$(plugin plugin-new "$REPO/plugin")
[[ -n $old ]] && old_plugin=$(plugin plugin-old "$old")
stop_cmd=$(jq -r '.hooks.Stop[0].hooks[0].command' "$new_plugin/hooks/hooks.json")
[[ -n $old ]] && old_cmd=$(jq -r '.hooks.Stop[0].hooks[0].command' "$old_plugin/hooks/hooks.json")

mkdir -p "$proj/.claude"
(cd "$proj" && git init -q && git commit -q --allow-empty -m init)
GEN=$SHARED/bench/gen-transcript.py
[[ -f $GEN ]] || GEN=$REPO/bench/gen-transcript.py
python3 "$GEN" "$WORK/t.jsonl" 0 "Still working on the next story." >/dev/null
jq -cn --arg s "$SESSION" --arg t "$WORK/t.jsonl" --arg c "$proj" \
  '{session_id:$s, transcript_path:$t, cwd:$c, hook_event_name:"Stop", stop_hook_active:false, last_assistant_message:"Still working on the next story."}' >"$WORK/event.json"
(cd "$proj" && XDG_STATE_HOME=$state "$bin" start --max-iterations 0 --completion-promise DONE --no-progress-after 0 \
  --session-id "$SESSION" "Implement the next story in PRD.md." </dev/null >/dev/null)
# Primed as after a real turn: one stop taken, the offset at the transcript's last line (the
# reply), so each timed stop is a later stop of a running loop.
(cd "$proj" && XDG_STATE_HOME=$state "$bin" hook stop <"$WORK/event.json" >/dev/null)
len=$(stat -c %s "$WORK/t.jsonl")
last=$(tail -n 1 "$WORK/t.jsonl" | wc -c)
sed -i "s/^transcript_offset: .*/transcript_offset: $((len - last))/" "$proj/.claude/ralph-loop.local.md"
sed -i 's/^started_at: .*/started_at: "2026-01-01T00:00:00Z"/' "$proj/.claude/ralph-loop.local.md"
(cd "$proj" && XDG_STATE_HOME=$state "$bin" adopt --name ralph --yes </dev/null >/dev/null 2>&1) || true
cp -a "$proj/.claude" "$WORK/snap" && cp -a "$state" "$WORK/snapstate"
cat >"$WORK/prep.sh" <<EOF
rm -rf "$proj/.claude" "$state"
cp -a "$WORK/snap" "$proj/.claude"
cp -a "$WORK/snapstate" "$state"
EOF
export XDG_STATE_HOME=$state CLAUDE_PROJECT_DIR=$proj
ev=$WORK/event.json
out=$(cd "$proj" && CLAUDE_PLUGIN_ROOT=$new_plugin sh -c "exec <$ev; $stop_cmd")
[[ $(jq -r .decision <<<"$out") == block ]] || { echo "launcher: the stop did not block: $out" >&2; exit 1; }

args=(--shell=none --warmup "$WARMUP" --min-runs "$MIN_RUNS" --export-json "$WORK/r.json" --prepare "sh $WORK/prep.sh"
  -n floor "sh -c 'exec <$ev; /bin/true'"
  -n direct "sh -c 'exec <$ev; $bin hook stop --host claude'"
  -n "hooks.json" "env CLAUDE_PLUGIN_ROOT=$new_plugin sh -c 'exec <$ev; $stop_cmd'"
  -n "hooks.json, RALPH_BIN" "env CLAUDE_PLUGIN_ROOT=$new_plugin RALPH_BIN=$bin sh -c 'exec <$ev; $stop_cmd'")
[[ -n $old ]] && args+=(-n "hooks.json, old launcher" "env CLAUDE_PLUGIN_ROOT=$old_plugin sh -c 'exec <$ev; $old_cmd'")
args+=(-n reference "sh -c 'exec <$ev; bash $REF'")
(cd "$proj" && hyperfine "${args[@]}" >"$WORK/log" 2>&1) || { cat "$WORK/log" >&2; exit 1; }
echo "| command | median ms | ÷ floor |"
echo "|---|---|---|"
python3 - "$WORK/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
floor = next(x["median"] for x in r if x["command"] == "floor")
for x in r:
    print(f"| {x['command']} | {x['median'] * 1000:.2f} | {x['median'] / floor:.2f}× |")
PY

python3 - "$WORK" "$ROUNDS" "$ev" "$bin" "$new_plugin" "$stop_cmd" "${old_plugin:-}" "${old_cmd:-}" "$REF" <<'PY'
import os, resource, statistics, subprocess, sys, time
work, rounds, ev, bin_, new, cmd, old, old_cmd, ref = sys.argv[1:10]
rounds = int(rounds)
env = dict(os.environ)
rows = [("floor", ["sh", "-c", f"exec <{ev}; /bin/true"], {}),
        ("direct", ["sh", "-c", f"exec <{ev}; {bin_} hook stop --host claude"], {}),
        ("hooks.json", ["sh", "-c", f"exec <{ev}; {cmd}"], {"CLAUDE_PLUGIN_ROOT": new}),
        ("hooks.json, RALPH_BIN", ["sh", "-c", f"exec <{ev}; {cmd}"], {"CLAUDE_PLUGIN_ROOT": new, "RALPH_BIN": bin_})]
if old:
    rows.append(("hooks.json, old launcher", ["sh", "-c", f"exec <{ev}; {old_cmd}"], {"CLAUDE_PLUGIN_ROOT": old}))
wall = {n: [] for n, _, _ in rows}
cpu = {n: 0.0 for n, _, _ in rows}
for _ in range(rounds):
    for name, argv, extra in rows:
        subprocess.run(["sh", f"{work}/prep.sh"])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(argv, env={**env, **extra}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall[name].append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu[name] += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
med = {n: statistics.median(v) * 1000 for n, v in wall.items()}
c = {n: v / rounds * 1000 for n, v in cpu.items()}
print(f"\ninterleaved, {rounds} rounds\n")
print("| command | median wall ms | ÷ floor | CPU ms | ÷ floor |")
print("|---|---|---|---|---|")
for name, _, _ in rows:
    print(f"| {name} | {med[name]:.2f} | {med[name]/med['floor']:.2f}× | {c[name]:.2f} | {c[name]/c['floor']:.2f}× |")
PY
