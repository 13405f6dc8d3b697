#!/usr/bin/env python3
"""Module cycles in the agentvfs library: which modules import each other, in a circle.

Reads every `crate::a::b` and `super::x` path in crates/agentvfs/src (use lines and inline
paths alike), maps each to the module (file) it names, and prints every strongly connected
component with more than one module. Exit 1 when there is one. A module's own submodules
(`mod.rs` declaring children) do not count as an import of them.

Usage: scripts/module_cycles.py [SRC_DIR]
"""
import re
import sys
from pathlib import Path

src = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent / "crates/agentvfs/src")


def module_of(path: Path) -> tuple:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return tuple(parts)


modules = {module_of(p): p for p in src.rglob("*.rs")}


def resolve(parts: list) -> tuple | None:
    """The longest prefix of `parts` that is a module."""
    for n in range(len(parts), 0, -1):
        if tuple(parts[:n]) in modules:
            return tuple(parts[:n])
    return None


PATH = re.compile(r"\b((?:crate|super)(?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))+)")
edges: dict = {m: set() for m in modules}
for mod, path in modules.items():
    text = path.read_text()
    # Unit-test modules may reach anything.
    text = text.split("#[cfg(test)]")[0]
    # Comments name modules without importing them.
    text = re.sub(r"//.*", "", text)
    is_dir_mod = path.name in ("mod.rs", "lib.rs")
    for m in PATH.finditer(text):
        segs = m.group(1).split("::")
        if segs[0] == "crate":
            base, rest = [], segs[1:]
        else:
            base = list(mod if is_dir_mod else mod[:-1])
            rest = segs[1:]
            while rest and rest[0] == "super":
                base = base[:-1]
                rest = rest[1:]
            if segs[0] == "super" and is_dir_mod:
                base = base[:-1]
        target = resolve(base + rest)
        if target and target != mod and not target[: len(mod)] == mod:
            edges[mod].add(target)

# Tarjan's strongly connected components.
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))


sys.setrecursionlimit(10000)
for v in modules:
    if v not in index:
        visit(v)

name = lambda m: "::".join(m) or "crate"
for comp in sccs:
    print(f"cycle of {len(comp)}: " + ", ".join(name(m) for m in comp))
    for m in comp:
        inside = sorted(name(t) for t in edges[m] if t in comp)
        print(f"  {name(m)} -> {', '.join(inside)}")
print(f"{len(sccs)} cycle(s) among {len(modules)} modules")
sys.exit(1 if sccs else 0)
