#!/usr/bin/env python3
"""Fallback transcript generator for bench/run.sh (used when ../shared/bench is absent).

usage: gen-transcript.py OUT SIZE_MB [LAST_TEXT]

Writes a JSONL file shaped like a Claude Code session transcript, about SIZE_MB
MiB long: repeated turns of (user prompt, assistant text, assistant tool_use,
user tool_result with a few KiB of output), then one final assistant text line
carrying LAST_TEXT. Lines are built from string templates with counter-based
ids instead of json.dumps + uuid4 per line, and written in large chunks, so a
1 GiB file takes seconds rather than minutes. Deterministic for a given size.
"""
import json
import random
import sys


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = sys.argv[1]
    target = int(float(sys.argv[2]) * 1024 * 1024)
    last_text = sys.argv[3] if len(sys.argv) > 3 else "Still working on the next story."
    rng = random.Random(20261130)
    session = "00000000-bench-4000-8000-000000000042"
    common = ('"isSidechain":false,"userType":"external","cwd":"/home/dev/project",'
              f'"sessionId":"{session}","version":"2.1.0","gitBranch":"main",'
              '"timestamp":"2026-11-30T00:00:00.000Z"')
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 \n\t{}[]();:=,.\"\\/<>"
    # A handful of tool outputs, JSON-escaped once, reused round-robin.
    outputs = []
    for _ in range(16):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(1500, 24000)))
        outputs.append(json.dumps(raw))

    def uid(kind: str, n: int) -> str:
        return f"{kind}{n:07x}-0000-4000-8000-{n:012x}"

    def assistant(n: int, content: str) -> str:
        return ('{"parentUuid":"%s",%s,"type":"assistant","uuid":"%s","message":{"id":"msg_bench%016x",'
                '"type":"message","role":"assistant","model":"claude-opus-4-5","content":%s,'
                '"stop_reason":null,"usage":{"input_tokens":900,"output_tokens":250,'
                '"cache_creation_input_tokens":0,"cache_read_input_tokens":40000}}}\n'
                % (uid("a", n - 1), common, uid("a", n), n, content))

    def user(n: int, content: str) -> str:
        return ('{"parentUuid":"%s",%s,"type":"user","uuid":"%s","message":{"role":"user","content":%s}}\n'
                % (uid("b", n - 1), common, uid("b", n), content))

    written = 0
    turn = 0
    chunk = []
    chunk_len = 0
    with open(out, "w", encoding="utf-8") as f:
        while written < target:
            turn += 1
            lines = (
                user(4 * turn, json.dumps(f"Turn {turn}: keep going with the plan.")),
                assistant(4 * turn + 1, json.dumps(
                    [{"type": "text", "text": f"Turn {turn}: reading the code; the <promise> comes later."}], separators=(",", ":"))),
                assistant(4 * turn + 2, '[{"type":"tool_use","id":"toolu_%08d","name":"Bash",'
                          '"input":{"command":"cargo test --quiet"}}]' % turn),
                user(4 * turn + 3, '[{"type":"tool_result","tool_use_id":"toolu_%08d","content":%s}]'
                     % (turn, outputs[turn % len(outputs)])),
            )
            for line in lines:
                chunk.append(line)
                chunk_len += len(line)
                written += len(line)
            if chunk_len > 4 * 1024 * 1024:
                f.write("".join(chunk))
                chunk, chunk_len = [], 0
        f.write("".join(chunk))
        f.write(assistant(4 * turn + 4, json.dumps([{"type": "text", "text": last_text}], separators=(",", ":"))))


if __name__ == "__main__":
    main()
