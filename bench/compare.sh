#!/usr/bin/env bash
# Two ralph binaries side by side in one run, on the same blocking stop (no transcript, not a
# git repository, stuck breaker off), in ABBA order per round so that a machine whose load
# drifts favours neither. Prints the mean wall time of one whole `ralph hook stop` process.
#
# usage: bench/compare.sh BEFORE AFTER [FLAGS…]   (FLAGS go to `ralph start`, e.g. --check true)
# env:   N=200 stops per measurement, ROUNDS=3
set -euo pipefail
before=${1:?usage: bench/compare.sh BEFORE AFTER [FLAGS…]}
after=${2:?usage: bench/compare.sh BEFORE AFTER [FLAGS…]}
shift 2
N=${N:-200}
ROUNDS=${ROUNDS:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/ralph-compare.XXXXXX")
trap 'rm -rf "$work"' EXIT
# ralph drives only loops recorded as armed by this user: keep that record here.
export XDG_STATE_HOME=$work/state HOME=$work
printf '{"session_id":"s1","cwd":"%s","hook_event_name":"Stop","stop_hook_active":false,"last_assistant_message":"Still working."}\n' \
  "$work/p" >"$work/event.json"

measure() { # measure BIN FLAGS… -> "12.34"
  local bin=$1 start end
  shift
  rm -rf "$work/p" "$XDG_STATE_HOME"
  mkdir -p "$work/p/.claude"
  (cd "$work/p" && "$bin" start --max-iterations 0 --completion-promise DONE --stuck-after 0 --session-id s1 "$@" "Task" >/dev/null)
  start=$(date +%s%N)
  for ((i = 0; i < N; i++)); do "$bin" hook stop <"$work/event.json" >/dev/null; done
  end=$(date +%s%N)
  awk -v d=$((end - start)) -v n="$N" 'BEGIN { printf "%.2f", d / 1e6 / n }'
}

for round in $(seq 1 "$ROUNDS"); do
  a1=$(measure "$before" "$@")
  b1=$(measure "$after" "$@")
  b2=$(measure "$after" "$@")
  a2=$(measure "$before" "$@")
  echo "round $round: before $a1 / $a2 ms · after $b1 / $b2 ms per stop"
done
