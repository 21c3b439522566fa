#!/usr/bin/env bash
# One story of the fleet, in one job: run its loop with `ralph run --parallel 1 --merge none`
# (the same driver, guards and verify gate as on a laptop; the branch is rebased onto the
# base and verified there), push its branch, and write the pull request's body.
# It never opens the pull request itself: that is the action's separate `gh pr create`
# step, so this script runs anywhere, e.g. against a local bare repository in the tests.
#
# Input (environment):
#   STORY           the story id (from `ralph plan --matrix`)             required
#   AGENT           `ralph run --agent` value (claude, codex, gemini, copilot or a command)
#   MAX_ITERATIONS, MAX_DURATION, MAX_TOKENS, MAX_COST, COMPLETION_PROMISE, VERIFY, PERMISSION_MODE
#                   the loop's `ralph run` flags of the same names, when set
#   FLEET_MAX_COST  the whole fleet's dollar budget: with FLEET_JOBS (the number of jobs) and
#                   LEDGER (the folder the jobs share), this job takes its share of what is left
#                   (`ralph fleet-budget share`) as --max-cost, and does not start (exit 3,
#                   outcome=not_started) when nothing is left
#   LEDGER_OUT      a folder for `<story>.spent`, what the loop spent [LEDGER, when set]
#   APPROVE_COMMANDS  `ralph run --approve-commands`: the code of the PRD's story commands
#                   the user approved (shown by `ralph plan`), answered yes on a
#                   pseudo-terminal (`script`, util-linux); without it, a PRD whose
#                   stories carry commands is refused (exit 2) and nothing runs
#   SANDBOX         true: `ralph run --sandbox` (the agent confined by bubblewrap) [false]
#   AGENT_KEY_ENV   the variable the agent reads its key from, e.g. ANTHROPIC_API_KEY
#   AGENT_KEY       its value (from a secret)
#   REMOTE          where to push: a URL or a path (never read from the checkout's config)
#   PUSH            0: do not push here (the caller pushes later, see push-branch.sh) [1]
#   RALPH           the ralph binary [ralph]
#   OUT             folder for summary.txt, pr-body.md [ralph-fleet-out]
# Output: `outcome=<state>` and `branch=ralph/<story>` appended to $GITHUB_OUTPUT when set.
# Exit: 0 when the story is ready for its pull request, 3 when it is not, 2 on bad input.
set -uo pipefail

story=${STORY:-}
case $story in
    "" | -* | .* | *..* | *. | *.lock | *[!A-Za-z0-9._-]*)
        echo "run-story: STORY='${story}' is not a story id (letters, digits, . _ - only)" >&2
        exit 2 ;;
esac
if [ -n "${AGENT_KEY_ENV:-}" ]; then
    case $AGENT_KEY_ENV in
        *[!A-Z0-9_]* | [0-9]*) echo "run-story: AGENT_KEY_ENV='$AGENT_KEY_ENV' is not a variable name" >&2; exit 2 ;;
    esac
    export "$AGENT_KEY_ENV=${AGENT_KEY:-}"
fi
unset AGENT_KEY
ralph=${RALPH:-ralph}
remote=${REMOTE:-}
if [ "${PUSH:-1}" != 0 ] && [ -z "$remote" ]; then
    echo "run-story: set REMOTE to the URL or path to push to (or PUSH=0)" >&2
    exit 2
fi
out=${OUT:-ralph-fleet-out}
branch="ralph/$story"
mkdir -p "$out"

# No program the checkout's configuration names runs in git commands of this script.
git() { command git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c commit.gpgSign=false \
    -c credential.helper= -c protocol.ext.allow=never "$@"; }

# actions/checkout may leave a detached HEAD; ralph merges nothing here (--merge none)
# but rebases onto the branch that is checked out.
if ! base=$(git symbolic-ref -q --short HEAD); then
    base=${BASE:?detached HEAD: set BASE to the branch the stories start from}
    git checkout -q -B "$base"
fi

# One budget for the whole fleet: this job's share of what the others left, or no start.
max_cost=${MAX_COST:-}
ledger_out=${LEDGER_OUT:-${LEDGER:-}}
if [ -n "${FLEET_MAX_COST:-}" ]; then
    mkdir -p "${LEDGER:?set LEDGER (the folder shared by the jobs of the fleet) with FLEET_MAX_COST}"
    if ! max_cost=$("$ralph" fleet-budget share --total "$FLEET_MAX_COST" --jobs "${FLEET_JOBS:-1}" \
        --ledger "$LEDGER" --story "$story" 2> "$out/budget.txt"); then
        cat "$out/budget.txt" >&2
        if [ -n "${GITHUB_OUTPUT:-}" ]; then
            { echo "outcome=not_started"; echo "branch="; } >> "$GITHUB_OUTPUT"
        fi
        exit 3
    fi
    echo "run-story: the fleet's budget is \$$FLEET_MAX_COST; this job takes \$$max_cost of what is left"
