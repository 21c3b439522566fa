#!/usr/bin/env bash
# Pushes ralph/<story> when it holds work beyond the base, so that nothing a loop did is lost.
# The push never runs in the checkout: the unattended agent could have edited its .git/config
# (a hook, a credential helper, `url.<x>.insteadOf`, `remote.origin.url`) to run a program or
# redirect the push while the token is there. The branch is fetched into a scratch bare
# repository whose configuration is this script's own, and pushed from there to REMOTE_URL.
#
# Input (environment):
#   STORY        the story id                                              required
#   BASE         the branch the story started from                         required
#   REMOTE_URL   where to push (a URL or a path; never a remote's name)    required
#   PUSH_TOKEN   a token for an https REMOTE_URL (sent as a header, never stored)
# Exit: 0 pushed or nothing to push; 2 on bad input; git's status otherwise.
set -euo pipefail

token=${PUSH_TOKEN:-}
unset PUSH_TOKEN # nothing git starts below inherits it
story=${STORY:-}
case $story in
    "" | -* | .* | *..* | *. | *.lock | *[!A-Za-z0-9._-]*)
        echo "push-branch: STORY='${story}' is not a story id" >&2; exit 2 ;;
esac
base=${BASE:?BASE: the branch the story started from}
case $base in
    "" | -* | *..* | *[!A-Za-z0-9._/-]*) echo "push-branch: BASE='${base}' is not a plain branch name" >&2; exit 2 ;;
esac
url=${REMOTE_URL:?REMOTE_URL: where to push}
case $url in
    -*) echo "push-branch: REMOTE_URL must not start with -" >&2; exit 2 ;;
esac
branch="ralph/$story"

# No program the checkout's configuration names runs (see docs/security.md).
hard=(-c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.pager=cat -c credential.helper=
      -c core.askPass= -c core.sshCommand= -c protocol.ext.allow=never -c commit.gpgSign=false
      -c push.gpgSign=false -c gc.auto=0 -c maintenance.auto=false)
export GIT_TERMINAL_PROMPT=0 GIT_EDITOR=true GIT_PAGER=cat

if ! git "${hard[@]}" rev-parse -q --verify "refs/heads/$branch" >/dev/null \
    || [ -z "$(git "${hard[@]}" rev-list "refs/heads/$base..refs/heads/$branch" --)" ]; then
    echo "push-branch: $branch holds no work beyond $base; nothing pushed"
    exit 0
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git init -q --bare "$scratch/repo.git"
# Fetching runs git-upload-pack in the checkout: it runs no hook, and no token is in its environment.
GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git --git-dir="$scratch/repo.git" "${hard[@]}" \
    fetch -q --no-tags "$PWD" "refs/heads/$branch:refs/heads/$branch"
if [ -n "$token" ]; then
    # GIT_CONFIG_* rather than -c: the header stays out of the process list.
    export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=http.extraHeader
    GIT_CONFIG_VALUE_0="AUTHORIZATION: basic $(printf 'x-access-token:%s' "$token" | base64 | tr -d '\n')"
    export GIT_CONFIG_VALUE_0
fi
# The story branch is ralph's own: it is replaced with what this run made.
GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git --git-dir="$scratch/repo.git" "${hard[@]}" \
    push -q --force "$url" "refs/heads/$branch:refs/heads/$branch"
echo "push-branch: pushed $branch"
