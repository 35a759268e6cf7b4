#!/usr/bin/env python3
"""Import cycles between the files of src/: an edge a -> b for every `super::x`
or `crate::a::b` path in file a (outside its `#[cfg(test)] mod tests`) that names
file b.

A directory's `mod.rs` is the node of the directory (`cost` for
`src/cost/mod.rs`): it defines types, so its own paths are edges like any
file's. A path that names an item a `mod.rs` (or `lib.rs`) re-exports from a
child (`pub use self::tokens::Tokens;` in `cost/mod.rs`) leads to that child's
file, not to the `mod.rs`: `crate::cost::Tokens` is an edge to `cost/tokens`.
`lib.rs` is no node (it only maps the crate), and a module's `mod x;` and
`pub use self::...` lines are no edges (a parent re-exporting its child is not
a dependency on it), nor are comments (a doc link names an item, it does not
import it) and a macro's `$crate::` paths (they resolve where it expands).

    python3 scripts/import-cycles.py src    # exits 1 and lists the cycles, if any
"""
import os, re, sys

root = os.path.abspath(sys.argv[1])


def code(path):
    """A file's code outside its `#[cfg(test)] mod tests`, without comments
    (a doc link names an item, it does not import it)."""
    text = open(path).read().split('#[cfg(test)]\nmod tests')[0]
    return re.sub(r'(?m)(^|\s)//.*$', r'\1', text)


def module_file(parts):
    """The file of module path `parts` (from the crate root): `a/b.rs` or
    `a/b/mod.rs` (`lib.rs` for the root), or None."""
    if not parts:
        return os.path.join(root, 'lib.rs')
    for p in (os.path.join(root, *parts) + '.rs', os.path.join(root, *parts, 'mod.rs')):
        if os.path.exists(p):
            return p
    return None


def reexports(parts):
    """Names re-exported from a child by the module at `parts`: name -> the
    child's module path (`pub use self::x::{A, B}`, `pub use crate::x::A`)."""
    f = module_file(parts)
    out = {}
    if f is None:
        return out
    for m in re.finditer(r'pub use (self|crate)::(\w+)::(?:\{([^}]*)\}|(\w+))', code(f)):
        base = (parts if m.group(1) == 'self' else []) + [m.group(2)]
        names = m.group(3) if m.group(3) is not None else m.group(4)
        for name in re.findall(r'\b(\w+)\b(?!::)', names):
            if name not in ('self', 'as'):
                out.setdefault(name, base)
    return out


def node_of(parts):
    """The node (a file's module path, `a/b`) that path `parts` names: the
    longest prefix that is a module, or the child a module re-exports the
    next name from. None for the root alone or a path outside src/."""
    best = None
    for i in range(len(parts), -1, -1):
        if module_file(parts[:i]) is not None:
            best = i
            break
    if best is None:
        return None
    mod = parts[:best]
    if best < len(parts):
        child = reexports(mod).get(parts[best])
        if child is not None and child != mod and module_file(child) is not None:
            return node_of(child + parts[best + 1:]) or '/'.join(child)
    return '/'.join(mod) if mod else None


edges = {}
for d, _, files in os.walk(root):
    for f in files:
        if not f.endswith('.rs'):
            continue
        rel = os.path.relpath(d, root)
        here = [] if rel == '.' else rel.split('/')
        if f == 'lib.rs' and not here:
            continue
        # The module path of this file and of `super` from it.
        mod = here if f == 'mod.rs' else here + [f[:-3]]
        parent = mod[:-1]
        src = '/'.join(mod)
        text = code(os.path.join(d, f))
        # `$crate::` paths are a macro's, resolved where it expands: no edge.
        for m in re.finditer(r'(?<!\$)\b(super|crate)((?:::\w+)+)', text):
            parts = m.group(2).strip(':').split('::')
            full = (parent + parts) if m.group(1) == 'super' else parts
            dst = node_of(full)
            if dst and dst != src:
                edges.setdefault(src, set()).add(dst)
        for m in re.finditer(r'use super::\{([^}]*)\}', text):
            for name in re.findall(r'(\w+)::', m.group(1)):
                dst = node_of(parent + [name])
                if dst and dst != src:
                    edges.setdefault(src, set()).add(dst)
        for m in re.finditer(r'use crate::\{([^}]*)\}', text):
            for name in re.findall(r'(\w+)(?:::(\w+))?', m.group(1)):
                dst = node_of([x for x in name if x])
                if dst and dst != src:
                    edges.setdefault(src, set()).add(dst)

cycles = set()


def dfs(node, stack):
    for nxt in sorted(edges.get(node, ())):
        if nxt in stack:
            cyc = stack[stack.index(nxt):]
            k = cyc.index(min(cyc))
            cycles.add(tuple(cyc[k:] + cyc[:k]))
        elif len(stack) < 12:
            dfs(nxt, stack + [nxt])


for n in sorted(edges):
    dfs(n, [n])
print(f"{sum(len(v) for v in edges.values())} edges between files "
      f"({sum(1 for s in edges if '/' not in s or os.path.exists(os.path.join(root, s, 'mod.rs')))} "
      f"from mod.rs or top-level files)")
for c in sorted(cycles):
    print("cycle:", " -> ".join(c + (c[0],)))
if not cycles:
    print("no cycle")
sys.exit(1 if cycles else 0)
