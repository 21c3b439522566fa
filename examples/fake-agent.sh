#!/bin/sh
# A stand-in agent for `ralph run`, to watch a whole loop without any account:
#
#   ralph run --agent ./examples/fake-agent.sh --completion-promise DONE --max-iterations 5 \
#       "Write three haiku about loops into haiku.txt"
#
# Like a real agent it reads the prompt on stdin, works in the current folder (the
# project root) and prints its reply. Its memory is the files, as in any Ralph loop:
# each run writes one haiku, and once haiku.txt holds three it gives the promise.
set -eu
prompt=$(cat)
case $prompt in
    *"<promise>DONE</promise>"*) ;;
    *) echo "This fake agent only knows loops armed with --completion-promise DONE." >&2; exit 2 ;;
esac
sleep "${FAKE_AGENT_DELAY:-1}"   # pretend to think, so the progress line has something to show
touch haiku.txt
count=$(grep -c '^---$' haiku.txt || true)
case $count in
    0) printf 'Same prompt again,\nthe files remember for me,\nthe loop turns once more.\n---\n' >> haiku.txt ;;
    1) printf 'A promise withheld\nuntil the work is finished:\nhonest loops end well.\n---\n' >> haiku.txt ;;
    *) printf 'Three small poems stand;\nthe checks pass, the notes are kept.\nNow I can say it.\n---\n' >> haiku.txt ;;
esac
count=$((count + 1))
if [ "$count" -ge 3 ]; then
    printf 'haiku.txt now holds three haiku; I read them back and they scan.\n<promise>DONE</promise>\n'
else
    printf 'Wrote haiku %s of 3 into haiku.txt. More to do.\n' "$count"
fi
