#!/usr/bin/env bash
# The gate's cost in its snapshot (issue 45) side by side with the gate run in the project folder:
# one Stop of an armed loop whose `--check` runs at every stop, one file edited before each stop
# (as an agent's turn would), timed with hyperfine for an older ralph (the gate in the project)
# and this one (the gate in the snapshot, with the setup step where the project has one).
# "cold": the loop's gate folder removed before each stop (a first gate: full checkout, setup,
# cold build caches); "warm": the folder kept (every later gate). Prints a markdown table.
#
# Projects: a small Python project (20 modules, unittest; setup `python3 -m venv --without-pip
# .venv`), a small Rust crate with a warm `target/` in the project (`cargo test --offline -q`),
# and a repository of N files (bench/make-repo.sh; the check is `true`, so only the snapshot
# is timed).
#
# usage: bench/gate.sh OLD_RALPH NEW_RALPH [N]
#   OLD_RALPH  a ralph whose gates run in the project folder (e.g. built from the commit before)
#   NEW_RALPH  this ralph
#   N          files in the large repository (default 30000)
# env:   RALPH_BENCH_CACHE=/some/dir   keep the generated repository there and reuse it
#        RALPH_BENCH_RUNS=10           timed runs per case (cold: half as many, at least 3)
set -euo pipefail
old=${1:?usage: bench/gate.sh OLD_RALPH NEW_RALPH [N]}
new=${2:?usage: bench/gate.sh OLD_RALPH NEW_RALPH [N]}
n=${3:-30000}
runs=${RALPH_BENCH_RUNS:-10}
cold_runs=$(( runs / 2 < 3 ? 3 : runs / 2 ))
here=$(cd "$(dirname "$0")" && pwd)
cache=${RALPH_BENCH_CACHE:-$(mktemp -d)}
for tool in hyperfine python3 cargo git; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is needed" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

commit() { git -C "$1" add -A && git -C "$1" -c user.name=bench -c user.email=bench@example.com commit -qm "$2"; }

python_project() {
  local d=$work/python
  mkdir -p "$d/pkg" "$d/tests"
  for i in $(seq 1 20); do
    printf 'def f%s(x):\n    return x + %s\n' "$i" "$i" >"$d/pkg/m$i.py"
    printf 'import unittest\nfrom pkg.m%s import f%s\n\nclass T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(f%s(1), %s)\n' \
      "$i" "$i" "$i" "$((i + 1))" >"$d/tests/test_m$i.py"
  done
  touch "$d/pkg/__init__.py" "$d/tests/__init__.py"
  printf '.venv/\n__pycache__/\n' >"$d/.gitignore"
  git -C "$d" init -q && printf '.claude\n' >>"$d/.git/info/exclude" && commit "$d" python
  (cd "$d" && python3 -m venv --without-pip .venv && python3 -m unittest -q 2>/dev/null)
  echo "$d"
}

rust_project() {
  local d=$work/rust
  mkdir -p "$d/src"
  printf '[package]\nname = "gatebench"\nversion = "0.1.0"\nedition = "2021"\n' >"$d/Cargo.toml"
  printf 'pub fn add(a: u32, b: u32) -> u32 { a + b }\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() { assert_eq!(super::add(1, 2), 3); }\n}\n' >"$d/src/lib.rs"
  printf 'target/\n' >"$d/.gitignore"
  git -C "$d" init -q && printf '.claude\n' >>"$d/.git/info/exclude"
  (cd "$d" && cargo test --offline -q >/dev/null 2>&1) # the warm target/ (and Cargo.lock)
  commit "$d" rust
  echo "$d"
}

# One case: arm the loop with the binary, then time the stops. $1 label, $2 binary, $3 project,
# $4 check, $5 setup ("" for none), $6 cold|warm.
case_json() {
  local label=$1 bin=$2 repo=$3 check=$4 setup=$5 temp=$6
  local state=$work/state-$RANDOM
  local event=$work/event-$RANDOM.json
  printf '{"session_id":"bench","cwd":"%s","last_assistant_message":"working"}' "$repo" >"$event"
  rm -rf "$repo/.claude"
  local args=(start --session-id bench --name bench --max-iterations 0 --completion-promise DONE
    --stuck-after 0 --no-progress-after 0 --max-same-failure 0 --stall-after 0 --check "$check")
  if [[ -n $setup ]] && "$bin" start --help | grep -q -- --gate-setup; then
    args+=(--gate-setup "$setup")
  fi
  (cd "$repo" && XDG_STATE_HOME=$state "$bin" "${args[@]}" Task >/dev/null)
  local edit="date +%s%N >> '$repo/NOTES.txt'"
  local prepare=$edit count=$runs
  if [[ $temp == cold ]]; then
    prepare="$edit; rm -rf '$state/ralph/gates'"
    count=$cold_runs
  fi
  # HOME stays the user's (toolchains such as rustup and pyenv read it); the state is the case's own.
  local stop="cd '$repo' && CLAUDE_CODE_STOP_HOOK_BLOCK_CAP=0 XDG_STATE_HOME='$state' '$bin' hook stop <'$event' | grep -q block"
  hyperfine -N --warmup 1 --runs "$count" --prepare "sh -c \"$prepare\"" \
    --export-json "$work/$label.json" -n "$label" "sh -c \"$stop\"" >&2
  # Every timed stop ran the check, and it passed: a failing check would time nothing useful.
  if grep -q '"check":{"passed":false' "$repo/.claude/ralph/logs/bench.jsonl"; then
    echo "bench: $label: the check failed; see $repo/.claude/ralph/logs/bench.jsonl" >&2
    exit 1
  fi
  rm -f "$repo/NOTES.txt"
}

row() {
  python3 - "$@" <<'PY'
import json, sys
name, old, new = sys.argv[1], sys.argv[2], sys.argv[3]
o = json.load(open(old))["results"][0]
w = json.load(open(new))["results"][0]
print(f"| {name} | {o['median']*1000:.0f} ms | {w['median']*1000:.0f} ms | {(w['median']-o['median'])*1000:+.0f} ms |")
PY
}

py=$(python_project)
rs=$(rust_project)
"$here/make-repo.sh" "$cache/repo-$n" "$n"
big=$cache/repo-$n

echo "| one Stop whose \`--check\` runs (median) | gate in the project | gate in the snapshot | added |"
echo "|---|---|---|---|"
for temp in cold warm; do
  case_json "py-old-$temp" "$old" "$py" "python3 -m unittest -q" "python3 -m venv --without-pip .venv" "$temp"
  case_json "py-new-$temp" "$new" "$py" "python3 -m unittest -q" "python3 -m venv --without-pip .venv" "$temp"
  row "Python, 20 modules, setup \`python3 -m venv --without-pip .venv\`, $temp" "$work/py-old-$temp.json" "$work/py-new-$temp.json"
  case_json "rs-old-$temp" "$old" "$rs" "cargo test --offline -q" "" "$temp"
  case_json "rs-new-$temp" "$new" "$rs" "cargo test --offline -q" "" "$temp"
  row "Rust crate, \`cargo test\`, target/ warm in the project, $temp" "$work/rs-old-$temp.json" "$work/rs-new-$temp.json"
  case_json "big-old-$temp" "$old" "$big" "true" "" "$temp"
  case_json "big-new-$temp" "$new" "$big" "true" "" "$temp"
  row "$n files, check \`true\`, $temp" "$work/big-old-$temp.json" "$work/big-new-$temp.json"
done
rm -rf "$big/.claude"
