#!/usr/bin/env bash
# What `ralph run --sandbox` adds to one iteration, two ways, each side by side in one
# hyperfine run:
# 1. one whole `ralph run` (arm, one agent process, judge, end the loop) with a trivial agent,
#    with and without `--sandbox` (bubblewrap). ralph looks at a running agent every 100 ms,
#    so these times move in steps of 100 ms and can hide a smaller cost;
# 2. the agent's start alone: `sh -c true` against the very bwrap command line ralph built
#    (captured once through a logging `bwrap` first on PATH, the agent's command replaced by
#    `true`), both started by the same small bash script, so the difference is bubblewrap's
#    own namespaces and mounts.
#
# usage: bench/sandbox.sh        (Linux, with bubblewrap and hyperfine installed)
# env:   RALPH=path/to/ralph     [target/release/ralph, built when missing]
#        RALPH_BENCH_RUNS=50  RALPH_BENCH_WARMUP=5
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
RALPH=${RALPH:-$REPO/target/release/ralph}
RUNS=${RALPH_BENCH_RUNS:-50}
WARMUP=${RALPH_BENCH_WARMUP:-5}

command -v hyperfine >/dev/null || { echo "bench: install hyperfine" >&2; exit 1; }
real_bwrap=$(command -v bwrap) || { echo "bench: install bubblewrap" >&2; exit 1; }
[ -x "$RALPH" ] || cargo build --release -p ralph-loop --manifest-path "$REPO/Cargo.toml"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/home" "$work/tools" "$work/project/.claude" "$work/bin"
printf '#!/bin/sh\ncat > /dev/null\necho "<promise>DONE</promise>"\n' > "$work/tools/agent.sh"
chmod +x "$work/tools/agent.sh"
export HOME=$work/home XDG_STATE_HOME=$work/home/.local/state
cd "$work/project"

# 1. Whole iterations.
agent=$work/tools/agent.sh
hyperfine -N --warmup "$WARMUP" --runs "$RUNS" \
    --prepare "rm -rf $work/project/.claude/ralph" \
    --command-name "ralph run (one iteration)" \
    "$RALPH run --agent $agent --completion-promise DONE --max-iterations 1 bench" \
    --command-name "ralph run --sandbox (one iteration)" \
    "$RALPH run --sandbox --agent $agent --completion-promise DONE --max-iterations 1 bench" \
    --export-markdown "$work/iteration.md"

# 2. The agent's start: ralph's own bwrap arguments, captured, then replayed.
{
    echo '#!/bin/sh'
    echo "printf '%s\\0' \"\$@\" > $work/bwrap.args"
    echo "exec $real_bwrap \"\$@\""
} > "$work/bin/bwrap"
chmod +x "$work/bin/bwrap"
rm -rf "$work/project/.claude/ralph"
PATH="$work/bin:$PATH" "$RALPH" run --sandbox --agent "$agent" --completion-promise DONE \
    --max-iterations 1 bench > /dev/null
{
    echo '#!/usr/bin/env bash'
    echo "mapfile -d '' args < $work/bwrap.args"
    echo 'args[${#args[@]}-1]=true'
    echo "exec $real_bwrap \"\${args[@]}\" < /dev/null"
} > "$work/replay-bwrap.sh"
{
    echo '#!/usr/bin/env bash'
    echo "mapfile -d '' args < $work/bwrap.args"
    echo 'exec sh -c true < /dev/null'
} > "$work/replay-plain.sh"
chmod +x "$work/replay-bwrap.sh" "$work/replay-plain.sh"
hyperfine -N --warmup "$WARMUP" --runs "$RUNS" \
    --command-name "sh -c true" "$work/replay-plain.sh" \
    --command-name "bwrap (ralph's arguments) sh -c true" "$work/replay-bwrap.sh" \
    --export-markdown "$work/start.md"

echo
echo "bwrap's arguments, as ralph built them:"
tr '\0' ' ' < "$work/bwrap.args"; echo
echo
cat "$work/iteration.md"
echo
cat "$work/start.md"
