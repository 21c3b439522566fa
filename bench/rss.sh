#!/usr/bin/env bash
# Peak RSS of `ralph hook stop` over a 200 MiB transcript, two release builds side by side.
#
#   bench/rss.sh BEFORE_RALPH AFTER_RALPH [RUNS]     (RUNS: 5 by default)
#
# Each case is run RUNS times per binary, the two binaries interleaved, each run on a loop set
# up afresh by that binary (its own state folder); the table gives the median of GNU time's
# "Maximum resident set size" and the smallest and largest seen. Cases:
#   first stop     a loop armed before every line of the transcript, never primed, the event
#                  without `last_assistant_message`: the stop finds the loop's start reading
#                  backward (at most 64 MiB) and counts forward from there
#   later stop     the same loop after one stop, its offset at the transcript's last line
#   no loop        a project without a loop file: start-up and one folder read
# RALPH_BENCH_CACHE=DIR keeps the generated transcript there for the next run.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,15p' "$0"; exit 2; }
before=$(realpath "$1")
after=$(realpath "$2")
runs=${3:-5}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cache=${RALPH_BENCH_CACHE:-$work}
mkdir -p "$cache"
transcript=$cache/t200.jsonl
[ -s "$transcript" ] || python3 "$here/gen-transcript.py" "$transcript" 200
session=bench-rss

# arm BIN DIR MODE: a project in DIR with a loop as MODE says (first, later or none).
arm() {
    local bin=$1 dir=$2 mode=$3
    rm -rf "$dir" && mkdir -p "$dir/p/.claude"
    printf '{"session_id":"%s","transcript_path":"%s","cwd":"%s","hook_event_name":"Stop","stop_hook_active":false}' \
        "$session" "$transcript" "$dir/p" >"$dir/event.json"
    [ "$mode" = none ] && return
    (
        cd "$dir/p"
        export HOME=$dir XDG_STATE_HOME=$dir/state
        "$bin" start --max-iterations 0 --completion-promise DONE --session-id "$session" \
            "Implement the next story in PRD.md." </dev/null >/dev/null
        # The generator stamps its lines 2026-11-30: date the loop before them, and adopt the
        # edited file on a terminal (`script`), as the user would.
        sed -i 's/^started_at: .*/started_at: "2026-01-01T00:00:00Z"/' .claude/ralph-loop.local.md
        script -qec "$bin adopt --name ralph --yes" /dev/null </dev/null >/dev/null 2>&1
        if [ "$mode" = later ]; then
            "$bin" hook stop <"$dir/event.json" >/dev/null
        fi
    )
}

# peak BIN DIR: one stop's maximum RSS in KiB.
peak() {
    local bin=$1 dir=$2
    (
        cd "$dir/p"
        export HOME=$dir XDG_STATE_HOME=$dir/state
        LC_ALL=C /usr/bin/time -f '%M' "$bin" hook stop <"$dir/event.json" 2>&1 >/dev/null | tail -n 1
    )
}

stats() { sort -n | awk '{v[NR]=$1} END {printf "%d | %d–%d", v[int((NR+1)/2)], v[1], v[NR]}'; }

echo "Measured $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $runs runs per binary and case."
echo
echo "| case | before: median KiB | before: range | after: median KiB | after: range |"
echo "|---|---:|---:|---:|---:|"
for mode in first later none; do
    : >"$work/before" && : >"$work/after"
    for _ in $(seq 1 "$runs"); do
        for side in before after; do
            arm "${!side}" "$work/$side-run" "$mode"
            peak "${!side}" "$work/$side-run" >>"$work/$side"
        done
    done
    label=$([ "$mode" = first ] && echo "first stop, 200 MiB" || { [ "$mode" = later ] && echo "later stop, 200 MiB" || echo "no loop"; })
    echo "| $label | $(stats <"$work/before") | $(stats <"$work/after") |"
done
