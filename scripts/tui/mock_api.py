#!/usr/bin/env python3
"""A scripted Messages API on 127.0.0.1 for checking ralph in Claude Code's terminal UI.

Usage: mock_api.py PORT_FILE LOG_FILE [REPLY ...]

Each REPLY answers one model turn, in order (the last one repeats): plain text, or
`sleep:N:TEXT` to wait N seconds before answering (time to type a message while the agent
works). Side requests (titles, summaries) get a short neutral answer. The chosen port is
written to PORT_FILE; one line per request (turn or side, model, the last user text's
last 3000 characters, and which of the words in $MOCK_MARKERS the request holds) is appended
to LOG_FILE. With $MOCK_CONTEXT, every reply says its request sent that many tokens (read from
the cache), as a long session's would; with $MOCK_WHEN and $MOCK_THEN, a turn whose request
holds the text $MOCK_WHEN is answered $MOCK_THEN instead of the script's next reply.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, LOG_FILE, SCRIPT = sys.argv[1], sys.argv[2], sys.argv[3:] or ["ok"]
LOCK = threading.Lock()
TURNS = [0]
# Words to look for anywhere in a request (comma-separated in MOCK_MARKERS): which of them
# reached the model, wherever the client put them.
MARKERS = [m for m in os.environ.get("MOCK_MARKERS", "").split(",") if m]
CONTEXT = int(os.environ.get("MOCK_CONTEXT", "0") or 0)
WHEN, THEN = os.environ.get("MOCK_WHEN", ""), os.environ.get("MOCK_THEN", "")


def last_user_text(body):
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        parts = []
        for item in content or []:
            if isinstance(item, dict):
                if isinstance(item.get("text"), str):
                    parts.append(item["text"])
                elif isinstance(item.get("content"), str):
                    parts.append(item["content"])
        return "\n".join(parts)
    return ""


def sse(text, model, n):
    events = [
        ("message_start", {"type": "message_start", "message": {
            "id": f"msg_tui_{n}", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1,
                      "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": max(CONTEXT - 10, 0)}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, ctype, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_tui")
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self):
        self.answer(200, "text/plain", "")

    def do_GET(self):
        if self.path.startswith("/v1/models"):
            self.answer(200, "application/json", json.dumps({
                "data": [{"type": "model", "id": "claude-mock", "display_name": "Mock",
                          "created_at": "2025-01-01T00:00:00Z"}],
                "has_more": False, "first_id": "claude-mock", "last_id": "claude-mock"}))
        else:
            self.answer(200, "application/json", "{}")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null") or {}
        except ValueError:
            body = {}
        path = self.path.split("?")[0]
        if path == "/v1/messages/count_tokens":
            return self.answer(200, "application/json", '{"input_tokens":42}')
        if path != "/v1/messages":
            return self.answer(200, "application/json", "{}")
        is_turn = bool(body.get("tools"))
        with LOCK:
            if is_turn:
                n = TURNS[0]
                TURNS[0] += 1
                reply = SCRIPT[min(n, len(SCRIPT) - 1)]
                if WHEN and WHEN in json.dumps(body):
                    reply = THEN
            else:
                n, reply = -1, "Side reply"
            with open(LOG_FILE, "a") as log:
                kind = f"turn {n + 1}" if is_turn else "side"
                log.write(json.dumps({"kind": kind, "model": body.get("model"),
                                      "last_user_text": last_user_text(body)[-3000:],
                                      "mentions": [m for m in MARKERS if m in json.dumps(body)]})
                          + "\n")
        if reply.startswith("sleep:"):
            _, seconds, reply = reply.split(":", 2)
            time.sleep(float(seconds))
        self.answer(200, "text/event-stream", sse(reply, body.get("model", "claude-mock"), n))


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE, "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
