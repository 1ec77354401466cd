"""Body/hinge graphs with loops: root, spanning tree, cut edges, depth levels.

Fulton & Schaub, "origami-folded spacecraft ABFD", section 3: rigid bodies are nodes and
hinges (fold lines) are edges (3.1); a closed-chain pattern is cut into a tree topology
whose cut edges become loop-closure constraints enforced on the tree dynamics (3.2, the
dashed lines of Figs. 3-5). A connected graph with ``|V|`` nodes and ``|E|`` edges needs
``|E| - |V| + 1`` cuts (its cycle rank); for the paper's grid of ``n_h`` chains of
``n_b / n_h`` bodies hanging from a root this is eq. (20),
``n_p = (n_h - 1)(n_b / n_h - 1)`` — see :func:`grid_graph`.

A breadth-first tree keeps every body at its graph distance from the root, giving the
shallowest tree and the widest depth levels (good for level-parallel sweeps);
depth-first gives long serial chains.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import networkx as nx


@dataclass(frozen=True)
class Topology:
    """A rooted spanning tree of a body/hinge graph plus its cut (closure) edges.

    ``nodes``: node names in topological order (root first; parents before children).
    ``parents``: index into ``nodes`` of each node's tree parent, ``-1`` for the root.
    ``levels``: depth of each node (root 0). ``children``: per node, the indices of its
    tree children. ``tree_edges``: ``(parent, child)`` for every non-root node, in node
    order. ``cut_edges``: the edges left out of the tree, as the user gave them
    (orientation kept): the constraint node pairs ``Gamma`` of eq. (19).
    ``edge_data``: user data of each edge, keyed by ``frozenset((a, b))``.
    """

    nodes: tuple
    parents: tuple
    levels: tuple
    children: tuple
    tree_edges: tuple
    cut_edges: tuple
    edge_data: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def root(self):
        return self.nodes[0]

    @property
    def n_loops(self) -> int:
        """Number of independent loops = ``|E| - |V| + 1`` = number of cut edges."""
        return len(self.cut_edges)

    def index(self, name) -> int:
        try:
            return self.nodes.index(name)
        except ValueError:
            raise ValueError(f"unknown node {name!r}") from None

    def level_groups(self) -> tuple:
        """Node indices grouped by depth: ``((root,), (depth-1 nodes...), ...)``."""
        depth = max(self.levels) + 1
        return tuple(tuple(i for i, l in enumerate(self.levels) if l == d) for d in range(depth))

    def path_to_root(self, name) -> tuple:
        """Node names from ``name`` up to the root (a chain ``kappa`` of eq. 18, tip to base)."""
        i, out = self.index(name), []
        while i >= 0:
            out.append(self.nodes[i])
            i = self.parents[i]
        return tuple(out)

    def cycles(self) -> tuple:
        """The fundamental cycle of every cut edge, as a tuple of node names.

        For a cut edge ``(a, b)`` the loop runs from ``a`` up the tree to the common
        ancestor and down to ``b``; the cut edge closes it.
        """
        out = []
        for a, b in self.cut_edges:
            pa, pb = self.path_to_root(a), self.path_to_root(b)
            common = set(pa) & set(pb)
            up = [n for n in pa if n not in common]
            down = [n for n in pb if n not in common]
            lca = next(n for n in pa if n in common)
            out.append(tuple(up) + (lca,) + tuple(reversed(down)))
        return tuple(out)


def _edge_list(edges):
    """``[(a, b, data)]`` from tuples or a networkx graph; rejects self-loops and duplicates."""
    if isinstance(edges, nx.Graph):
        if edges.is_multigraph():
            raise ValueError("multigraphs are not supported: two hinges between the same bodies")
        items = [(a, b, dict(d)) for a, b, d in edges.edges(data=True)]
        isolated = [n for n in edges.nodes if edges.degree(n) == 0]
    else:
        items, isolated = [], []
        for k, e in enumerate(edges):
            if not isinstance(e, (tuple, list)) or len(e) not in (2, 3):
                raise ValueError(f"edge {k}: expected (a, b) or (a, b, data), got {e!r}")
            items.append((e[0], e[1], dict(e[2]) if len(e) == 3 else {}))
    seen = set()
    for a, b, _ in items:
        if a == b:
            raise ValueError(f"self-loop on node {a!r}: a body cannot hinge to itself")
        key = frozenset((a, b))
        if key in seen:
            raise ValueError(f"duplicate edge between {a!r} and {b!r}")
        seen.add(key)
    return items, isolated


def spanning_tree(edges, root, *, method: str = "bfs", cut=()) -> Topology:
    """Root a body/hinge graph at ``root`` and cut it into a tree (Fulton & Schaub 3.1-3.2).

    ``edges``: ``(a, b)`` or ``(a, b, data)`` tuples, or a networkx ``Graph``.
    ``method``: ``"bfs"`` (shallowest tree, widest levels) or ``"dfs"`` (longest chains).
    Neighbours are visited in edge order, so the result is deterministic.
    ``cut``: edges the user wants cut (e.g. the dashed hinges of Fig. 3); the remaining
    graph must still connect every node. Returns a :class:`Topology`.
    """
    if method not in ("bfs", "dfs"):
        raise ValueError(f"method must be 'bfs' or 'dfs', got {method!r}")
    items, isolated = _edge_list(edges)
    G = nx.Graph()
    for n in isolated:
        G.add_node(n)
    for a, b, d in items:
        G.add_edge(a, b)
    if root not in G:
        raise ValueError(f"unknown root {root!r}; nodes are {list(G.nodes)}")
    forced = set()
    for e in cut:
        key = frozenset(e[:2])
        if len(key) != 2 or not G.has_edge(*e[:2]):
            raise ValueError(f"cut edge {tuple(e[:2])!r} is not an edge of the graph")
        forced.add(key)
    parent = _search(G, root, method, forced)
    missing = [n for n in G.nodes if n not in parent]
    if missing:
        why = " after the requested cuts" if forced else ""
        raise ValueError(f"graph is disconnected{why}: nodes {missing} are unreachable from root {root!r}")

    order = list(parent)
    index = {n: i for i, n in enumerate(order)}
    parents = tuple(-1 if parent[n] is None else index[parent[n]] for n in order)
    levels = []
    for p in parents:
        levels.append(0 if p < 0 else levels[p] + 1)
    children = tuple(tuple(i for i, p in enumerate(parents) if p == k) for k in range(len(order)))
    tree_keys = {frozenset((n, parent[n])) for n in order if parent[n] is not None}
    return Topology(
        nodes=tuple(order),
        parents=parents,
        levels=tuple(levels),
        children=children,
        tree_edges=tuple((parent[n], n) for n in order if parent[n] is not None),
        cut_edges=tuple((a, b) for a, b, _ in items if frozenset((a, b)) not in tree_keys),
        edge_data={frozenset((a, b)): d for a, b, d in items},
    )


def _search(G, root, method, forced):
    """``{node: parent}`` in discovery order (a topological order of the tree)."""
    parent = {root: None}
    if method == "bfs":
        queue = deque([root])
        while queue:
            u = queue.popleft()
            for w in G.neighbors(u):
                if w not in parent and frozenset((u, w)) not in forced:
                    parent[w] = u
                    queue.append(w)
        return parent
    stack = [(root, iter(G.neighbors(root)))]
    while stack:
        u, it = stack[-1]
        for w in it:
            if w not in parent and frozenset((u, w)) not in forced:
                parent[w] = u
                stack.append((w, iter(G.neighbors(w))))
                break
        else:
            stack.pop()
    return parent


def cycle_rank(edges) -> int:
    """Independent loops ``|E| - |V| + c`` (``c`` connected components) of a graph."""
    items, isolated = _edge_list(edges)
    G = nx.Graph()
    G.add_nodes_from(isolated)
    G.add_edges_from((a, b) for a, b, _ in items)
    return G.number_of_edges() - G.number_of_nodes() + nx.number_connected_components(G)


def grid_graph(rows: int, cols: int, *, hub: str | None = None) -> list:
    """Hinge edges of a ``rows x cols`` panel grid (Fulton & Schaub Fig. 3 style).

    Panels are named ``"p_r_c"``; hinges join 4-neighbours, listed row chains first, then
    the cross-chain hinges. Without a hub the grid has ``(rows - 1)(cols - 1)`` loops.
    With ``hub`` (the spacecraft bus, the root ``r`` of Figs. 3-5) each row is a chain
    ``p_r_0 ... p_r_{cols-1}`` spawned by the hub at its base panel, and neighbouring
    chains are hinged at every other panel: ``n_h = rows`` chains of ``cols`` bodies with
    ``(rows - 1)(cols - 1)`` loops, eq. (20).
    """
    if rows < 1 or cols < 1:
        raise ValueError(f"grid_graph: rows and cols must be >= 1, got {rows}, {cols}")
    p = lambda r, c: f"p_{r}_{c}"
    edges = []
    if hub is not None:
        edges += [(hub, p(r, 0)) for r in range(rows)]
    edges += [(p(r, c), p(r, c + 1)) for r in range(rows) for c in range(cols - 1)]
    first = 1 if hub is not None else 0
    edges += [(p(r, c), p(r + 1, c)) for r in range(rows - 1) for c in range(first, cols)]
    return edges
