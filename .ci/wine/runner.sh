#!/bin/sh
# cargo's CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER: runs a Windows test
# binary under Wine with the ProcessPrng stand-in beside it, in a throwaway
# Wine prefix (one per runner call unless WINEPREFIX is set), quietly.
set -eu
exe=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
dll=${RALPH_WINE_DLL_DIR:-$here/../../target/wine}/bcryptprimitives.dll
[ -f "$dll" ] || { echo "runner.sh: $dll missing; run .ci/wine/build.sh first" >&2; exit 2; }
dir=$(dirname "$exe")
[ -f "$dir/bcryptprimitives.dll" ] || cp "$dll" "$dir/"
# The test binary spawns ralph.exe from target/<triple>/debug/: it needs the DLL too.
for d in "$dir" "$dir/.."; do
  [ -f "$d/bcryptprimitives.dll" ] || cp "$dll" "$d/" 2>/dev/null || true
done
export WINEDEBUG=-all
export WINEDLLOVERRIDES="bcryptprimitives=n;mscoree=;mshtml=;winemenubuilder.exe=d"
if [ -z "${WINEPREFIX:-}" ]; then
  WINEPREFIX=$(mktemp -d "${TMPDIR:-/tmp}/ralph-wine.XXXXXX")
  export WINEPREFIX
  trap 'wineserver -k >/dev/null 2>&1 || true; rm -rf "$WINEPREFIX"' EXIT
fi
wine=$(command -v wine64 || command -v wine)
"$wine" "$exe" "$@"
