#!/usr/bin/env python3
"""Import cycles between the files of src/: an edge a -> b for every path in
file a (outside its `#[cfg(test)] mod tests`) that names an item of file b.

Paths are read from `use` declarations, flattened through grouped and nested
trees (`use super::{a::X, b::{Y, Z}}`, `use crate::{x, y::Y}`,
`use super::super::z`), and from paths written in code (`crate::a::f()`,
`super::b::impl_x!`).

A directory's `mod.rs` is the node of the directory (`cost` for
`src/cost/mod.rs`): it defines types, so its own paths are edges like any
file's. A path that names an item a `mod.rs` (or `lib.rs`) re-exports
(`pub use self::tokens::Tokens;` in `cost/mod.rs`) leads to the file that
defines it, not to the `mod.rs`: `crate::cost::Tokens` is an edge to
`cost/tokens`. `lib.rs` is no node (it only maps the crate), and a module's
`mod x;` and `pub use self::...` lines are no edges (a parent re-exporting its
child is not a dependency on it), nor are comments (a doc link names an item,
it does not import it, and so does a `#[cfg(doc)] use`) and a macro's
`$crate::` paths (they resolve where it expands).

    python3 scripts/import-cycles.py src          # exits 1 and lists the cycles, if any
    python3 scripts/import-cycles.py --self-test  # checks the script on small crates
"""
import os
import re
import sys
import tempfile

TOKEN = re.compile(r'\s*(::|\{|\}|,|\*|[A-Za-z_$][A-Za-z_0-9]*)')
USE = re.compile(r'(?m)^\s*(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]*);')
INLINE = re.compile(r'(?<![\$\w])((?:super|crate)(?:::\w+)+)')


LITERAL = re.compile(r'r(#*)".*?"\1' r'|b?"(?:\\.|[^"\\])*"' r"|b?'(?:\\.|[^'\\])'", re.S)
INLINE_MOD = re.compile(r'((?:#\[[^\]]*\]\s*)*)(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*\{')


def code(path):
    """A file's code without comments (a doc link names an item, it does not
    import it), string literals and `#[cfg(doc)]` imports, as (module path suffix, text) pieces: the
    file's own code first, then each inline `mod x { ... }` under `[x]`; a
    `#[cfg(test)]` module is left out (tests are no dependencies)."""
    text = open(path).read()
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'(?m)(^|[^:"])//.*$', r'\1', text)
    text = LITERAL.sub('""', text)
    # An import for the docs only resolves doc links, like a comment's.
    text = re.sub(r'#\[cfg\(doc\)\]\s*use\b[^;]*;', ' ', text)
    return split_modules(text, [])


def split_modules(text, prefix):
    pieces = []
    own = []
    pos = 0
    while True:
        m = INLINE_MOD.search(text, pos)
        if m is None:
            own.append(text[pos:])
            break
        own.append(text[pos:m.start()])
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {'{': 1, '}': -1}.get(text[i], 0)
            i += 1
        if 'cfg(test)' not in re.sub(r'\s', '', m.group(1)):
            pieces += split_modules(text[m.end():i - 1], prefix + [m.group(2)])
        pos = i
    return [(prefix, ''.join(own))] + pieces


def use_paths(tree):
    """The paths of a use tree, flattened, each with the name it binds:
    `a::{b::C, d::{E, F as G}}` gives ([a, b, C], C), ([a, d, E], E),
    ([a, d, F], G); a glob ends in `*`; `self` in a group names the group's
    prefix."""
    tokens = TOKEN.findall(tree)
    pos = 0

    def parse(prefix):
        nonlocal pos
        out = []
        path = list(prefix)
        alias = None
        while pos < len(tokens):
            t = tokens[pos]
            if t == '{':
                pos += 1
                while pos < len(tokens) and tokens[pos] != '}':
                    out += parse(path)
                    if pos < len(tokens) and tokens[pos] == ',':
                        pos += 1
                pos += 1
                return out
            if t in (',', '}'):
                break
            pos += 1
            if t == '::':
                continue
            if t == 'as':
                alias = tokens[pos] if pos < len(tokens) else None
                pos += 1
                continue
            if t == 'self' and path:
                continue  # `x::{self, ...}`: `x` itself
            path.append(t)
        if path != list(prefix) or not out:
            out.append((path, alias or (path[-1] if path else None)))
        return out

    return [(p, name) for p, name in parse([]) if p]


