#!/bin/sh
# Builds and packs ralph's npm packages for this machine, exactly as the release workflow does
# for every platform: the platform package (@ralph-loop/ralph-<os>-<cpu>, the static binary)
# and the main package (@ralph-loop/ralph, which lists every platform package as an optional
# dependency). The tarballs land in the output folder, ready for `npm publish <tarball>`.
#
#   scripts/pack-npm.sh [--target TRIPLE] [--binary PATH] [--out DIR]
#
# --target  the Rust target (default: this machine's; Linux builds are static musl)
# --binary  pack this binary instead of building one (the install test passes the binary
#           under test)
# --out     where the package folders and tarballs go (default: target/npm)
set -eu
cd "$(dirname "$0")/.."

target= binary= out=target/npm
while [ $# -gt 0 ]; do
    case $1 in
        --target) target=$2; shift 2 ;;
        --binary) binary=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "usage: $0 [--target TRIPLE] [--binary PATH] [--out DIR]" >&2; exit 2 ;;
    esac
done

if [ -z "$target" ]; then
    case "$(uname -s) $(uname -m)" in
        "Linux x86_64") target=x86_64-unknown-linux-musl ;;
        "Linux aarch64" | "Linux arm64") target=aarch64-unknown-linux-musl ;;
        "Darwin x86_64") target=x86_64-apple-darwin ;;
        "Darwin arm64") target=aarch64-apple-darwin ;;
        MINGW*x86_64 | MSYS*x86_64 | CYGWIN*x86_64) target=x86_64-pc-windows-msvc ;;
        *) echo "pack-npm: no npm platform for $(uname -s) $(uname -m)" >&2; exit 1 ;;
    esac
fi

if [ -z "$binary" ]; then
    cargo build --release --locked -p ralph-loop --target "$target"
    binary=target/$target/release/ralph
    case $target in *windows*) binary=$binary.exe ;; esac
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
platform_dir=$(node scripts/npm.mjs platform "$target" "$binary" "$out")
main_dir=$(node scripts/npm.mjs main "$out")
for dir in "$platform_dir" "$main_dir"; do
    (cd "$dir" && npm pack --silent --pack-destination "$out" >/dev/null)
done
ls "$out"/*.tgz
