#!/usr/bin/env bash
# ralph watch over 8 stories of a --parallel run: how soon the screen shows a change, and
# what it costs while nothing changes. Usage: bench/watch.sh [path/to/ralph] [idle seconds]
#
# The 8 stories are 8 worktree folders under .ralph/worktrees/, each with a loop armed the
# way a story's child arms it (its own .claude/, its record in the user's state folder).
# `ralph watch` runs in a tmux pane of 150x40; a change is a `ralph pause`/`ralph resume` of
# one story's loop, and the latency is the time until tmux's copy of the screen shows it
# (polled every 10 ms, so the figure is at most 10 ms late). Idle cost: the watch process's
# user+system CPU time from /proc over the idle seconds, as a share of one core.
set -euo pipefail
ralph=$(realpath "${1:-target/release/ralph}")
idle=${2:-30}
work=$(mktemp -d)
trap 'tmux -S "$work/tmux" kill-server 2>/dev/null || true; rm -rf "$work"' EXIT
export HOME="$work/home" XDG_STATE_HOME="$work/home/.local/state"
mkdir -p "$HOME" "$work/p/.claude"
for n in 1 2 3 4 5 6 7 8; do
  dir="$work/p/.ralph/worktrees/US-00$n"
  mkdir -p "$dir/.claude"
  (cd "$dir" && "$ralph" start --name "US-00$n" --max-iterations 20 --completion-promise DONE "Story $n" >/dev/null)
done
tmux -S "$work/tmux" -f /dev/null new-session -d -x 150 -y 40 -c "$work/p" \
  "env HOME='$HOME' XDG_STATE_HOME='$XDG_STATE_HOME' TERM=xterm-256color '$ralph' watch"
screen() { tmux -S "$work/tmux" capture-pane -p; }
until [ "$(screen | grep -c 'story US-00')" -ge 8 ]; do sleep 0.05; done
pid=$(tmux -S "$work/tmux" list-panes -F '#{pane_pid}')
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
sleep 2
t0=$(ticks); s0=$(date +%s.%N)
sleep "$idle"
t1=$(ticks); s1=$(date +%s.%N)
awk -v t="$((t1 - t0))" -v hz="$hz" -v s0="$s0" -v s1="$s1" \
  'BEGIN { printf "idle: %.2f %% of a core over %.0f s (%d ticks)\n", 100 * t / hz / (s1 - s0), s1 - s0, t }'
story="$work/p/.ralph/worktrees/US-004"
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) -eq 1 ]; then verb=pause; want=paused; else verb=resume; want=active; fi
  start=$(date +%s%N)
  (cd "$story" && "$ralph" "$verb" --name US-004 >/dev/null)
  until screen | grep 'story US-004' | grep -q " $want "; do sleep 0.01; done
  echo "change $i ($verb): shown after $(( ($(date +%s%N) - start) / 1000000 )) ms"
done