class Crate:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self._reexports = {}

    def module_file(self, parts):
        """The file of module path `parts` (from the crate root): `a/b.rs` or
        `a/b/mod.rs` (`lib.rs` for the root), or None."""
        if not parts:
            return os.path.join(self.root, 'lib.rs')
        for p in (os.path.join(self.root, *parts) + '.rs',
                  os.path.join(self.root, *parts, 'mod.rs')):
            if os.path.exists(p):
                return p
        return None

    def absolute(self, path, mod):
        """`path` (a flattened use path or a path in code, in module `mod`)
        from the crate root, or None for a path outside the crate."""
        if not path:
            return None
        if path[0] == 'crate':
            return path[1:]
        if self.module_file(list(mod) + [path[0]]) is not None:
            return list(mod) + path  # `use child::X;` in the child's parent
        if path[0] in ('super', 'self'):
            base = list(mod)
            i = 0
            while i < len(path) and path[i] in ('super', 'self'):
                if path[i] == 'super':
                    if not base:
                        return None
                    base = base[:-1]
                i += 1
            return base + path[i:]
        return None

    def reexports(self, parts):
        """Names the module at `parts` re-exports (`pub use` of any
        visibility): name -> the absolute path it names; a glob re-export
        under the key `*` (a list of the globbed modules)."""
        key = tuple(parts)
        if key in self._reexports:
            return self._reexports[key]
        out = {'*': []}
        self._reexports[key] = out
        f = self.module_file(parts)
        if f is not None:
            for m in USE.finditer(''.join(t for sub, t in code(f) if not sub)):
                if m.group(1) is None:
                    continue
                for path, name in use_paths(m.group(2)):
                    full = self.absolute(path, parts)
                    if full is None:
                        continue
                    if full[-1] == '*':
                        out['*'].append(full[:-1])
                    else:
                        out.setdefault(name, full)
        return out

    def defines(self, parts, name):
        """Whether the module at `parts` defines item `name` itself."""
        f = self.module_file(parts)
        return f is not None and re.search(
            r'\b(?:struct|enum|union|trait|fn|type|const|static|mod|macro_rules!)\s+'
            + re.escape(name) + r'\b', code(f)[0][1]) is not None

    def node_of(self, parts, depth=0):
        """The node (a file's module path, `a/b`) that path `parts` names:
        the longest prefix that is a module, or the file that defines the
        item a module re-exports. None for the root alone or outside src/."""
        if depth > 16:
            return None
        best = None
        for i in range(len(parts), -1, -1):
            if self.module_file(parts[:i]) is not None:
                best = i
                break
        if best is None:
            return None
        mod = parts[:best]
        if best < len(parts):
            name = parts[best]
            exports = self.reexports(mod)
            target = exports.get(name)
            if target is not None and target != mod + [name]:
                found = self.node_of(target + parts[best + 1:], depth + 1)
                if found is not None:
                    return found
            if not self.defines(mod, name):
                for glob in exports['*']:
                    if self.defines(glob, name) or name in self.reexports(glob):
                        found = self.node_of(glob + parts[best:], depth + 1)
                        if found is not None:
                            return found
        return '/'.join(mod) if mod else None

    def edges(self):
        edges = {}
        for d, _, files in os.walk(self.root):
            for f in sorted(files):
                if not f.endswith('.rs'):
                    continue
                rel = os.path.relpath(d, self.root)
                here = [] if rel == '.' else rel.split(os.sep)
                if f == 'lib.rs' and not here:
                    continue
                mod = here if f == 'mod.rs' else here + [f[:-3]]
                src = '/'.join(mod)
                for sub, text in code(os.path.join(d, f)):
                    inner = mod + sub  # the module `super` and `self` start from
                    paths = []
                    for m in USE.finditer(text):
                        public = m.group(1) is not None
                        for path, _ in use_paths(m.group(2)):
                            # A module re-exporting its own child maps it: no edge.
                            if public and path[0] == 'self' and not sub:
                                continue
                            paths.append(path)
                    # Paths written in code, outside `use` declarations.
                    for m in INLINE.finditer(USE.sub(' ', text)):
                        paths.append(m.group(1).split('::'))
                    for path in paths:
                        full = self.absolute([p for p in path if p != '*'], inner)
                        if full is None:
                            continue
                        dst = self.node_of(full)
                        if dst and dst != src:
                            edges.setdefault(src, set()).add(dst)
        return edges


def cycles_of(edges):
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
    return sorted(cycles)


def check(root):
    crate = Crate(root)
    edges = crate.edges()
    cycles = cycles_of(edges)
    print(f"{sum(len(v) for v in edges.values())} edges between {len(edges)} files")
    for c in cycles:
        print("cycle:", " -> ".join(c + (c[0],)))
    if not cycles:
        print("no cycle")
    return 1 if cycles else 0


