#!/usr/bin/env bash
# Times `ralph hook stop` against the shell-pipeline reference hook and the
# `true` floor, as whole processes, with hyperfine; measures ralph's peak RSS
# with /usr/bin/time -v; prints a markdown table and writes docs/performance.md.
#
# usage: bench/run.sh            (from anywhere; sizes 0 10 200 1024 MiB, repos of 1k/30k/100k files)
# env:   RALPH_BENCH_SIZES="0 10 200"   transcript sizes in MiB (0 = no transcript file; "" skips)
#        RALPH_BENCH_GIT_SIZES="1000 30000 100000"   files per git repository ("" skips)
#        RALPH_BENCH_FIRST_SIZES="1 10 200"   transcript sizes (MiB) for a loop's first stop ("" skips)
#        RALPH_SHARED=/path/to/shared   where bench/{reference-stop-hook.sh,gen-transcript.py} are
#                                       (default: ../shared next to the repository)
#        RALPH_BENCH_CACHE=/some/dir    keep generated transcripts there and reuse them
#                                       (default: a temp dir, deleted at the end)
#        RALPH_BENCH_WARMUP=3  RALPH_BENCH_MIN_RUNS=10  RALPH_BENCH_RSS_RUNS=5
#        RALPH_BENCH_OUT=docs/performance.md   ("-" to skip writing it)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${RALPH_SHARED:-$REPO/../shared}
SIZES=${RALPH_BENCH_SIZES-"0 10 200 1024"}
GIT_SIZES=${RALPH_BENCH_GIT_SIZES-"1000 30000 100000"}
FIRST_SIZES=${RALPH_BENCH_FIRST_SIZES-"1 10 200"}
WARMUP=${RALPH_BENCH_WARMUP:-3}
MIN_RUNS=${RALPH_BENCH_MIN_RUNS:-10}
RSS_RUNS=${RALPH_BENCH_RSS_RUNS:-5}
OUT=${RALPH_BENCH_OUT:-$REPO/docs/performance.md}
SESSION=bench-session-0001

die() { echo "bench: $*" >&2; exit 1; }

# --- tools -------------------------------------------------------------------
missing=()
for tool in hyperfine jq perl python3 cargo git; do
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
# The binary users get on Linux is the static musl build (the npm packages
# and release archives); it starts faster than a dynamically linked one. Use
# it when the target is installed, else the host build; the report says which.
TARGET=${RALPH_BENCH_TARGET-auto}
if [[ $TARGET == auto ]]; then
  TARGET=""
  [[ $(uname -sm) == "Linux x86_64" ]] && rustup target list --installed 2>/dev/null |
    grep -qx x86_64-unknown-linux-musl && TARGET=x86_64-unknown-linux-musl
