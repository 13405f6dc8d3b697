#!/usr/bin/env python3
"""A deterministic source-like tree for the mount benchmarks: many small text files in
nested directories and a few binaries. Usage: gen_source_tree.py DIR FILES"""
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
random.seed(7)
words = [f"ident_{i}" for i in range(500)]
for i in range(n):
    d = os.path.join(root, f"pkg{i % 40}", f"mod{(i // 40) % 25}")
    os.makedirs(d, exist_ok=True)
    if i % 400 == 0:
        data = random.randbytes(512 * 1024)
        open(os.path.join(d, f"blob{i}.bin"), "wb").write(data)
    else:
        lines = [" ".join(random.choices(words, k=8)) for _ in range(random.randint(5, 400))]
        open(os.path.join(d, f"file{i}.rs"), "w").write("\n".join(lines) + "\n")
