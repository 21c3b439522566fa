#!/usr/bin/env bash
# Shows that the token budget's transcript reading is incremental: with
# --max-tokens set, a Stop after a turn that appended a few lines costs the
# same whether the transcript holds 1 MiB or 200 MiB before them.
#
# usage: bench/token-growth.sh        (needs hyperfine and python3)
# env:   RALPH_GROWTH_SIZES="1 200"   transcript sizes in MiB (the first is the baseline)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SIZES=${RALPH_GROWTH_SIZES:-"1 200"}
command -v hyperfine >/dev/null || { echo "needs hyperfine: sudo apt-get install hyperfine" >&2; exit 1; }
(cd "$REPO" && cargo build --release -p ralph-loop --quiet)
RALPH=$REPO/target/release/ralph
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ralph-growth.XXXXXX")
# ralph records the loops it arms per user: keep that record out of the real home.
export XDG_STATE_HOME=$WORK/state
trap 'rm -rf "$WORK"' EXIT

# The lines one turn appends: assistant text, tool_use, tool_result, assistant text (with usage).
line() { # line ID TYPE
  printf '{"type":"assistant","isSidechain":false,"timestamp":"2026-11-30T00:00:01Z","message":{"id":"%s","role":"assistant","content":[{"type":"%s","text":"x"}],"usage":{"input_tokens":1200,"output_tokens":300,"cache_creation_input_tokens":0,"cache_read_input_tokens":50000}}}\n' "$1" "$2"
}
{
  line turn-a text
  line turn-a tool_use
  printf '{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"ok"}]}}\n'
  line turn-b text
} >"$WORK/turn.jsonl"

echo "| transcript before the turn | hook median (ms) | tokens counted by the stop |"
echo "|---:|---:|---:|"
medians=()
for size in $SIZES; do
  proj=$WORK/p$size
  mkdir -p "$proj/.claude"
  t=$WORK/t$size.jsonl
  python3 "$REPO/bench/gen-transcript.py" "$t" "$size" "Still working." >/dev/null
  base=$(stat -c %s "$t")
  (cd "$proj" && "$RALPH" start --session-id s --max-iterations 0 --max-tokens 1000000000 \
    --stuck-after 0 --no-progress-after 0 "Task" >/dev/null)
  # As after an earlier stop: the loop has read the transcript up to its current end.
  sed -i "s/^started_at: .*/started_at: \"2026-01-01T00:00:00Z\"\ntranscript_offset: $base/" "$proj/.claude/ralph-loop.local.md"
  cp "$proj/.claude/ralph-loop.local.md" "$WORK/snap$size"
  printf '{"session_id":"s","cwd":"%s","transcript_path":"%s","last_assistant_message":"turn"}' "$proj" "$t" >"$WORK/payload$size"
  # Before every run: the transcript back to its size plus one new turn; the loop back to its snapshot.
  {
    echo "truncate -s $base '$t'"
    echo "cat '$WORK/turn.jsonl' >> '$t'"
    echo "cp '$WORK/snap$size' '$proj/.claude/ralph-loop.local.md'"
    echo "rm -rf '$proj/.claude/ralph'"
  } >"$WORK/prep$size.sh"
  sh "$WORK/prep$size.sh"
  (cd "$proj" && "$RALPH" hook stop <"$WORK/payload$size" >/dev/null)
  tokens=$(sed -n 's/^tokens_used: //p' "$proj/.claude/ralph-loop.local.md")
  hyperfine --warmup 3 --min-runs 40 --prepare "sh $WORK/prep$size.sh" \
    --export-json "$WORK/h$size.json" "cd $proj && $RALPH hook stop < $WORK/payload$size" >/dev/null
  m=$(python3 -c "import json;print('%.2f'%(json.load(open('$WORK/h$size.json'))['results'][0]['median']*1000))")
  medians+=("$m")
  echo "| ${size} MiB | $m | ${tokens:-0} |"
done
python3 -c "import sys; a=[float(x) for x in sys.argv[1:]]; print('ratio largest / first: %.2fx (hyperfine shell mode: each time includes a sh start-up)' % (a[-1]/a[0]))" "${medians[@]}"
