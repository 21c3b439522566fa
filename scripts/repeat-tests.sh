#!/usr/bin/env bash
# Runs the timing-sensitive integration tests many times and names every test that failed.
#
#   scripts/repeat-tests.sh [RUNS] [MODULE-OR-FILTER …]  (default: 20 runs of the timing-sensitive modules)
#   LOAD=1 scripts/repeat-tests.sh 10                     (also keeps every core busy meanwhile)
#   LOAD=1 LOAD_PROCS=4 scripts/repeat-tests.sh 2 all     (the whole binary twice, 4 busy loops:
#                                                          saturated, as CONTRIBUTING.md asks)
#
# The integration tests are one binary (tests/main.rs) with one module per area; a module name
# (`hook`) runs that module's tests, a name with `::` the tests it begins
# (`robustness::sigkill`), `all` the whole binary.
#
# A test that fails once in N runs fails CI once in N submissions: run this after touching
# anything that waits on a child process, a signal, a lock or the clock.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
shift || true
modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=(run robustness guards budget progress session first_hour)

cargo test -p ralph-loop --locked --test integration --no-run >/dev/null 2>&1 || {
    echo "build failed: cargo test -p ralph-loop --test integration --no-run" >&2
    exit 2
}
# The tests whose full name starts with `MODULE::` (or with the filter), run with --exact: a
# plain filter `run::` would also pick `e2e_run::`.
prefixes=()
for m in "${modules[@]}"; do
    case "$m" in
        all) prefixes+=("") ;;
        *::*) prefixes+=("$m") ;;
        *) prefixes+=("$m::") ;;
    esac
done
tests=()
while read -r name; do
    for p in "${prefixes[@]}"; do
        if [[ "$name" == "$p"* ]]; then tests+=("$name"); break; fi
    done
done < <(cargo test -p ralph-loop --locked --test integration -- --list --format terse 2>/dev/null | sed -n 's/: test$//p')
[ ${#tests[@]} -gt 0 ] || { echo "no test matches: ${modules[*]}" >&2; exit 2; }
echo "${#tests[@]} tests, $runs runs"

load_pids=()
if [ "${LOAD:-0}" = 1 ]; then
    # One busy loop per core unless LOAD_PROCS says how many (more than the cores: saturated).
    for _ in $(seq 1 "${LOAD_PROCS:-$(nproc 2>/dev/null || echo 2)}"); do
        (while :; do :; done) &
        load_pids+=($!)
    done
fi
trap '[ ${#load_pids[@]} -gt 0 ] && kill "${load_pids[@]}" 2>/dev/null' EXIT

log=$(mktemp)
failed_runs=0
declare -A failures=()
for i in $(seq 1 "$runs"); do
    threads=()
    # Every other run with one test thread: some races only show with (or without) parallelism.
    [ $((i % 2)) = 0 ] && threads=(--test-threads=1)
    if cargo test -p ralph-loop --locked --test integration -- --exact "${tests[@]}" "${threads[@]}" >"$log" 2>&1; then
        printf '.'
    else
        printf 'F'
        failed_runs=$((failed_runs + 1))
        while read -r name; do
            failures[$name]=$(( ${failures[$name]:-0} + 1 ))
        done < <(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$log")
        cp "$log" "/tmp/repeat-tests-failure-$i.log"
    fi
done
echo
rm -f "$log"
echo "$runs runs, $failed_runs failed"
for name in "${!failures[@]}"; do
    echo "  ${failures[$name]}× $name   (logs: /tmp/repeat-tests-failure-*.log)"
done
[ "$failed_runs" = 0 ]
