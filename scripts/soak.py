#!/usr/bin/env python3
"""Soak: AGENTS agents, each on its own fork (FORKS forks, shared round-robin), run mixed
proxied commands for a bounded time: writes, git commits, deletes, rollbacks of their own
last command, and merges into the vault's main line at the end. Half the agents use a
session (a long-lived daemon), half mount per command.

    scripts/soak.py [--agents 8] [--forks 8] [--seconds 60] [--seed N]

Afterwards: every fork holds exactly the files its agents' model says (no lost write, no
stray one); every fork merges into main; no avfs process, FUSE mount, per-command temp
directory or session socket is left; session daemons' memory is printed at the first and
last quarter. Prints the counts and exits 1 on any broken invariant. Uses AVFS_BIN (default
target/debug/avfs). Bounded: every command has a timeout, the run stops after --seconds.
"""

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.abspath(os.environ.get("AVFS_BIN", os.path.join(ROOT, "target/debug/avfs")))


def avfs(home, *args, check=True):
    env = dict(os.environ, AVFS_HOME=home, AVFS_ACTOR="soak")
    env.pop("AVFS_WORKSPACE", None)
    env.pop("AVFS_VAULT", None)
    out = subprocess.run([BIN, "--json", *args], env=env, capture_output=True, text=True, timeout=120)
    doc = json.loads(out.stdout) if out.stdout.strip() else {"ok": False, "error": {"kind": "no output", "message": out.stderr}}
    if check and not doc["ok"] and not (args[0] == "proxy" and "data" in doc):
        raise RuntimeError(f"avfs {' '.join(args)}: {doc}")
    return doc


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def leftovers(before_tmp):
    mounts = [l for l in open("/proc/mounts") if " fuse" in l and ("avfs" in l or "soak" in l)]
    procs = []
    for p in glob.glob("/proc/[0-9]*/exe"):
        try:
            if os.readlink(p) == BIN:
                procs.append(p.split("/")[2])
        except OSError:
            pass
    tmp = set(glob.glob("/tmp/avfs-exec-*")) - before_tmp
    return mounts, procs, sorted(tmp)


