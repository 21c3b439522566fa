#!/usr/bin/env bash
# Two ralph release binaries side by side in one hyperfine run per case, with the floor
# (`true`) and the shell-pipeline reference hook, on the stops whose speed a round must keep:
# no loop, a blocking stop (small, 10 and 200 MiB transcripts, a later stop), the same at
# 200 MiB with every counting guard off, a loop's first stop at 200 MiB (with peak RSS), and
# a turn without tool calls in a 30,000-file repository (with one `git status`).
#
# Each binary arms and primes its own loop, so each stop starts from the state that binary's
# previous stops leave (a binary that never moves the transcript offset reads from where it
# stands). Prints a markdown table of hyperfine medians (ms). Every command runs as
# `sh -c '… < event'` without hyperfine's own shell, so the floor is `sh -c '/bin/true < event'`
# and nothing is subtracted (a subtraction reads 0 on a loaded machine).
#
# usage: bench/versus.sh BEFORE AFTER
# env:   RALPH_SHARED=/path/to/shared   where bench/{reference-stop-hook.sh,gen-transcript.py} are
#        RALPH_BENCH_CACHE=/some/dir    keep generated transcripts and the repository there
#        RALPH_BENCH_MIN_RUNS=20  RALPH_BENCH_WARMUP=3  RALPH_BENCH_FILES=30000
set -euo pipefail
before=$(realpath "${1:?usage: bench/versus.sh BEFORE AFTER}")
after=$(realpath "${2:?usage: bench/versus.sh BEFORE AFTER}")
REPO=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${RALPH_SHARED:-$REPO/../shared}
REF=$SHARED/bench/reference-stop-hook.sh
[[ -f $REF ]] || { echo "versus: no reference hook at $REF (set RALPH_SHARED)" >&2; exit 1; }
GEN=$SHARED/bench/gen-transcript.py
[[ -f $GEN ]] || GEN=$REPO/bench/gen-transcript.py
MIN_RUNS=${RALPH_BENCH_MIN_RUNS:-20}
WARMUP=${RALPH_BENCH_WARMUP:-3}
FILES=${RALPH_BENCH_FILES:-30000}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ralph-versus.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
CACHE=${RALPH_BENCH_CACHE:-$WORK/cache}
mkdir -p "$CACHE"
SESSION=bench-session-0001
TEXT="Still working on the next story."
TRUE=/bin/true

transcript() { # transcript SIZE_MIB -> path
  local t=$CACHE/transcript-$1MiB.jsonl
  [[ -s $t ]] || { python3 "$GEN" "$t.part" "$1" "$TEXT" && mv "$t.part" "$t"; }
  echo "$t"
}

