#!/usr/bin/env bash
# Times `ralph hook stop` against the shell-pipeline reference hook and the
# `true` floor, as whole processes, with hyperfine; measures ralph's peak RSS
# with /usr/bin/time -v; prints a markdown table and writes docs/performance.md.
#
# usage: bench/run.sh            (from anywhere; sizes 0 10 200 1024 MiB)
# env:   RALPH_BENCH_SIZES="0 10 200"   transcript sizes in MiB (0 = no transcript file)
#        RALPH_SHARED=/path/to/shared   where bench/{reference-stop-hook.sh,gen-transcript.py} are
#                                       (default: ../shared next to the repository)
#        RALPH_BENCH_CACHE=/some/dir    keep generated transcripts there and reuse them
#                                       (default: a temp dir, deleted at the end)
#        RALPH_BENCH_WARMUP=3  RALPH_BENCH_MIN_RUNS=10  RALPH_BENCH_RSS_RUNS=5
#        RALPH_BENCH_OUT=docs/performance.md   ("-" to skip writing it)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${RALPH_SHARED:-$REPO/../shared}
SIZES=${RALPH_BENCH_SIZES:-"0 10 200 1024"}
WARMUP=${RALPH_BENCH_WARMUP:-3}
MIN_RUNS=${RALPH_BENCH_MIN_RUNS:-10}
RSS_RUNS=${RALPH_BENCH_RSS_RUNS:-5}
OUT=${RALPH_BENCH_OUT:-$REPO/docs/performance.md}
SESSION=bench-session-0001

die() { echo "bench: $*" >&2; exit 1; }