class Agent(threading.Thread):
    def __init__(self, home, n, fork, session, seed, deadline, lock, models):
        super().__init__()
        self.home, self.n, self.fork, self.session = home, n, fork, session
        self.rng = random.Random(seed)
        self.deadline, self.lock, self.models = deadline, lock, models
        self.counts = {"write": 0, "delete": 0, "git": 0, "rollback": 0, "failed": 0}
        self.error = None
        self.last = None  # (exec_id, files it added, files it deleted)

    def exec(self, shell):
        args = ["proxy", "exec", "--timeout", "60s"]
        if self.session:
            args += ["--session", self.session]
        else:
            args += ["--workspace", self.fork]
        return avfs(self.home, *args, "--shell", shell, check=False)

    def run(self):
        try:
            while time.time() < self.deadline:
                self.step()
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.error = e

    def step(self):
        model = self.models[self.fork]
        mine = sorted(p for p in model if p.startswith(f"/a{self.n}-"))
        choice = self.rng.random()
        if choice < 0.45 or not mine:
            names = [f"/a{self.n}-{self.rng.randrange(10**9)}.txt" for _ in range(self.rng.randint(1, 4))]
            shell = "; ".join(f"echo {p} > .{p}" for p in names)
            added, deleted, kind = names, [], "write"
        elif choice < 0.65:
            victim = self.rng.choice(mine)
            shell, added, deleted, kind = f"rm .{victim}", [], [victim], "delete"
        elif choice < 0.8:
            shell = f"cd g{self.n} 2>/dev/null || {{ mkdir -p g{self.n} && cd g{self.n} && git init -q; }}; " \
                    f"echo {self.rng.random()} > note && git add note && " \
                    "git -c user.name=s -c user.email=s@x commit -qm soak"
            added, deleted, kind = [], [], "git"
        else:
            kind = "rollback"
            if self.last is None:
                return
            exec_id, added, deleted = self.last
            with self.lock:
                doc = avfs(self.home, "--workspace", self.fork, "rollback", str(exec_id), check=False)
                if doc["ok"]:
                    for p in added:
                        model.discard(p)
                    for p in deleted:
                        model.add(p)
                    self.counts["rollback"] += 1
                else:
                    self.counts["failed"] += 1
            self.last = None
            return
        # One command at a time per fork: the model and the fork move together.
        with self.lock:
            doc = self.exec(shell)
            data = doc.get("data") or {}
            if data.get("exit_code") == 0:
                for p in added:
                    model.add(p)
                for p in deleted:
                    model.discard(p)
                self.counts[kind] += 1
                self.last = (data["exec_id"], added, deleted) if kind != "git" else None
            else:
                self.counts["failed"] += 1
                self.last = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--forks", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    before_tmp = set(glob.glob("/tmp/avfs-exec-*"))
    home = tempfile.mkdtemp(prefix="avfs-soak.")
    avfs(home, "vault", "create", "main")
    forks = [f"f{k}" for k in range(a.forks)]
    for f in forks:
        avfs(home, "vault", "fork", "main", f)
    locks = {f: threading.Lock() for f in forks}
    models = {f: set() for f in forks}
    sessions = {}
    for k, f in enumerate(forks):
        if k % 2 == 0:
            avfs(home, "session", "start", f, "--name", f"s{f}")
            sessions[f] = f"s{f}"
    deadline = time.time() + a.seconds
    agents = []
    for n in range(a.agents):
        fork = forks[n % len(forks)]
        agents.append(Agent(home, n, fork, sessions.get(fork), a.seed * 1000 + n, deadline, locks[fork], models))
    for ag in agents:
        ag.start()

    def daemon_rss():
        out = {}
        for s in avfs(home, "session", "list")["data"]:
            out[s["name"]] = rss_kib(s["pid"])
        return out

    time.sleep(a.seconds / 4)
    early = daemon_rss()
    time.sleep(a.seconds / 2)
    late = daemon_rss()
    for ag in agents:
        ag.join()
    problems = [f"agent {ag.n}: {ag.error!r}" for ag in agents if ag.error]
    for s in sessions.values():
        avfs(home, "session", "stop", s)
    # Every fork holds exactly what its agents' commands left.
    for f in forks:
        found = avfs(home, "--workspace", f, "find", "a*", "/", "--type", "f")["data"]
        have = {e["path"] for e in found if e["path"].count("/") == 1}
        if have != models[f]:
            problems.append(f"fork {f}: missing {sorted(models[f] - have)[:5]}, stray {sorted(have - models[f])[:5]}")
    for f in forks:
        doc = avfs(home, "merge", f, "--into", "main", "--strategy", "theirs", check=False)
        if not doc["ok"]:
            problems.append(f"merge {f}: {doc['error']}")
    main_files = {e["path"] for e in avfs(home, "--workspace", "main", "find", "a*", "/", "--type", "f")["data"] if e["path"].count("/") == 1}
    want = set().union(*models.values())
    if main_files != want:
        problems.append(f"main after merges: missing {sorted(want - main_files)[:5]}, stray {sorted(main_files - want)[:5]}")
    check = avfs(home, "vault", "check", check=False)
    if not check["ok"]:
        problems.append(f"vault check: {check['error']}")
    time.sleep(0.5)
    mounts, procs, tmp = leftovers(before_tmp)
    if mounts or procs or tmp:
        problems.append(f"left behind: mounts {mounts}, processes {procs}, temp dirs {tmp}")
    totals = {}
    for ag in agents:
        for k, v in ag.counts.items():
            totals[k] = totals.get(k, 0) + v
    print(f"soak: {a.agents} agents x {a.forks} forks for {a.seconds:.0f} s (seed {a.seed})")
    print("  commands: " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    print(f"  files kept across forks: {len(want)}; main after merges: {len(main_files)}")
    for name in sorted(early):
        print(f"  session {name} daemon RSS: {early[name]} KiB at 1/4, {late.get(name)} KiB at 3/4")
    print(f"  left behind: {len(mounts)} mounts, {len(procs)} processes, {len(tmp)} temp dirs")
    if problems:
        for p in problems:
            print("PROBLEM:", p, file=sys.stderr)
        print(f"vault kept in {home}", file=sys.stderr)
        sys.exit(1)
    subprocess.run(["rm", "-rf", home])


if __name__ == "__main__":
    main()