fi

# Each flag is one argument: nothing in a value is run or split by a shell.
extra=()
[ -n "${MAX_ITERATIONS:-}" ] && extra+=(--max-iterations "$MAX_ITERATIONS")
[ -n "${MAX_DURATION:-}" ] && extra+=(--max-duration "$MAX_DURATION")
[ -n "${MAX_TOKENS:-}" ] && extra+=(--max-tokens "$MAX_TOKENS")
[ -n "$max_cost" ] && extra+=(--max-cost "$max_cost")
[ -n "${COMPLETION_PROMISE:-}" ] && extra+=(--completion-promise "$COMPLETION_PROMISE")
[ -n "${VERIFY:-}" ] && extra+=(--verify "$VERIFY")
[ -n "${PERMISSION_MODE:-}" ] && extra+=(--permission-mode "$PERMISSION_MODE")
[ -n "${APPROVE_COMMANDS:-}" ] && extra+=(--approve-commands "$APPROVE_COMMANDS")
case ${SANDBOX:-false} in
    true) extra+=(--sandbox) ;;
    false | "") ;;
    *) echo "run-story: SANDBOX='$SANDBOX' is not true or false" >&2; exit 2 ;;
esac
run=("$ralph" run --parallel 1 --story "$story" --merge none --agent "${AGENT:-claude}" "${extra[@]}")
set +e
if [ -n "${APPROVE_COMMANDS:-}" ]; then
    # A code is the user's own step: ralph asks on a terminal and refuses without one. The
    # workflow's input is the user's approval, answered yes on a pseudo-terminal of this
    # job's own (`script`; each argument quoted for bash), its escapes and \r left out.
    printf -v line '%q ' "${run[@]}"
    printf 'y\n' | SHELL=/bin/bash script -qec "$line" /dev/null 2>&1 \
        | sed 's/\x1b\[[0-9;?]*[A-Za-z]//g; s/\r//g' | tee "$out/summary.txt"
    status=${PIPESTATUS[1]}
else
    "${run[@]}" 2>&1 | tee "$out/summary.txt"
    status=${PIPESTATUS[0]}
fi
set -e

state=$(sed -n 's/^ *"state": *"\([a-z_]*\)".*/\1/p' ".claude/ralph/stories/$story.json" 2>/dev/null || true)
state=${state:-failed}
if [ -n "${GITHUB_OUTPUT:-}" ]; then
    { echo "outcome=$state"; echo "branch=$branch"; } >> "$GITHUB_OUTPUT"
fi
# What the loop spent, for the jobs that start later and the fleet's sum.
if [ -n "$ledger_out" ]; then
    mkdir -p "$ledger_out"
    "$ralph" fleet-budget spent --ledger "$ledger_out" --story "$story" || true
fi

# The branch goes up whenever it holds work, so that nothing a loop did is lost, from a
# scratch repository (push-branch.sh). PUSH=0: the caller pushes in a later step, where the
# token is (the GitHub action: the agent's step never sees it).
if [ "${PUSH:-1}" != 0 ]; then
    STORY=$story BASE=$base REMOTE_URL=$remote bash "$(dirname "$0")/push-branch.sh"
fi

log=$(ls -1 .claude/ralph/history/*"-${story//./_}.log.jsonl" 2>/dev/null | tail -n 1 || true)
{
    echo "Story **$story**, run by \`ralph run --parallel 1 --merge none\`: **$state**."
    echo
    # Indented code blocks: no line of the output (a story title, the agent's words) can
    # end them and become markdown, as a line of ``` could end a fenced one.
    tail -n 40 "$out/summary.txt" | sed 's/^/    /'
    if [ -n "$log" ]; then
        echo
        echo "<details><summary>Decision log (last 20 lines)</summary>"
        echo
        tail -n 20 "$log" | sed 's/^/    /'
        echo
        echo "</details>"
    fi
} > "$out/pr-body.md"

[ "$state" = ready ] && exit 0
[ "$status" -eq 0 ] && exit 3
exit "$status"