# --- tools -------------------------------------------------------------------
missing=()
for tool in hyperfine jq perl python3 cargo; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[[ -x /usr/bin/time ]] || missing+=("time (/usr/bin/time)")
if ((${#missing[@]})); then
  die "missing: ${missing[*]}
  install with:  sudo apt-get install hyperfine jq perl python3 time
  (hyperfine is also 'cargo install hyperfine'; jq and perl are needed by the reference hook)"
fi

REF=$SHARED/bench/reference-stop-hook.sh
[[ -f $REF ]] || die "reference hook not found at $REF (set RALPH_SHARED to the folder holding bench/)"
GEN=$SHARED/bench/gen-transcript.py
GEN_LABEL=../shared/bench/gen-transcript.py
if [[ ! -f $GEN ]]; then
  GEN_LABEL=bench/gen-transcript.py
  GEN=$REPO/bench/gen-transcript.py
  echo "bench: $SHARED/bench/gen-transcript.py not found; using $GEN" >&2
fi

# hyperfine >= 1.16 can feed stdin itself (--input), so commands run without a
# shell (-N). Older ones (Debian 12 ships 1.15) run `sh -c 'cmd < payload'` and
# subtract the measured shell start-up, which leaves the process's own cost.
if hyperfine --help 2>/dev/null | grep -q -- '--input'; then
  MODE=input
else
  MODE=shell
fi

# --- build -------------------------------------------------------------------
echo "bench: building ralph (release)…" >&2
(cd "$REPO" && cargo build --release -p ralph --quiet)
RALPH=$(cd "$REPO" && cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/ralph
[[ -x $RALPH ]] || die "no binary at $RALPH"
TRUE=$(command -v true)
[[ $TRUE == /* ]] || TRUE=/bin/true

# --- work dirs ---------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ralph-bench.XXXXXX")
if [[ -n ${RALPH_BENCH_CACHE:-} ]]; then
  CACHE=$RALPH_BENCH_CACHE
  mkdir -p "$CACHE"
else
  CACHE=$WORK/transcripts
  mkdir -p "$CACHE"
fi
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
PROJ=$WORK/project
RESULTS=$WORK/results
# ralph drives only loops recorded as armed by this user: keep that record
# here, not in the user's own ~/.local/state/ralph.
export XDG_STATE_HOME=$WORK/state
mkdir -p "$PROJ/.claude" "$RESULTS"
LOOPF=$PROJ/.claude/ralph-loop.local.md
BLOCK_TEXT="Still working on the next story."
PROMISE_LINE_TEXT=$'All stories pass.\n<promise>DONE</promise>'

# Restores the armed loop before every timed run so each run does the same
# work (the allow path archives the loop; the reference deletes it).
# An ended loop's record of arming is removed, so it is restored too.
cat >"$WORK/prepare.sh" <<EOF
cp "$WORK/snapshot.md" "$LOOPF"
rm -rf "$PROJ/.claude/ralph/history" "$PROJ/.claude/ralph/logs"
rm -rf "$XDG_STATE_HOME" && cp -a "$WORK/state-snapshot" "$XDG_STATE_HOME"
EOF

payload() { # payload FILE TRANSCRIPT [LAST_MESSAGE]
  if (($# > 2)); then
    jq -cn --arg s "$SESSION" --arg t "$2" --arg c "$PROJ" --arg m "$3" \
      '{session_id:$s, transcript_path:$t, cwd:$c, hook_event_name:"Stop", stop_hook_active:false, last_assistant_message:$m}' >"$1"
  else
    jq -cn --arg s "$SESSION" --arg t "$2" --arg c "$PROJ" \
      '{session_id:$s, transcript_path:$t, cwd:$c, hook_event_name:"Stop", stop_hook_active:false}' >"$1"
  fi
}

transcript() { # transcript SIZE -> path (generated once per size)
  local size=$1 t="$CACHE/transcript-$1MiB.jsonl"
  if [[ ! -s $t ]]; then
    echo "bench: generating a ${size} MiB transcript with $GEN_LABEL…" >&2
    python3 "$GEN" "$t.part" "$size" "$BLOCK_TEXT" && mv "$t.part" "$t"
  fi
  echo "$t"
}

# Arms a loop (started before the transcript's lines, so they all count),
# primes it with one stop so the transcript baseline is set,
# then points transcript_offset at the last line (a stop then reads one
# turn's worth of transcript, as in a real session).
arm() { # arm TRANSCRIPT
  rm -rf "$PROJ/.claude" "$XDG_STATE_HOME"
  mkdir -p "$PROJ/.claude"
  (cd "$PROJ" && "$RALPH" start --max-iterations 0 --completion-promise DONE \
    --session-id "$SESSION" "Implement the next story in PRD.md." </dev/null >/dev/null)
  payload "$WORK/prime.json" "$1"
  (cd "$PROJ" && "$RALPH" hook stop <"$WORK/prime.json" >/dev/null)
  if [[ -f $1 ]]; then
    local len last
    len=$(stat -c %s "$1")
    last=$(tail -n 1 "$1" | wc -c)
    sed -i "s/^transcript_offset: .*/transcript_offset: $((len - last))/" "$LOOPF"
  fi
  # The generators stamp every line with a fixed date; a loop armed "now"
  # would ignore them as older than the loop, so date the loop before them.
  sed -i 's/^started_at: .*/started_at: "2026-01-01T00:00:00Z"/' "$LOOPF"
  cp "$LOOPF" "$WORK/snapshot.md"
  rm -rf "$WORK/state-snapshot" && cp -a "$XDG_STATE_HOME" "$WORK/state-snapshot"
}

# check CASE PAYLOAD EXPECT: one untimed run of each hook, to be sure the
# timed runs take the intended path.
check() {
  local out
  sh "$WORK/prepare.sh"
  out=$(cd "$PROJ" && "$RALPH" hook stop <"$2" 2>/dev/null)
  case $3 in
    block) [[ $(jq -r .decision <<<"$out") == block ]] || die "$1: ralph did not block: $out" ;;
    allow) [[ $out != *'"decision"'* && -z $(ls "$PROJ/.claude/"*-loop.local.md 2>/dev/null) ]] ||
      die "$1: ralph did not end the loop: $out" ;;
  esac
  sh "$WORK/prepare.sh"
  out=$(cd "$PROJ" && bash "$REF" <"$2") || die "$1: the reference failed"
  REF_PATH[$1]=$([[ $out == *'"block"'* ]] && echo block || echo allow)
}

rss_kib() { # rss_kib PAYLOAD -> peak RSS of ralph in KiB (max over runs)
  local max=0 kib
  for _ in $(seq "$RSS_RUNS"); do
    sh "$WORK/prepare.sh"
    kib=$(cd "$PROJ" && /usr/bin/time -v "$RALPH" hook stop <"$1" 2>&1 >/dev/null |
      awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}')
    ((kib > max)) && max=$kib
  done
  echo "$max"
}

time_case() { # time_case CASE PAYLOAD
  local args=(--warmup "$WARMUP" --min-runs "$MIN_RUNS" --style basic
    --export-json "$RESULTS/$1.json" --prepare "sh $WORK/prepare.sh")
  if [[ $MODE == input ]]; then
    args+=(-N --input "$2"
      -n ralph "$RALPH hook stop"
      --prepare "sh $WORK/prepare.sh" -n reference "bash $REF"
      --prepare "sh $WORK/prepare.sh" -n floor "$TRUE")
  else
    args+=(-n ralph "$RALPH hook stop < $2"
      --prepare "sh $WORK/prepare.sh" -n reference "bash $REF < $2"
      --prepare "sh $WORK/prepare.sh" -n floor "$TRUE < $2")
  fi
  (cd "$PROJ" && hyperfine "${args[@]}" >"$RESULTS/$1.log" 2>&1) ||
    { cat "$RESULTS/$1.log" >&2; die "hyperfine failed for $1"; }
  echo "$1 $(rss_kib "$2")" >>"$RESULTS/rss.txt"
}

declare -A REF_PATH
CASES=()
for size in $SIZES; do
  if ((size == 0)); then
    T=$WORK/no-transcript.jsonl # does not exist
  else
    T=$(transcript "$size")
  fi
  arm "$T"
  payload "$WORK/p-msg-block.json" "$T" "$BLOCK_TEXT"
  payload "$WORK/p-nomsg.json" "$T"
  payload "$WORK/p-msg-allow.json" "$T" "$PROMISE_LINE_TEXT"

  c="${size}MiB block, message in payload"; check "$c" "$WORK/p-msg-block.json" block
  echo "bench: timing: $c" >&2; time_case "$c" "$WORK/p-msg-block.json"; CASES+=("$c")
  c="${size}MiB block, transcript only"; check "$c" "$WORK/p-nomsg.json" block
  echo "bench: timing: $c" >&2; time_case "$c" "$WORK/p-nomsg.json"; CASES+=("$c")
  c="${size}MiB allow, message in payload"; check "$c" "$WORK/p-msg-allow.json" allow
  echo "bench: timing: $c" >&2; time_case "$c" "$WORK/p-msg-allow.json"; CASES+=("$c")
  if ((size > 0)); then
    # The promise becomes the transcript's last line (appended, so a cached
    # transcript is restored below by truncating it back).
    orig=$(stat -c %s "$T")
    python3 - "$T" "$PROMISE_LINE_TEXT" <<'PY'
import json, sys
line = {"type": "assistant", "isSidechain": False, "timestamp": "2026-11-30T00:00:01.000Z",  # = generators' date
        "message": {"id": "msg_bench_final", "type": "message", "role": "assistant",
                    "content": [{"type": "text", "text": sys.argv[2]}],
                    "usage": {"input_tokens": 10, "output_tokens": 10}}}
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(line, separators=(",", ":")) + "\n")
PY
    c="${size}MiB allow, transcript only"; check "$c" "$WORK/p-nomsg.json" allow
    echo "bench: timing: $c" >&2; time_case "$c" "$WORK/p-nomsg.json"; CASES+=("$c")
    truncate -s "$orig" "$T"
  fi
done

# --- report ------------------------------------------------------------------
CPU=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
TABLE=$(python3 - "$RESULTS" "$MODE" "${CASES[@]}" <<'PY'
import json, os, sys
results, mode, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
rss = dict(l.rsplit(" ", 1) for l in open(os.path.join(results, "rss.txt")).read().splitlines())
print("| case | ralph ms | reference ms | floor (`true`) ms | reference ÷ ralph | ralph ÷ floor | ralph peak RSS |")
print("|---|---:|---:|---:|---:|---:|---:|")
for c in cases:
    r = {x["command"]: x for x in json.load(open(os.path.join(results, c + ".json")))["results"]}
    med = {k: v["median"] * 1000 for k, v in r.items()}
    ralph, ref, floor = med["ralph"], med["reference"], med["floor"]
    ratio = lambda a, b: f"{a / b:.1f}×" if b > 0.0005 else "—"
    print(f"| {c} | {ralph:.2f} | {ref:.2f} | {floor:.2f} | {ratio(ref, ralph)} | {ratio(ralph, floor)} | {int(rss[c]) / 1024:.1f} MiB |")
PY
)
echo
echo "$TABLE"
REFNOTE=""
for c in "${CASES[@]}"; do
  [[ $c == *block* && ${REF_PATH[$c]} != block ]] && REFNOTE+="- reference took its early exit (no block) in: $c"$'\n'
done
[[ -n $REFNOTE ]] && printf '\n%s' "$REFNOTE"

if [[ $OUT != - ]]; then
  python3 - "$OUT" "$TABLE" "$(date -u +%Y-%m-%dT%H:%MZ)" "$(nproc)" "$CPU" "$MODE" \
    "$(hyperfine --version)" "$SIZES" "$REFNOTE" "$GEN_LABEL" <<'PY'
import re, sys
out, table, date, nproc, cpu, mode, hf, sizes, refnote, gen = sys.argv[1:]
start, end = "<!-- bench:begin -->", "<!-- bench:end -->"
refnote_block = ("\n" + refnote) if refnote else ""
how = ("hyperfine `--input` (`-N`, no shell)" if mode == "input" else
       "hyperfine 1.15 shell mode: `sh -c 'cmd < payload.json'`, with the measured "
       "shell start-up subtracted (so the floor is the cost of exec'ing `true`)")
block = f"""{start}
Measured {date} on {nproc} × {cpu} ({hf}; {how}).
Transcript sizes (MiB): {sizes}; generator: `{gen}`.
Times are hyperfine medians of whole processes; RSS is the maximum of `/usr/bin/time -v` over a few runs.

{table}
{refnote_block}{end}"""
try:
    text = open(out).read()
except FileNotFoundError:
    text = None
if text and start in text and end in text:
    text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
else:
    text = (text or "# Performance\n\n") + "\n" + block + "\n"
open(out, "w").write(text)
print(f"bench: wrote {out}", file=sys.stderr)
PY
fi
