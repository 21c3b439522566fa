#!/bin/sh
# The honesty benchmark (docs/performance.md, "Honesty"). Part one: six
# scripted agent policies on generated tasks whose spec is a test suite,
# each driven through `ralph run`, the Stop hook and a bare promise loop,
# judged by a hidden oracle (tests/honesty.rs). Part two: issue 45's cheat
# classes (and honest agents) on a Python, JavaScript and Rust project under
# the configuration the README recommends, through `ralph run`, the Stop
# hook and `ralph run --sandbox`, each class under every driver, with and
# without held-out checks where only they can see it (tests/honesty/cheats.rs).
# CI runs both with one task and, for part two, each class under one driver;
# this script with more, and prints the tables.
#
#   bench/honesty/run.sh [TASKS] [CHEAT_TASKS]   (defaults 10 and 3; tables to stdout)
set -eu
tasks=${1:-10}
cheat_tasks=${2:-3}
cd "$(dirname "$0")/../.."
table=$(mktemp)
cheats=$(mktemp -d)
trap 'rm -rf "$table" "$cheats"' EXIT
RALPH_HONESTY_TASKS=$tasks RALPH_HONESTY_TABLE=$table \
    cargo test -p ralph-loop --test integration honesty::ralph_with >&2
RALPH_HONESTY_TASKS=$cheat_tasks RALPH_HONESTY_CHEATS_DIR=$cheats \
    cargo test -p ralph-loop --test integration honesty::cheats:: >&2
cat "$table"
echo
cat "$cheats/Python"
tail -n +3 "$cheats/JavaScript"
tail -n +3 "$cheats/Rust"
