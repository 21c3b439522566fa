#!/bin/sh
# Builds the ProcessPrng stand-in (see bcryptprimitives.c) into $1/.
set -eu
out=${1:?usage: build.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
x86_64-w64-mingw32-gcc -shared -O2 -o "$out/bcryptprimitives.dll" \
  "$here/bcryptprimitives.c" "$here/bcryptprimitives.def" -ladvapi32
