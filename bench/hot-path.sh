#!/usr/bin/env bash
# The hot path side by side (issue 47): one looping Stop (blocking, counted, a checkpoint kept)
# of an armed loop, run as Claude Code runs a hook (`sh -c`, the event on its stdin), with two
# ralph binaries, in a git repository of N files (bench/make-repo.sh), one file edited before
# every run, in ONE hyperfine run together with the floor (`sh -c /bin/true`) and a `git status`
# of the same repository. That every timed stop blocked is checked after the run. Also counts the git processes one such
# stop starts, with a counting `git` first on PATH (in a folder outside the repository). Prints a
# markdown table.
#
# With RALPH_BENCH_PROTECT=1 it also arms one loop per binary with `--protect 'tests/**'`, whose
# every stop reads the paths changed since arming, and times their looping stops in the same run.
#
# usage: bench/hot-path.sh BASE_RALPH NEW_RALPH [N]
#   BASE_RALPH  a ralph built from main before the change
#   NEW_RALPH   this ralph
#   N           files in the repository (default 30000)
# env:   RALPH_BENCH_CACHE=/some/dir   keep the generated repository there and reuse it
#        RALPH_BENCH_RUNS=20           timed runs per command
#        RALPH_BENCH_PROTECT=1         the `--protect` rows too
set -euo pipefail
base=${1:?usage: bench/hot-path.sh BASE_RALPH NEW_RALPH [N]}
new=${2:?usage: bench/hot-path.sh BASE_RALPH NEW_RALPH [N]}
n=${3:-30000}
runs=${RALPH_BENCH_RUNS:-20}
here=$(cd "$(dirname "$0")" && pwd)
cache=${RALPH_BENCH_CACHE:-$(mktemp -d)}
command -v hyperfine >/dev/null || { echo "bench: hyperfine is needed" >&2; exit 1; }
repo=$cache/repo-$n
"$here/make-repo.sh" "$repo" "$n"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$repo/.claude"
git -C "$repo" checkout -q -- .

# One armed loop per binary (its own session and per-user state): no stuck breaker (the reply is
# the same at every stop) and no block cap, so every timed stop blocks and counts an iteration.
arm() {
  local bin=$1 who=$2
  shift 2
  (cd "$repo" && XDG_STATE_HOME=$work/state-$who HOME=$work "$bin" start --session-id "$who" \
    --name "$who" --max-iterations 0 --completion-promise DONE --stuck-after 0 "$@" Task >/dev/null)
  printf '{"session_id":"%s","cwd":"%s","last_assistant_message":"working"}' "$who" "$repo" \
    >"$work/event-$who.json"
}
stop_cmd() {
  local bin=$1 who=$2
  # As Claude Code runs a hook (`sh -c`), its answer kept for the check after the run.
  echo "cd '$repo' && CLAUDE_CODE_STOP_HOOK_BLOCK_CAP=0 XDG_STATE_HOME='$work/state-$who' HOME='$work' '$bin' hook stop <'$work/event-$who.json' >'$work/answer-$who'"
}
arm "$base" base
arm "$new" new
protect=${RALPH_BENCH_PROTECT:-}
if [[ -n $protect ]]; then
  arm "$base" pbase --protect 'tests/**'
  arm "$new" pnew --protect 'tests/**'
fi
edit="date +%s%N >> '$repo/d000/f000000.txt'"

# The git processes of one looping stop (after a first stop that seeds what it keeps).
mkdir -p "$work/bin"
printf '#!/bin/sh\necho "$*" >> "%s/git-calls"\nexec %s "$@"\n' "$work" "$(command -v git)" \
  >"$work/bin/git"
chmod +x "$work/bin/git"
count() {
  local who=$1 bin=$2
  sh -c "$(stop_cmd "$bin" "$who")"
  sh -c "$edit"
  rm -f "$work/git-calls"
  PATH="$work/bin:$PATH" sh -c "$(stop_cmd "$bin" "$who")"
  wc -l <"$work/git-calls" | tr -d ' '
}
gits=("looping stop, base=$(count base "$base")" "looping stop, new=$(count new "$new")")
rows=(-n "looping stop, base" "sh -c \"$(stop_cmd "$base" base)\""
  -n "looping stop, new" "sh -c \"$(stop_cmd "$new" new)\"")
