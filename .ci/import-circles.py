#!/usr/bin/env python3
# The host crate's import graph, from `use` lines and `crate::`/`super::` paths
# (a child naming its parent module is not counted): prints every circle
# among src/ files, and whether room/compose.rs imports room/up.rs.
# Run from the repository: python3 .ci/import-circles.py
import os, re, sys
root = 'src'
files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            p = os.path.join(d, f)
            mod = p[len(root)+1:-3].replace('/mod', '').replace('/', '::')
            if mod in ('lib', 'main'): mod = ''
            files[mod] = open(p).read()
mods = set(files)
def resolve(cur, path):
    parts = path.split('::')
    base = cur.split('::') if cur else []
    # a file's own module path; for mod.rs files cur is the folder module
    if parts[0] == 'crate': base, parts = [], parts[1:]
    elif parts[0] == 'super':
        base = base[:-1]; parts = parts[1:]
        while parts and parts[0] == 'super': base = base[:-1]; parts = parts[1:]
    elif parts[0] == 'self': parts = parts[1:]
    else: return None
    best = None
    for i in range(len(parts), 0, -1):
        cand = '::'.join(base + parts[:i])
        if cand in mods: best = cand; break
    return best
edges = {m: set() for m in mods}
for m, text in files.items():
    text = re.sub(r'#\[cfg\(test\)\]\s*mod tests \{.*', '', text, flags=re.S)
    for path in re.findall(r'\b((?:crate|super|self)(?:::\w+)+)', text):
        t = resolve(m, path)
        if t is not None and t != m and not m.startswith(t + '::') and not (t == '' ):
            edges[m].add(t)
# strongly connected components (Tarjan)
idx, low, on, st, out, n = {}, {}, set(), [], [], [0]
def sc(v):
    idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: out.append(sorted(comp))
sys.setrecursionlimit(10000)
for v in sorted(mods):
    if v not in idx: sc(v)
for c in out: print('circle:', ' <-> '.join(c))
print(len(out), 'circles among', len(mods), 'host files')
print('compose imports up:', 'up' in ' '.join(sorted(edges['room::compose'])).split() or 'room::up' in edges['room::compose'])
sys.exit(1 if out else 0)