fi
echo "bench: building ralph (release${TARGET:+, $TARGET})…" >&2
(cd "$REPO" && cargo build --release -p ralph-loop --quiet ${TARGET:+--target "$TARGET"})
RALPH=$(cd "$REPO" && cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/${TARGET:+$TARGET/}release/ralph
BUILD_LABEL=${TARGET:-$(rustc -vV | sed -n 's/^host: //p')}
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
  # The settings are bound to the arming: the edited file runs once the user adopts it.
  (cd "$PROJ" && "$RALPH" adopt --name ralph --yes </dev/null >/dev/null)
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

# --- a loop's first stop ----------------------------------------------------------
# A loop armed before every line of the transcript (all lines count), never
# primed: its first stop scans tokens and tools from the loop's start, which
# reads backward up to 64 MiB to find it and then forward over it. The event
# carries no last_assistant_message, so the reply is read from the transcript
# too. Each timed run starts from the same unprimed loop.
arm_first() { # arm_first TRANSCRIPT
  rm -rf "$PROJ/.claude" "$XDG_STATE_HOME"
  mkdir -p "$PROJ/.claude"
  (cd "$PROJ" && "$RALPH" start --max-iterations 0 --completion-promise DONE \
    --session-id "$SESSION" "Implement the next story in PRD.md." </dev/null >/dev/null)
  sed -i 's/^started_at: .*/started_at: "2026-01-01T00:00:00Z"/' "$LOOPF"
  # The settings are bound to the arming: the edited file runs once the user adopts it.
  (cd "$PROJ" && "$RALPH" adopt --name ralph --yes </dev/null >/dev/null)
  grep -q '^transcript_offset:' "$LOOPF" && die "a new loop already has a transcript offset"
  cp "$LOOPF" "$WORK/snapshot.md"
  rm -rf "$WORK/state-snapshot" && cp -a "$XDG_STATE_HOME" "$WORK/state-snapshot"
}
for size in $FIRST_SIZES; do
  T=$(transcript "$size")
  arm_first "$T"
  payload "$WORK/p-first.json" "$T"
  c="first stop, ${size}MiB, transcript only"; check "$c" "$WORK/p-first.json" block
  echo "bench: timing: $c" >&2; time_case "$c" "$WORK/p-first.json"; CASES+=("$c")
done

# --- git repositories ----------------------------------------------------------
# A loop armed by `ralph start` with the default guards (no-progress breaker
# on) in repositories of N committed files, the transcript outside the
# repository. Each timed run starts from the same primed loop and appends one
# turn to the transcript: an editing turn (an Edit call and its successful
# result; one file changed) or a non-editing turn (a Bash call, no change).
# The same hyperfine run times one `git status`, the reference and the floor.
GIT_CASES=()
make_repo() { # make_repo N -> path (generated once per size, cached: bench/make-repo.sh)
  local r="$CACHE/git-$1"
  "$REPO/bench/make-repo.sh" "$r" "$1"
  echo "$r"
}

turn_lines() { # turn_lines KIND -> the transcript lines of one turn
  if [[ $1 == notool ]]; then # the hook's feedback, then a reply with no tool call
    printf '%s\n' \
      '{"type":"user","isMeta":true,"message":{"role":"user","content":"Stop hook feedback:\nImplement the next story in PRD.md."}}' \
      "{\"type\":\"assistant\",\"message\":{\"id\":\"msg_text\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"$BLOCK_TEXT\"}],\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":10,\"output_tokens\":10}}}"
    return
  fi
  local tool=Bash
  [[ $1 == edit ]] && tool=Edit
  printf '%s\n' \
    "{\"type\":\"assistant\",\"message\":{\"id\":\"msg_tool\",\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"$tool\",\"input\":{}}],\"usage\":{\"input_tokens\":10,\"output_tokens\":10}}}" \
    "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"ok\"}]}}" \
    "{\"type\":\"assistant\",\"message\":{\"id\":\"msg_text\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"$BLOCK_TEXT\"}],\"usage\":{\"input_tokens\":10,\"output_tokens\":10}}}"
}

for n in $GIT_SIZES; do
  R=$(make_repo "$n")
  T=$WORK/git-transcript-$n.jsonl
  # The arming turn, its reply stamped after the loop's start: the priming
  # stop then finds its reply in the transcript, as in a session that keeps up.
  {
    echo '{"type":"user","timestamp":"2099-01-01T00:00:00.000Z","message":{"role":"user","content":"start"}}'
    echo "{\"type\":\"assistant\",\"timestamp\":\"2099-01-01T00:00:00.000Z\",\"message\":{\"id\":\"msg_arm\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"$BLOCK_TEXT\"}],\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":10,\"output_tokens\":10}}}"
  } >"$T"
  rm -rf "$R/.claude"
  (cd "$R" && "$RALPH" start --max-iterations 0 --completion-promise DONE \
    --session-id "$SESSION" "Implement the next story in PRD.md." </dev/null >/dev/null)
  jq -cn --arg s "$SESSION" --arg t "$T" --arg c "$R" --arg m "$BLOCK_TEXT" \
    '{session_id:$s, transcript_path:$t, cwd:$c, hook_event_name:"Stop", stop_hook_active:false, last_assistant_message:$m}' >"$WORK/git-p-$n.json"
  # Prime: the first stop sets the transcript baseline and the tree fingerprint.
  (cd "$R" && "$RALPH" hook stop <"$WORK/git-p-$n.json" >/dev/null)
  cp "$R/.claude/ralph-loop.local.md" "$WORK/git-snap-$n.md"
  # The same loop with the breaker off: what the stop costs without any
  # no-progress check (the durable write, the log), for the breaker's share.
  sed 's/^max_iterations: .*/&\nno_progress_after: 0/' "$WORK/git-snap-$n.md" >"$WORK/git-snap-off-$n.md"
  grep -q '^no_progress_after: 0$' "$WORK/git-snap-off-$n.md" || die "could not switch the breaker off"
  # The settings are bound to the arming: the edited loop runs once adopted, which
  # rewrites the record of arming; each kind's prepare restores the record it runs with.
  rm -rf "$WORK/git-state-$n" && cp -a "$XDG_STATE_HOME" "$WORK/git-state-$n"
  cp "$WORK/git-snap-off-$n.md" "$R/.claude/ralph-loop.local.md"
  (cd "$R" && "$RALPH" adopt --name ralph --yes </dev/null >/dev/null)
  cp "$R/.claude/ralph-loop.local.md" "$WORK/git-snap-off-$n.md"
  rm -rf "$WORK/git-state-off-$n" && cp -a "$XDG_STATE_HOME" "$WORK/git-state-off-$n"
  cp "$T" "$T.base"
  for kind in edit bash notool off; do
    turn_lines "${kind/off/edit}" >"$WORK/git-turn-$kind.jsonl"
    snap=$WORK/git-snap-$n.md
    [[ $kind == off ]] && snap=$WORK/git-snap-off-$n.md
    state=$WORK/git-state-$n
    [[ $kind == off ]] && state=$WORK/git-state-off-$n
    {
      echo "cp '$snap' '$R/.claude/ralph-loop.local.md'"
      echo "rm -rf '$XDG_STATE_HOME' && cp -a '$state' '$XDG_STATE_HOME'"
      echo "rm -rf '$R/.claude/ralph/history' '$R/.claude/ralph/logs'"
      echo "cat '$T.base' '$WORK/git-turn-$kind.jsonl' >'$T'"
      # What the Edit call did: one file changed.
      [[ $kind == edit || $kind == off ]] && echo "echo \"edit \$\$\" >'$R/d000/f000000.txt'"
    } >"$WORK/git-prep-$kind-$n.sh"
    # One untimed run: the intended path (a block; an edit decided without git).
    sh "$WORK/git-prep-$kind-$n.sh"
    out=$(cd "$R" && "$RALPH" hook stop <"$WORK/git-p-$n.json" 2>/dev/null)
    [[ $(jq -r .decision <<<"$out") == block ]] || die "git $n $kind: ralph did not block: $out"
    fp=$(sed -n 's/^tree_fingerprint: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$R/.claude/ralph-loop.local.md")
    case $kind in
      edit) [[ $fp == edit-* ]] || die "git $n: the editing turn was not decided by the edit: $fp" ;;
      bash) [[ $fp != edit-* && -n $fp ]] || die "git $n: the non-editing turn did not read the tree: $fp" ;;
      notool) grep -q "^tree_fingerprint: \"\{0,1\}$fp\"\{0,1\}$" "$snap" &&
        grep -q '^no_progress_count: 1$' "$R/.claude/ralph-loop.local.md" ||
        die "git $n: the turn without tools did not carry the fingerprint as no progress: $fp" ;;
      off) grep -q "^tree_fingerprint: \"\{0,1\}$fp\"\{0,1\}$" "$snap" || die "git $n: the breaker was not off: $fp" ;;
    esac
  done
  c="git repository, $n files"
  echo "bench: timing: $c" >&2
  args=(--warmup "$WARMUP" --min-runs "$MIN_RUNS" --style basic --export-json "$RESULTS/git-$n.json")
  P=$WORK/git-p-$n.json
  if [[ $MODE == input ]]; then
    args+=(-N --input "$P"
      --prepare "sh $WORK/git-prep-edit-$n.sh" -n edit "$RALPH hook stop"
      --prepare "sh $WORK/git-prep-bash-$n.sh" -n noedit "$RALPH hook stop"
      --prepare "sh $WORK/git-prep-notool-$n.sh" -n notool "$RALPH hook stop"
      --prepare "sh $WORK/git-prep-off-$n.sh" -n off "$RALPH hook stop"
      --prepare "sh $WORK/git-prep-bash-$n.sh" -n status "git status --porcelain=v2 --untracked-files=all"
      --prepare "sh $WORK/git-prep-edit-$n.sh" -n reference "bash $REF"
      --prepare "sh $WORK/git-prep-edit-$n.sh" -n floor "$TRUE")
  else
    args+=(--prepare "sh $WORK/git-prep-edit-$n.sh" -n edit "$RALPH hook stop < $P"
      --prepare "sh $WORK/git-prep-bash-$n.sh" -n noedit "$RALPH hook stop < $P"
      --prepare "sh $WORK/git-prep-notool-$n.sh" -n notool "$RALPH hook stop < $P"
      --prepare "sh $WORK/git-prep-off-$n.sh" -n off "$RALPH hook stop < $P"
      --prepare "sh $WORK/git-prep-bash-$n.sh" -n status "git status --porcelain=v2 --untracked-files=all < $P"
      --prepare "sh $WORK/git-prep-edit-$n.sh" -n reference "bash $REF < $P"
      --prepare "sh $WORK/git-prep-edit-$n.sh" -n floor "$TRUE < $P")
  fi
  (cd "$R" && hyperfine "${args[@]}" >"$RESULTS/git-$n.log" 2>&1) ||
    { cat "$RESULTS/git-$n.log" >&2; die "hyperfine failed for $c"; }
  GIT_CASES+=("$n")
  rm -rf "$R/.claude"
  (cd "$R" && git checkout -q -- d000/f000000.txt)