event() { # event OUT PROJECT TRANSCRIPT [MESSAGE]
  if (($# > 3)); then
    jq -cn --arg s "$SESSION" --arg t "$3" --arg c "$2" --arg m "$4" \
      '{session_id:$s, transcript_path:$t, cwd:$c, hook_event_name:"Stop", stop_hook_active:false, last_assistant_message:$m}' >"$1"
  else
    jq -cn --arg s "$SESSION" --arg t "$3" --arg c "$2" \
      '{session_id:$s, transcript_path:$t, cwd:$c, hook_event_name:"Stop", stop_hook_active:false}' >"$1"
  fi
}

# setup NAME BIN PROJECT EVENT MODE START_FLAGS…: arms a loop with BIN in PROJECT (its own
# state folder), primes it with one stop, and writes $WORK/prep-NAME.sh, which restores that
# loop before each timed run. MODE: later (the offset, where the binary wrote one, points at
# the transcript's last line, as after a real turn), first (never primed) or none (no loop).
setup() {
  local name=$1 bin=$2 proj=$3 ev=$4 mode=$5 state=$WORK/state-$1
  shift 5
  rm -rf "$proj/.claude" "$state" && mkdir -p "$proj/.claude"
  if [[ $mode != none ]]; then
    (cd "$proj" && XDG_STATE_HOME=$state "$bin" start --max-iterations 0 --completion-promise DONE \
      --session-id "$SESSION" "$@" "Implement the next story in PRD.md." </dev/null >/dev/null)
    local loopf=$proj/.claude/ralph-loop.local.md t
    t=$(jq -r .transcript_path "$ev")
    if [[ $mode == later ]]; then
      (cd "$proj" && XDG_STATE_HOME=$state "$bin" hook stop <"$ev" >/dev/null)
      local len last
      len=$(stat -c %s "$t")
      last=$(tail -n 1 "$t" | wc -c)
      sed -i "s/^transcript_offset: .*/transcript_offset: $((len - last))/" "$loopf"
    fi
    # The generator stamps its lines with a fixed date: date the loop before them.
    sed -i 's/^started_at: .*/started_at: "2026-01-01T00:00:00Z"/' "$loopf"
    # A binary that binds the settings to the arming refuses the edited file until adopted.
    (cd "$proj" && XDG_STATE_HOME=$state "$bin" adopt --name ralph --yes </dev/null >/dev/null 2>&1) || true
  fi
  rm -rf "$WORK/snap-$name" && cp -a "$proj/.claude" "$WORK/snap-$name"
  mkdir -p "$state" && rm -rf "$WORK/snapstate-$name" && cp -a "$state" "$WORK/snapstate-$name"
  cat >"$WORK/prep-$name.sh" <<EOF
rm -rf "$proj/.claude" "$state"
cp -a "$WORK/snap-$name" "$proj/.claude"
cp -a "$WORK/snapstate-$name" "$state"
EOF
}

ROWS=()
# run CASE PROJECT EVENT MODE START_FLAGS…
run() {
  local label=$1 c proj=$2 ev=$3 mode=$4
  c=$(tr -c 'a-zA-Z0-9\n' - <<<"$label")
  shift 4
  mkdir -p "$proj"
  setup "$c-before" "$before" "$proj" "$ev" "$mode" "$@"
  setup "$c-after" "$after" "$proj" "$ev" "$mode" "$@"
  if [[ $mode != none ]]; then # one untimed run each: the intended path, a block
    local side out
    for side in before after; do
      sh "$WORK/prep-$c-$side.sh"
      out=$(cd "$proj" && XDG_STATE_HOME=$WORK/state-$c-$side "${!side}" hook stop <"$ev" 2>/dev/null)
      [[ $(jq -r .decision <<<"$out") == block ]] || { echo "versus: $c: $side did not block: $out" >&2; exit 1; }
    done
  fi
  local args=(--shell=none --warmup "$WARMUP" --min-runs "$MIN_RUNS" --style basic --export-json "$WORK/$c.json"
    --prepare "sh $WORK/prep-$c-before.sh" -n before "sh -c 'XDG_STATE_HOME=$WORK/state-$c-before $before hook stop < $ev'"
    --prepare "sh $WORK/prep-$c-after.sh" -n after "sh -c 'XDG_STATE_HOME=$WORK/state-$c-after $after hook stop < $ev'"
    --prepare "sh $WORK/prep-$c-after.sh" -n reference "sh -c 'bash $REF < $ev'"
    --prepare "sh $WORK/prep-$c-after.sh" -n floor "sh -c '$TRUE < $ev'")
  echo "versus: $label" >&2
  (cd "$proj" && hyperfine "${args[@]}" >"$WORK/$c.log" 2>&1) || { cat "$WORK/$c.log" >&2; exit 1; }
  local rss=""
  if [[ $mode == first ]]; then
    local b a
    sh "$WORK/prep-$c-before.sh"
    b=$(cd "$proj" && XDG_STATE_HOME=$WORK/state-$c-before /usr/bin/time -f %M "$before" hook stop <"$ev" 2>&1 >/dev/null | tail -1)
    sh "$WORK/prep-$c-after.sh"
    a=$(cd "$proj" && XDG_STATE_HOME=$WORK/state-$c-after /usr/bin/time -f %M "$after" hook stop <"$ev" 2>&1 >/dev/null | tail -1)
    rss="$b KiB → $a KiB"
  fi
  ROWS+=("$(python3 - "$WORK/$c.json" "$label" "$rss" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
m = lambda k: r[k]["median"] * 1000 if k in r else None
b, a, ref, f, st = m("before"), m("after"), m("reference"), m("floor"), m("status")
fmt = lambda v: "" if v is None else f"{v:.2f}"
print(f"| {sys.argv[2]} | {fmt(b)} | {fmt(a)} | {a / b:.2f} | {fmt(f)} | {a / f:.1f}× | {fmt(ref)} | {fmt(st)} | {sys.argv[3]} |")
PY
)")
}

P=$WORK/project
T0=$WORK/small.jsonl
{
  echo '{"type":"user","timestamp":"2099-01-01T00:00:00.000Z","message":{"role":"user","content":"start"}}'
  echo "{\"type\":\"assistant\",\"timestamp\":\"2099-01-01T00:00:00.000Z\",\"message\":{\"id\":\"msg_arm\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"$TEXT\"}],\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":10,\"output_tokens\":10}}}"
} >"$T0"
T10=$(transcript 10)
T200=$(transcript 200)
event "$WORK/e-small.json" "$P" "$T0" "$TEXT"
event "$WORK/e-10.json" "$P" "$T10" "$TEXT"
event "$WORK/e-200.json" "$P" "$T200" "$TEXT"
event "$WORK/e-200-only.json" "$P" "$T200"

run "no loop in the project" "$P" "$WORK/e-small.json" none
run "block, small transcript" "$P" "$WORK/e-small.json" later
run "block, 10 MiB, later stop" "$P" "$WORK/e-10.json" later
run "block, 200 MiB, later stop" "$P" "$WORK/e-200.json" later
run "block, 200 MiB, later stop, guards off" "$P" "$WORK/e-200.json" later --no-progress-after 0
run "first stop, 200 MiB, transcript only" "$P" "$WORK/e-200-only.json" first

# A turn without tool calls at $FILES files: the hook's feedback, then a reply.
R=$CACHE/git-$FILES
"$REPO/bench/make-repo.sh" "$R" "$FILES"
TG=$WORK/git.jsonl
cp "$T0" "$TG"
event "$WORK/e-git.json" "$R" "$TG" "$TEXT"
# Primed on the arming turn, then the no-tool turn is appended (the offset then points at it).
{
  echo '{"type":"user","isMeta":true,"timestamp":"2099-01-01T00:00:01.000Z","message":{"role":"user","content":"Stop hook feedback:\nImplement the next story in PRD.md."}}'
  echo "{\"type\":\"assistant\",\"timestamp\":\"2099-01-01T00:00:01.000Z\",\"message\":{\"id\":\"msg_text\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"$TEXT\"}],\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":10,\"output_tokens\":10}}}"
} >"$WORK/notool.jsonl"
for side in before after; do
  bin=$before
  [[ $side == after ]] && bin=$after
  cp "$T0" "$TG"
  rm -rf "$R/.claude" "$WORK/state-git-$side" && mkdir -p "$R/.claude"
  (cd "$R" && XDG_STATE_HOME=$WORK/state-git-$side "$bin" start --max-iterations 0 --completion-promise DONE \
    --session-id "$SESSION" "Implement the next story in PRD.md." </dev/null >/dev/null)
  (cd "$R" && XDG_STATE_HOME=$WORK/state-git-$side "$bin" hook stop <"$WORK/e-git.json" >/dev/null)
  rm -rf "$WORK/snap-git-$side" "$WORK/snapstate-git-$side"
  cp -a "$R/.claude" "$WORK/snap-git-$side" && cp -a "$WORK/state-git-$side" "$WORK/snapstate-git-$side"
  # The checkpoint refs this side's priming stop wrote: the other side's arming prunes them
  # (their loop file is gone by then), and a stop whose checkpoint ref is missing takes a full
  # snapshot instead of the no-change shortcut, so each run starts from its own side's refs.
  git -C "$R" for-each-ref --format='create %(refname) %(objectname)' refs/ralph/ >"$WORK/refs-git-$side"
  cat >"$WORK/prep-git-$side.sh" <<EOF
rm -rf "$R/.claude" "$WORK/state-git-$side"
cp -a "$WORK/snap-git-$side" "$R/.claude"
cp -a "$WORK/snapstate-git-$side" "$WORK/state-git-$side"
git -C "$R" for-each-ref --format='delete %(refname)' refs/ralph/ | git -C "$R" update-ref --stdin
git -C "$R" update-ref --stdin <"$WORK/refs-git-$side"
cat "$T0" "$WORK/notool.jsonl" >"$TG"
EOF
done
c="turn without tool calls, $FILES files"
echo "versus: $c" >&2
ev=$WORK/e-git.json
(cd "$R" && hyperfine --shell=none --warmup "$WARMUP" --min-runs "$MIN_RUNS" --style basic --export-json "$WORK/git.json" \
  --prepare "sh $WORK/prep-git-before.sh" -n before "sh -c 'XDG_STATE_HOME=$WORK/state-git-before $before hook stop < $ev'" \
  --prepare "sh $WORK/prep-git-after.sh" -n after "sh -c 'XDG_STATE_HOME=$WORK/state-git-after $after hook stop < $ev'" \
  --prepare "sh $WORK/prep-git-after.sh" -n reference "sh -c 'bash $REF < $ev'" \
  --prepare "sh $WORK/prep-git-after.sh" -n floor "sh -c '$TRUE < $ev'" \
  --prepare "sh $WORK/prep-git-after.sh" -n status "sh -c 'git status --porcelain=v2 --untracked-files=all < $ev'" \
  >"$WORK/git.log" 2>&1) || { cat "$WORK/git.log" >&2; exit 1; }
ROWS+=("$(python3 - "$WORK/git.json" "$c" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
m = lambda k: r[k]["median"] * 1000
b, a, ref, f, st = m("before"), m("after"), m("reference"), m("floor"), m("status")
print(f"| {sys.argv[2]} | {b:.2f} | {a:.2f} | {a / b:.2f} | {f:.2f} | {a / f:.1f}× | {ref:.2f} | {st:.2f} | |")
PY
)")
rm -rf "$R/.claude"

echo "Measured $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $(hyperfine --version), $(nproc) cores; before: $before, after: $after."
echo
echo "| case | before ms | after ms | after ÷ before | floor ms | after ÷ floor | reference ms | one \`git status\` ms | peak RSS before → after |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
