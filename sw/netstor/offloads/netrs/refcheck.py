"""Independent references for the NetRS tests: hop distances by breadth-first search on the
topology's adjacency (not through the topology's own path helpers)."""
from collections import deque


def bfs(topo, src):
    d = {src: 0}
    q = deque([src])
    while q:
        u = q.popleft()
        for v in topo.neighbors(u):
            if v not in d:
                d[v] = d[u] + 1
                q.append(v)
    return d
