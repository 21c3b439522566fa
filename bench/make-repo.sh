#!/usr/bin/env bash
# A git repository of N small committed files in DIR, for the benchmarks' "turn without tool
# calls" cases; generated once and reused while DIR/.ready is there (bench/run.sh and
# bench/versus.sh share one cache, so both get the same repository). `.ready` and `.claude`
# (where the benchmarks arm their loops) are excluded, so `git status` sees only the files.
#
# usage: bench/make-repo.sh DIR N
set -euo pipefail
dir=${1:?usage: bench/make-repo.sh DIR N}
n=${2:?usage: bench/make-repo.sh DIR N}
[[ -f $dir/.ready ]] && exit 0
echo "bench: generating a git repository of $n files…" >&2
rm -rf "$dir" && mkdir -p "$dir"
python3 - "$dir" "$n" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 1000:03d}")
    if i % 1000 == 0:
        os.mkdir(d)
    with open(os.path.join(d, f"f{i:06d}.txt"), "w") as f:
        f.write(f"file {i}\n")
PY
(cd "$dir" && git init -q && git add -A &&
  git -c user.name=bench -c user.email=bench@example.com commit -qm files &&
  sleep 1 && git update-index -q --refresh && git status --porcelain >/dev/null)
printf '.ready\n.claude\n' >>"$dir/.git/info/exclude"
touch "$dir/.ready"