done

# --- report ------------------------------------------------------------------
CPU=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
GIT_TABLE=""
if ((${#GIT_CASES[@]})); then
  GIT_TABLE=$(python3 - "$RESULTS" "${GIT_CASES[@]}" <<'PY'
import json, os, sys
results, sizes = sys.argv[1], sys.argv[2:]
print("| files | ralph, editing turn ms | ralph, non-editing turn (a shell call) ms | ralph, turn without tool calls ms | ralph, breaker off ms | one `git status` ms | reference ms | floor (`true`) ms | editing ÷ floor | (non-editing − `git status`) ÷ floor | without tools ÷ floor | editing − breaker off |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n in sizes:
    r = {x["command"]: x["median"] * 1000 for x in json.load(open(os.path.join(results, f"git-{n}.json")))["results"]}
    e, b, t, o, s, ref, f = r["edit"], r["noedit"], r["notool"], r["off"], r["status"], r["reference"], r["floor"]
    ratio = lambda a: f"{a / f:.1f}×" if f > 0.0005 else "—"
    print(f"| {int(n):,} | {e:.2f} | {b:.2f} | {t:.2f} | {o:.2f} | {s:.2f} | {ref:.2f} | {f:.2f} | {ratio(e)} | {ratio(b - s)} | {ratio(t)} | {e - o:+.2f} ms |")
PY
)
  echo
  echo "$GIT_TABLE"
fi
TABLE=""
((${#CASES[@]})) && TABLE=$(python3 - "$RESULTS" "$MODE" "${CASES[@]}" <<'PY'
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
    "$(hyperfine --version)" "$SIZES" "$REFNOTE" "$GEN_LABEL" "$GIT_TABLE" "$GIT_SIZES" "$(git --version)" "$BUILD_LABEL" "$FIRST_SIZES" <<'PY'
import re, sys
out, table, date, nproc, cpu, mode, hf, sizes, refnote, gen, git_table, git_sizes, git_version, build, first_sizes = sys.argv[1:]
refnote_block = ("\n" + refnote) if refnote else ""
how = ("hyperfine `--input` (`-N`, no shell)" if mode == "input" else
       "hyperfine 1.15 shell mode: `sh -c 'cmd < payload.json'`, with the measured "
       "shell start-up subtracted (so the floor is the cost of exec'ing `true`)")
try:
    text = open(out).read()
except FileNotFoundError:
    text = "# Performance\n\n"

def put(text, name, body):
    start, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body}{end}"
    if start in text and end in text:
        return re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    return text + "\n" + block + "\n"

if table:
    text = put(text, "bench", f"""Measured {date} on {nproc} × {cpu} ({hf}; {how}; ralph built for {build}).
Transcript sizes (MiB): {sizes}, a loop's first stop at {first_sizes}; generator: `{gen}`.
Times are hyperfine medians of whole processes; RSS is the maximum of `/usr/bin/time -v` over a few runs.

{table}
{refnote_block}""")
if git_table:
    text = put(text, "bench-git", f"""Measured {date} on {nproc} × {cpu} ({hf}; {how}; {git_version}; ralph built for {build}).
Repositories of {git_sizes} committed files; hyperfine medians of whole processes, all seven commands in one run per size.

{git_table}
""")
open(out, "w").write(text)
print(f"bench: wrote {out}", file=sys.stderr)
PY
fi