if [[ -n $protect ]]; then
  gits+=("looping stop, --protect, base=$(count pbase "$base")"
    "looping stop, --protect, new=$(count pnew "$new")")
  rows+=(-n "looping stop, --protect, base" "sh -c \"$(stop_cmd "$base" pbase)\""
    -n "looping stop, --protect, new" "sh -c \"$(stop_cmd "$new" pnew)\"")
fi

hyperfine -N --warmup 3 --runs "$runs" --prepare "sh -c \"$edit\"" --export-json "$work/all.json" \
  -n "floor: sh -c /bin/true" "sh -c /bin/true" \
  -n "git status" "git -C '$repo' status --porcelain=v2 --untracked-files=all" \
  "${rows[@]}" >&2
# The same commands again, interleaved: each round edits the file and runs every command once,
# in turn, so that a slow minute of a shared machine falls on all of them alike (hyperfine runs
# each command's runs together). Medians of the wall time and of the CPU time (user + system,
# children included).
names=("floor: sh -c /bin/true" "git status")
commands=("sh -c /bin/true" "git -C '$repo' status --porcelain=v2 --untracked-files=all")
for ((i = 0; i < ${#rows[@]}; i += 3)); do
  names+=("${rows[i + 1]}")
  commands+=("${rows[i + 2]}")
done
python3 - "$edit" "${RALPH_BENCH_ROUNDS:-$runs}" "${names[@]}" -- "${commands[@]}" >"$work/interleaved.md" <<'PY'
import resource, shlex, statistics, subprocess, sys, time
edit, rounds, rest = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
split = rest.index("--")
names, commands = rest[:split], [shlex.split(c) for c in rest[split + 1:]]
walls = {n: [] for n in names}
cpus = {n: [] for n in names}
for _ in range(rounds):
    for name, argv in zip(names, commands):
        subprocess.run(["sh", "-c", edit], check=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        walls[name].append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
floor = statistics.median(walls[names[0]])
print(f"| interleaved, {rounds} rounds | median wall | median CPU | × floor |")
print("|---|---:|---:|---:|")
for name in names:
    wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
    print(f"| {name} | {wall*1000:.1f} ms | {cpu*1000:.1f} ms | {wall/floor:.1f} |")
PY
git -C "$repo" checkout -q -- . && rm -rf "$repo/.claude"
# Every timed stop blocked and counted an iteration: the last answer blocks, at an iteration
# past the warm-up and timed runs (arming is iteration 1; the count above added two stops).
for who in base new ${protect:+pbase pnew}; do
  iteration=$(grep -o 'iteration [0-9]*' "$work/answer-$who" | head -1 | cut -d' ' -f2)
  if ! grep -q '"decision":"block"' "$work/answer-$who" || ((${iteration:-0} < runs + 3 + 3)); then
    echo "bench: the $who loop's last stop did not block at iteration $((runs + 6)) or later:" >&2
    cat "$work/answer-$who" >&2
    exit 1
  fi
done

python3 - "$work/all.json" "$n" "${gits[@]}" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
floor = results[0]["mean"]
gits = dict(a.split("=", 1) for a in sys.argv[3:])
gits["git status"] = "1"
print(f"| {int(sys.argv[2]):,} files, one file edited before each run | mean | median | max "
      "| CPU (user + system) | × floor | git processes |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in results:
    cpu = (r["user"] + r["system"]) * 1000
    print(f"| {r['command']} | {r['mean']*1000:.1f} ms | {r['median']*1000:.1f} ms | "
          f"{r['max']*1000:.1f} ms | {cpu:.1f} ms | {r['mean']/floor:.1f} | "
          f"{gits.get(r['command'], '–')} |")
PY
echo
cat "$work/interleaved.md"
