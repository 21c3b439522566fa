#!/usr/bin/env bash
# Installs ralph for a fleet job, one of three ways, and says which it used:
#   RALPH_VERSION       an exact npm version (e.g. 0.1.0): npm install -g @ralph-loop/ralph@VERSION
#   RALPH_ARCHIVE_URL   a release archive (.tar.gz), with RALPH_ARCHIVE_SHA256 its SHA-256
#                       (required: an archive whose checksum differs is refused)
#   (neither)           built from source: `cargo build --locked` of RALPH_SOURCE, the ralph
#                       repository at the ref the workflow named [this action's repository]
# RALPH_BIN_DIR  where ralph goes (added to $GITHUB_PATH when set) [$RUNNER_TEMP/ralph-bin]
# RALPH_CARGO_PROFILE  the cargo profile of a source build [release, without LTO]
# RALPH_CARGO_FLAGS    more `cargo build` flags, split on spaces (the tests pass --tests, so
#                      that the build is the one they already made)
# Output: `from=npm|archive|source` and `version=…` appended to $GITHUB_OUTPUT when set.
set -euo pipefail

bin_dir=${RALPH_BIN_DIR:-${RUNNER_TEMP:-/tmp}/ralph-bin}
mkdir -p "$bin_dir"
version=${RALPH_VERSION:-}
archive=${RALPH_ARCHIVE_URL:-}

if [ -n "$version" ]; then
    case $version in
        [0-9]*.[0-9]*.[0-9]*) ;;
        *) echo "install-ralph: ralph-version '$version' is not an exact version (e.g. 0.1.0)" >&2; exit 2 ;;
    esac
    npm install --global --no-audit --no-fund "@ralph-loop/ralph@${version}"
    ralph=$(command -v ralph)
    from=npm
    said="npm: @ralph-loop/ralph@$version"
elif [ -n "$archive" ]; then
    want=${RALPH_ARCHIVE_SHA256:-}
    case $want in
        [0-9a-f]*) [ ${#want} -eq 64 ] || want=bad ;;
        *) want=bad ;;
    esac
    if [ "$want" = bad ]; then
        echo "install-ralph: ralph-archive-sha256 must be the archive's SHA-256 (64 hex digits, from the release's SHA256SUMS)" >&2
        exit 2
    fi
    scratch=$(mktemp -d)
    curl --fail --silent --show-error --location --proto '=https' --output "$scratch/ralph.tar.gz" -- "$archive"
    got=$(sha256sum "$scratch/ralph.tar.gz" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
        echo "install-ralph: $archive has SHA-256 $got, not $want: refused" >&2
        exit 2
    fi
    tar -xzf "$scratch/ralph.tar.gz" -C "$scratch" --no-same-owner
    found=$(find "$scratch" -type f -name ralph -perm -u+x | head -n 1)
    [ -n "$found" ] || { echo "install-ralph: no ralph executable in $archive" >&2; exit 2; }
    cp "$found" "$bin_dir/ralph"
    ralph="$bin_dir/ralph"
    from=archive
    said="the release archive $archive (SHA-256 $got)"
else
    here=$(cd "$(dirname "$0")" && pwd)
    source=${RALPH_SOURCE:-$(cd "$here/../../.." && pwd)}
    profile=${RALPH_CARGO_PROFILE:-release}
    [ -f "$source/Cargo.toml" ] || { echo "install-ralph: no Cargo.toml in $source (RALPH_SOURCE)" >&2; exit 2; }
    command -v cargo >/dev/null || { echo "install-ralph: cargo is not installed (needed to build ralph from source)" >&2; exit 2; }
    commit=$(command git -C "$source" rev-parse HEAD 2>/dev/null || echo "unknown commit")
    # A runner builds once per job: LTO's minutes buy nothing there.
    CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
        cargo build --locked --quiet --profile "$profile" -p ralph-loop --manifest-path "$source/Cargo.toml" \
        ${RALPH_CARGO_FLAGS:-}
    dir=$profile
    [ "$profile" = dev ] && dir=debug
    cp "${CARGO_TARGET_DIR:-$source/target}/$dir/ralph" "$bin_dir/ralph"
    ralph="$bin_dir/ralph"
    from=source
    said="source: cargo build of $source at $commit"
fi

[ -n "${GITHUB_PATH:-}" ] && [ "$from" != npm ] && echo "$bin_dir" >> "$GITHUB_PATH"
installed=$("$ralph" --version)
echo "install-ralph: $installed, installed from $said"
if [ -n "${GITHUB_OUTPUT:-}" ]; then
    { echo "from=$from"; echo "version=$installed"; echo "path=$ralph"; } >> "$GITHUB_OUTPUT"
fi
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    echo "ralph: \`$installed\`, installed from $from" >> "$GITHUB_STEP_SUMMARY"
fi
