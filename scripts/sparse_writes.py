#!/usr/bin/env python3
"""One-byte writes every 16 MiB into one file in an avfs mount, then fsync: how the time
to the fsync and the mount daemon's memory grow with the number of writes (each write
adds a data entry to the file's chunk list, and each commit stores the whole list).

    scripts/sparse_writes.py N [N …]      (mounts a fresh vault; AVFS_BIN as elsewhere)
"""
import json, os, subprocess, sys, tempfile, time

BIN = os.environ.get("AVFS_BIN", os.path.join(os.path.dirname(__file__), "..", "target/release/avfs"))


def avfs(home, *args):
    env = dict(os.environ, AVFS_HOME=home)
    return subprocess.run([BIN, *args], env=env, capture_output=True, text=True, check=True).stdout


for n in map(int, sys.argv[1:] or ["8000"]):
    home, mnt = tempfile.mkdtemp(), tempfile.mkdtemp()
    avfs(home, "vault", "create", "s")
    avfs(home, "mount", "s", mnt)
    pid = json.loads(avfs(home, "--json", "mounts"))["data"][0]["pid"]
    fd = os.open(os.path.join(mnt, "sparse"), os.O_RDWR | os.O_CREAT, 0o644)
    t = time.time()
    for i in range(n):
        os.pwrite(fd, b"z", i * (16 << 20))
    os.fsync(fd)
    took = time.time() - t
    rss = next(l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")).split()[1]
    os.close(fd)
    avfs(home, "unmount", mnt)
    size = sum(os.path.getsize(os.path.join(home, "vaults", f)) for f in os.listdir(os.path.join(home, "vaults")))
    print(f"{n:>6} writes: fsync after {took:5.1f} s, daemon RSS {int(rss) // 1024} MB, vault {size >> 20} MB")
    subprocess.run(["rm", "-rf", home, mnt])
