#!/usr/bin/env python3
"""Import cycles between the files of src/: an edge a -> b for every `super::x`
or `crate::a::b` path in file a (outside its `#[cfg(test)] mod tests`) that names
file b; mod.rs and lib.rs, which re-export their children, are left out.

    python3 scripts/import-cycles.py src    # exits 1 and lists the cycles, if any
"""
import os, re, sys
root = os.path.abspath(sys.argv[1])
def file_of(parts):
    # longest prefix of module path that is a file
    for i in range(len(parts), 0, -1):
        p = os.path.join(root, *parts[:i]) + '.rs'
        if os.path.exists(p): return '/'.join(parts[:i])
    return None
edges = {}
for d, _, files in os.walk(root):
    for f in files:
        if not f.endswith('.rs'): continue
        mod = f[:-3]
        if mod in ('mod', 'lib'): continue
        rel = os.path.relpath(d, root)
        here = [] if rel == '.' else rel.split('/')
        text = open(os.path.join(d, f)).read().split('#[cfg(test)]\nmod tests')[0]
        src = '/'.join(here + [mod])
        for m in re.finditer(r'\b(super|crate)((?:::\w+)+)', text):
            parts = m.group(2).strip(':').split('::')
            full = (here + parts) if m.group(1) == 'super' else parts
            dst = file_of(full)
            if dst and dst != src: edges.setdefault(src, set()).add(dst)
        for m in re.finditer(r'use super::\{([^}]*)\}', text):
            for name in re.findall(r'(\w+)::', m.group(1)):
                dst = file_of(here + [name])
                if dst and dst != src: edges.setdefault(src, set()).add(dst)
cycles = set()
def dfs(node, stack):
    for nxt in sorted(edges.get(node, ())):
        if nxt in stack:
            cyc = stack[stack.index(nxt):]; k = cyc.index(min(cyc)); cycles.add(tuple(cyc[k:] + cyc[:k]))
        elif len(stack) < 12: dfs(nxt, stack + [nxt])
for n in sorted(edges): dfs(n, [n])
print(f"{sum(len(v) for v in edges.values())} edges between files")
for c in sorted(cycles): print("cycle:", " -> ".join(c + (c[0],)))
if not cycles: print("no cycle")
sys.exit(1 if cycles else 0)
