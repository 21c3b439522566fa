#!/bin/sh
# The honesty benchmark (docs/performance.md, "Honesty"): six scripted agent
# policies on generated tasks whose spec is a test suite, each driven through
# `ralph run`, the Stop hook and a bare promise loop, judged by a hidden
# oracle. The harness is tests/honesty.rs; CI runs it with one task per
# policy, this script with more, and prints the table.
#
#   bench/honesty/run.sh [TASKS]      (default 10; the table goes to stdout)
set -eu
tasks=${1:-10}
cd "$(dirname "$0")/../.."
table=$(mktemp)
trap 'rm -f "$table"' EXIT
RALPH_HONESTY_TASKS=$tasks RALPH_HONESTY_TABLE=$table \
    cargo test -p ralph-loop --test integration honesty:: >&2
cat "$table"
