#!/usr/bin/env bash
# Times one Stop of an armed loop with a checkpoint per iteration (this ralph) side by side with
# the same Stop without one (a ralph built before checkpoints), in a git repository of N files
# (bench/make-repo.sh), one file edited before each stop, as an agent's turn would. Prints a
# markdown table.
#
# usage: bench/checkpoint.sh OLD_RALPH NEW_RALPH [N]
#   OLD_RALPH  a ralph binary without checkpoints (e.g. built from the commit before them)
#   NEW_RALPH  this ralph
#   N          files in the repository (default 30000)
# env:   RALPH_BENCH_CACHE=/some/dir   keep the generated repository there and reuse it
#        RALPH_BENCH_RUNS=20           timed runs per binary
set -euo pipefail
old=${1:?usage: bench/checkpoint.sh OLD_RALPH NEW_RALPH [N]}
new=${2:?usage: bench/checkpoint.sh OLD_RALPH NEW_RALPH [N]}
n=${3:-30000}
runs=${RALPH_BENCH_RUNS:-20}
here=$(cd "$(dirname "$0")" && pwd)
cache=${RALPH_BENCH_CACHE:-$(mktemp -d)}
command -v hyperfine >/dev/null || { echo "bench: hyperfine is needed" >&2; exit 1; }
repo=$cache/repo-$n
"$here/make-repo.sh" "$repo" "$n"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
event=$work/event.json
printf '{"session_id":"bench","cwd":"%s","last_assistant_message":"working"}' "$repo" >"$event"

# One armed loop per binary, its own per-user state; no stuck breaker (the reply is the same) and
# no block cap (CLAUDE_CODE_STOP_HOOK_BLOCK_CAP=0), so every timed stop is a counted iteration.
arm() {
  local bin=$1 state=$2
  rm -rf "$repo/.claude"
  git -C "$repo" for-each-ref --format='delete %(refname)' refs/ralph/ | git -C "$repo" update-ref --stdin
  (cd "$repo" && XDG_STATE_HOME=$state HOME=$work "$bin" start --session-id bench --name bench \
    --max-iterations 0 --completion-promise DONE --stuck-after 0 Task >/dev/null)
}
stop_cmd() {
  local bin=$1 state=$2
  echo "cd '$repo' && CLAUDE_CODE_STOP_HOOK_BLOCK_CAP=0 XDG_STATE_HOME='$state' HOME='$work' '$bin' hook stop <'$event' | grep -q block"
}
edit="date +%s%N >> '$repo/d000/f000000.txt'"

arm "$old" "$work/state-old"
hyperfine -N --warmup 3 --runs "$runs" --prepare "sh -c \"$edit\"" \
  --export-json "$work/old.json" -n "without checkpoint" "sh -c \"$(stop_cmd "$old" "$work/state-old")\"" >&2
arm "$new" "$work/state-new"
hyperfine -N --warmup 3 --runs "$runs" --prepare "sh -c \"$edit\"" \
  --export-json "$work/new.json" -n "with checkpoint" "sh -c \"$(stop_cmd "$new" "$work/state-new")\"" >&2
# Checkpoints kept: the per-user record (since issue 46), or refs/ralph/ (a ralph before it).
kept=$(( $(git -C "$repo" for-each-ref refs/ralph/ | wc -l) \
  + $(cat "$work"/state-new/ralph/checkpoints/*/bench/*/record 2>/dev/null | wc -l) ))
git -C "$repo" checkout -q -- . && rm -rf "$repo/.claude"
git -C "$repo" for-each-ref --format='delete %(refname)' refs/ralph/ | git -C "$repo" update-ref --stdin

row() {
  python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))["results"][0]
print(f"| {sys.argv[1]} | {r['mean']*1000:.0f} ms | {r['median']*1000:.0f} ms | {r['max']*1000:.0f} ms |")
PY
}
echo "| one Stop, $n files, one file edited | mean | median | max |"
echo "|---|---|---|---|"
row "without checkpoint" "$work/old.json"
row "with checkpoint" "$work/new.json"
echo
echo "($kept checkpoints were kept by the $((runs + 3)) timed and warm-up stops with checkpoints; each stop was checked to block, i.e. to count an iteration.)"
