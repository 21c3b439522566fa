#!/usr/bin/env bash
# What ralph's meter (issue 46) adds to one iteration of `ralph run --sandbox` with the real
# Claude Code client, side by side in one hyperfine run, against a local mock of the
# Messages API (each model turn answered with a streamed reply that gives the promise):
# 1. without the meter: RALPH_UNMETERED, a build of the same commit whose
#    `Sandbox::meterable` answers false, with `--sandbox-network host` (the client reaches
#    the mock on the host's loopback directly);
# 2. with the meter, the same network: the client's calls go through the proxy;
# 3. with the meter on the default network (`internet`: pasta, the meter's port forwarded).
#
# usage: RALPH_UNMETERED=path/to/unmetered/ralph bench/meter.sh
#        (Linux, with bubblewrap, pasta, hyperfine, python3 and the pinned client installed)
# env:   RALPH=path/to/ralph  [target/release/ralph]
#        CLAUDE=path/to/claude [tests/client/node_modules/@anthropic-ai/claude-code-linux-x64/claude]
#        RALPH_BENCH_RUNS=10  RALPH_BENCH_WARMUP=1
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
RALPH=${RALPH:-$REPO/target/release/ralph}
CLAUDE=${CLAUDE:-$REPO/tests/client/node_modules/@anthropic-ai/claude-code-linux-x64/claude}
RUNS=${RALPH_BENCH_RUNS:-10}
WARMUP=${RALPH_BENCH_WARMUP:-1}
: "${RALPH_UNMETERED:?set RALPH_UNMETERED to a build whose Sandbox::meterable answers false}"
command -v hyperfine >/dev/null || { echo "bench: install hyperfine" >&2; exit 1; }

work=$(mktemp -d)
mkdir -p "$work/home/bin" "$work/project/.claude"
ln -s "$(readlink -f "$CLAUDE")" "$work/home/bin/claude"
cat > "$work/mock.py" <<'EOF'
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def event(name, data):
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"

class Mock(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
        if self.path.split("?")[0] != "/v1/messages":
            return self.answer("application/json", b"{}")
        model = json.loads(body or b"{}").get("model", "claude-mock")
        usage = {"input_tokens": 10, "output_tokens": 1,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 20000}
        sse = (event("message_start", {"type": "message_start", "message": {"id": "msg_1",
                 "type": "message", "role": "assistant", "model": model, "content": [],
                 "stop_reason": None, "stop_sequence": None, "usage": usage}})
               + event("content_block_start", {"type": "content_block_start", "index": 0,
                 "content_block": {"type": "text", "text": ""}})
               + event("content_block_delta", {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": "Done. <promise>DONE</promise>"}})
               + event("content_block_stop", {"type": "content_block_stop", "index": 0})
               + event("message_delta", {"type": "message_delta", "delta":
                 {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 9}})
               + event("message_stop", {"type": "message_stop"}))
        self.answer("text/event-stream", sse.encode())
    def do_GET(self):
        self.answer("application/json", b"{}")
    def do_HEAD(self):
        self.answer("text/plain", b"")
    def answer(self, kind, body):
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)

server = ThreadingHTTPServer(("127.0.0.1", 0), Mock)
print(server.server_address[1], flush=True)
server.serve_forever()
EOF
python3 "$work/mock.py" > "$work/port" &
mock=$!
trap 'kill $mock; rm -rf "$work"' EXIT
while [ ! -s "$work/port" ]; do sleep 0.1; done
export HOME=$work/home XDG_STATE_HOME=$work/home/.local/state PATH="$work/home/bin:$PATH"
export ANTHROPIC_BASE_URL="http://127.0.0.1:$(cat "$work/port")" ANTHROPIC_API_KEY=bench
export IS_SANDBOX=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
cd "$work/project"

task="--agent claude --completion-promise DONE --max-iterations 1 bench"
hyperfine -N --warmup "$WARMUP" --runs "$RUNS" \
    --prepare "rm -rf $work/project/.claude/ralph" \
    --command-name "unmetered, --sandbox-network host" \
    "$RALPH_UNMETERED run --sandbox --sandbox-network host $task" \
    --command-name "metered, --sandbox-network host" \
    "$RALPH run --sandbox --sandbox-network host $task" \
    --command-name "metered, the default network (pasta)" \
    "$RALPH run --sandbox $task" \
    --export-markdown "$work/meter.md"
cat "$work/meter.md"
# One metered run's lines, to show the iteration was charged through the meter.
rm -rf "$work/project/.claude/ralph"
"$RALPH" run --sandbox $task | grep '^✓ iteration'