# Small crates with and without cycles: every way of importing the script
# must see (grouped, nested, `super::super`, a `mod.rs` that defines a type,
# a re-export, a path in code), and the imports that are no edges.
SELF_TESTS = [
    ("grouped import through a re-export", True, {
        'lib.rs': 'mod a;\n',
        'a/mod.rs': 'mod x;\nmod y;\npub use self::x::X;\npub use self::y::Y;\n',
        'a/x.rs': 'use super::{Y};\npub struct X(Y);\n',
        'a/y.rs': 'use super::X;\npub struct Y(Box<X>);\n',
    }),
    ("nested group from the crate root", True, {
        'lib.rs': 'mod a;\nmod b;\n',
        'a/mod.rs': 'mod x;\npub use self::x::X;\n',
        'a/x.rs': 'use crate::{b::{self, B}, c as _};\npub struct X(B);\n',
        'b.rs': 'use crate::a::{x::X};\npub struct B(Box<X>);\n',
    }),
    ("a mod.rs that defines a type", True, {
        'lib.rs': 'mod a;\n',
        'a/mod.rs': 'mod x;\nuse self::x::helper;\npub struct M;\nfn f() { helper() }\n',
        'a/x.rs': 'use super::M;\npub fn helper() { let _ = M; }\n',
    }),
    ("super::super and a path in code", True, {
        'lib.rs': 'mod a;\nmod b;\n',
        'a/mod.rs': 'mod deep;\n',
        'a/deep.rs': 'use super::super::b::B;\npub struct D(B);\n',
        'b.rs': 'pub struct B;\nfn f() { crate::a::deep::g() }\n',
    }),
    ("a glob re-export", True, {
        'lib.rs': 'mod a;\n',
        'a/mod.rs': 'mod x;\nmod y;\npub use self::x::*;\npub use self::y::*;\n',
        'a/x.rs': 'use super::{Y as Why};\npub struct X;\n',
        'a/y.rs': 'use super::X;\npub struct Y;\n',
    }),
    ("an inline module's super", True, {
        'lib.rs': 'mod a;\n',
        'a/mod.rs': 'mod x;\nmod y;\n',
        'a/x.rs': 'pub struct X;\nmod wire {\n    use super::super::y::Y;\n    fn f(_: Y) {}\n}\n',
        'a/y.rs': 'pub struct Y(super::x::X);\n',
    }),
    ("a layered module: no cycle", False, {
        'lib.rs': 'mod a;\npub use a::{X, Y};\n',
        'a/mod.rs': 'mod x;\nmod y;\npub use self::{x::X, y::Y};\n',
        # Each of these names `y` from `x`: as a doc link, in a comment, in a
        # string, in a macro's `$crate` path, in test modules (nested too).
        'a/x.rs': '//! See [`super::Y`] and [`Y`].\n#[cfg(doc)]\nuse super::Y;\npub struct X;\n'
                  'fn g() { let _ = \'{\'; /* crate::a::y::Y */ }\n'
                  'fn f() -> &\'static str { "use crate::a::y::Y; {" }\n'
                  'macro_rules! m { () => { $crate::a::Y } }\n'
                  'mod inner {\n    #[cfg(test)]\n    mod tests {\n        use crate::a::Y;\n    }\n}\n'
                  '#[cfg(test)]\nmod tests {\n    use super::super::Y;\n}\n',
        'a/y.rs': 'use super::{x::X};\n/// `crate::a::Y`\npub struct Y(X);\n',
    }),
]


def self_test():
    failed = 0
    for name, want, files in SELF_TESTS:
        with tempfile.TemporaryDirectory() as root:
            for path, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
                with open(os.path.join(root, path), 'w') as f:
                    f.write(text)
            cycles = cycles_of(Crate(root).edges())
        ok = bool(cycles) == want
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: "
              f"{', '.join(' -> '.join(c + (c[0],)) for c in cycles) or 'no cycle'}")
    flat = use_paths('super::{a::X, b::{Y, Z as W}, self}')
    assert flat == [(['super', 'a', 'X'], 'X'), (['super', 'b', 'Y'], 'Y'),
                    (['super', 'b', 'Z'], 'W'), (['super'], 'super')], flat
    print("self-test:", "failed" if failed else "passed")
    return 1 if failed else 0


if __name__ == '__main__':
    if sys.argv[1:] == ['--self-test']:
        sys.exit(self_test())
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(check(sys.argv[1]))
