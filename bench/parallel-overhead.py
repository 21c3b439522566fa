#!/usr/bin/env python3
"""ralph's own cost per loop in `ralph run --parallel N`: N stories, N at once, each with a
trivial agent (reads the prompt, gives the promise at once), in a fresh git repository.

CPU is the user+system time of the whole process tree (ralph, its child `ralph run`s, git,
the agents), from the kernel's rusage of waited-for children; the agents' own time is
measured apart (the same agent, run as often) and subtracted. What is left is ralph's cost:
the orchestrator, one `ralph run` per loop, and the git work (worktree add, rebase, merge,
remove). usage: bench/parallel-overhead.py [path/to/ralph] [N ...]   (default: 1 4 8)
"""
import json, os, resource, subprocess, sys, tempfile, time

ralph = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/debug/ralph")
sizes = [int(n) for n in sys.argv[2:]] or [1, 4, 8]
AGENT = "cat >/dev/null; echo 'done <promise>DONE</promise>'"

def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def run(cmd, **kw):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)

print("| loops (N at once) | wall | CPU, all | CPU, agents | ralph per loop (CPU) |")
print("|---|---|---|---|---|")
for n in sizes:
    with tempfile.TemporaryDirectory() as tmp:
        home, repo = os.path.join(tmp, "home"), os.path.join(tmp, "repo")
        os.makedirs(home); os.makedirs(os.path.join(repo, "ralph"))
        with open(os.path.join(home, ".gitconfig"), "w") as f:
            f.write("[user]\n\tname = B\n\temail = b@example.com\n")
        env = dict(os.environ, HOME=home, XDG_STATE_HOME=os.path.join(home, "state"),
                   GIT_CONFIG_NOSYSTEM="1")
        env.pop("CLAUDE_PROJECT_DIR", None)
        stories = [{"id": f"S-{i}", "title": f"story {i}", "passes": False} for i in range(n)]
        with open(os.path.join(repo, "ralph/prd.json"), "w") as f:
            json.dump({"userStories": stories}, f)
        run(["git", "init", "-q", "-b", "main"], cwd=repo, env=env)
        run(["git", "add", "-A"], cwd=repo, env=env)
        run(["git", "commit", "-qm", "start"], cwd=repo, env=env)
        before, t0 = cpu(), time.monotonic()
        run([ralph, "run", "--parallel", str(n), "--agent", AGENT, "--max-iterations", "3"],
            cwd=repo, env=env, stdin=subprocess.DEVNULL)
        wall, total = time.monotonic() - t0, cpu() - before
        before = cpu()
        for _ in range(n):
            subprocess.run(["sh", "-c", AGENT], input=b"x" * 2000, stdout=subprocess.DEVNULL, cwd=repo)
        agents = cpu() - before
        print(f"| {n} | {wall:.2f}s | {total*1000:.0f} ms | {agents*1000:.0f} ms "
              f"| {(total-agents)/n*1000:.0f} ms |")
