#!/usr/bin/env python3
"""Generate a deterministic, source-like host tree for scripts/bench.sh.

Usage: gen_tree.py DEST [--text N] [--binaries N] [--binary-mb MB] [--seed S]

Defaults give about 16,000 files and 300 MB: 15,800 text files (source, docs and config,
mostly 1-16 KB, a few up to 100 KB) in 40 packages of nested directories, one identical
LICENSE per package (duplicates, as real trees have), a symlink per package, and 200
binary files of random bytes (0.275-1.925 MB, mean 1.1 MB) under assets/. Same arguments,
same bytes: the seed fixes everything, including mtimes.

Prints one line of JSON: {"files": ..., "bytes": ..., "dirs": ..., "symlinks": ...}.
"""

import argparse
import json
import os
import random

EXTS = [".rs", ".rs", ".rs", ".py", ".ts", ".md", ".toml", ".json"]
WORDS = (
    "let mut self fn pub struct impl match return if else for while in use mod const "
    "value result error config buffer index count offset length node tree path vault "
    "checkpoint fork restore import export write read list entry chunk object store"
).split()
MTIME = 1_700_000_000  # fixed mtime for every entry


def line_pool(rng, n=4096):
    pool = []
    for i in range(n):
        indent = "    " * rng.randint(0, 3)
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 10)))
        pool.append(f"{indent}{words}_{i}({rng.randint(0, 99999)});\n")
    return pool


def text_size(rng):
    # Mostly small files, a long tail: median about 4 KB, mean about 6 KB, max 100 KB.
    size = int(rng.lognormvariate(8.3, 0.75))
    return max(200, min(size, 100_000))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dest")
    ap.add_argument("--text", type=int, default=15_800)
    ap.add_argument("--binaries", type=int, default=200)
    ap.add_argument("--binary-mb", type=float, default=1.1, help="mean binary size (MB)")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    pool = line_pool(rng)
    os.makedirs(args.dest, exist_ok=True)
    files = total = symlinks = 0
    dirs = set()

    def write(rel, data):
        nonlocal files, total
        path = os.path.join(args.dest, rel)
        d = os.path.dirname(path)
        if d not in dirs:
            os.makedirs(d, exist_ok=True)
            dirs.add(d)
        with open(path, "wb") as f:
            f.write(data)
        os.utime(path, (MTIME, MTIME))
        files += 1
        total += len(data)

    packages = 40
    licence = ("Permission is hereby granted, free of charge, to any person...\n" * 16).encode()
    for p in range(packages):
        write(f"packages/pkg{p:02}/LICENSE", licence)
        link = os.path.join(args.dest, f"packages/pkg{p:02}/README.link")
        os.symlink("LICENSE", link)
        symlinks += 1

    per_pkg = max(1, (args.text - packages) // packages)
    for i in range(args.text - packages):
        p = min(i // per_pkg, packages - 1)
        j = i % per_pkg
        rel = f"packages/pkg{p:02}/src/mod{j // 40:02}/sub{(j // 8) % 5}/file{i:05}{EXTS[i % len(EXTS)]}"
        size = text_size(rng)
        header = f"// generated file {i} of package {p}\n"
        body = []
        n = len(header)
        while n < size:
            ln = pool[rng.randrange(len(pool))]
            body.append(ln)
            n += len(ln)
        write(rel, (header + "".join(body)).encode()[:size])

    mean = args.binary_mb * 1_000_000
    for b in range(args.binaries):
        size = int(mean * (0.25 + 1.5 * rng.random()))
        write(f"assets/bin{b // 50}/blob{b:03}.bin", rng.randbytes(size))

    all_dirs = [root for root, _, _ in os.walk(args.dest)]
    for d in sorted(all_dirs, key=len, reverse=True):
        os.utime(d, (MTIME, MTIME))
    summary = {"files": files, "bytes": total, "dirs": len(all_dirs) - 1, "symlinks": symlinks}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
