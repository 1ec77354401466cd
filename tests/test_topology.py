"""Spanning trees and cut edges of body/hinge graphs (Fulton & Schaub section 3)."""

import networkx as nx
import pytest

from diffmb.origami.topology import Topology, cycle_rank, grid_graph, spanning_tree


def _check_tree(topo: Topology, edges):
    """Structural invariants every result must satisfy."""
    n = len(topo.nodes)
    assert topo.parents[0] == -1 and all(0 <= p < i for i, p in enumerate(topo.parents) if i)
    assert len(topo.tree_edges) == n - 1
    for i, p in enumerate(topo.parents):
        assert topo.levels[i] == (0 if p < 0 else topo.levels[p] + 1)
        assert all(topo.parents[c] == i for c in topo.children[i])
    given = {frozenset(e[:2]) for e in edges}
    tree = {frozenset(e) for e in topo.tree_edges}
    cut = {frozenset(e) for e in topo.cut_edges}
    assert tree | cut == given and not (tree & cut)
    assert nx.is_tree(nx.Graph(list(topo.tree_edges)))


def test_paper_grid_eq20_bfs_recovers_chains():
    """Hub + 4 chains of 5 panels: n_p = (n_h - 1)(n_b/n_h - 1) = 12 cuts, all cross-chain."""
    rows, cols = 4, 5
    edges = grid_graph(rows, cols, hub="r")
    topo = spanning_tree(edges, "r")
    _check_tree(topo, edges)
    n_b, n_h = rows * cols, rows
    assert topo.n_loops == (n_h - 1) * (n_b // n_h - 1) == cycle_rank(edges) == 12
    # every chain hangs from the hub in order: p_r_c's parent is p_r_{c-1}
    for r in range(rows):
        assert topo.path_to_root(f"p_{r}_{cols - 1}") == tuple(f"p_{r}_{c}" for c in reversed(range(cols))) + ("r",)
    # cut edges join neighbouring chains (eq. 19's constraint node pairs) ...
    for a, b in topo.cut_edges:
        ra, ca = map(int, a.split("_")[1:])
        rb, cb = map(int, b.split("_")[1:])
        assert ca == cb and abs(ra - rb) == 1
    # ... and n_c = n_b - n_h panels carry a constraint node (eq. 21)
    assert len({n for e in topo.cut_edges for n in e}) == n_b - n_h
    # BFS levels: hub, then one level per panel column
    groups = topo.level_groups()
    assert len(groups) == cols + 1 and all(len(g) == rows for g in groups[1:])


def test_plain_grid_loop_count_and_dfs():
    edges = grid_graph(3, 4)
    assert cycle_rank(edges) == (3 - 1) * (4 - 1)
    for method in ("bfs", "dfs"):
        topo = spanning_tree(edges, "p_0_0", method=method)
        _check_tree(topo, edges)
        assert topo.n_loops == 6
    bfs = spanning_tree(edges, "p_0_0", method="bfs")
    dfs = spanning_tree(edges, "p_0_0", method="dfs")
    assert max(bfs.levels) == 2 + 3  # graph distance to the far corner
    assert max(dfs.levels) > max(bfs.levels)


def test_cut_edges_keep_user_orientation_and_data():
    edges = [("a", "b", {"k": 1.0}), ("b", "c"), ("c", "a", {"k": 2.0})]
    topo = spanning_tree(edges, "a")
    _check_tree(topo, edges)
    assert topo.tree_edges == (("a", "b"), ("a", "c"))
    assert topo.cut_edges == (("b", "c"),)
    assert topo.edge_data[frozenset(("c", "a"))] == {"k": 2.0}
    assert topo.cycles() == (("b", "a", "c"),)


def test_forced_cut_and_networkx_input():
    G = nx.cycle_graph(["a", "b", "c", "d"])
    topo = spanning_tree(G, "a", cut=[("c", "d")])
    assert topo.cut_edges == (("c", "d"),)
    assert topo.path_to_root("d") == ("d", "a")
    assert topo.path_to_root("c") == ("c", "b", "a")
    with pytest.raises(ValueError, match=r"disconnected after the requested cuts.*\['c'\]"):
        spanning_tree(G, "a", cut=[("c", "d"), ("b", "c")])
    with pytest.raises(ValueError, match="cut edge .*'a', 'c'.* is not an edge"):
        spanning_tree(G, "a", cut=[("a", "c")])


def test_tree_input_has_no_cuts():
    edges = [("root", "x"), ("root", "y"), ("x", "z")]
    topo = spanning_tree(edges, "root")
    assert topo.cut_edges == () and topo.cycles() == ()
    assert topo.nodes == ("root", "x", "y", "z")
    assert topo.level_groups() == ((0,), (1, 2), (3,))


@pytest.mark.parametrize(
    "edges,root,match",
    [
        ([("a", "b"), ("c", "d")], "a", r"disconnected.*\['c', 'd'\]"),
        ([("a", "b")], "q", "unknown root 'q'"),
        ([("a", "b"), ("b", "b")], "a", "self-loop on node 'b'"),
        ([("a", "b"), ("b", "a")], "a", "duplicate edge between 'b' and 'a'"),
        ([("a",)], "a", "edge 0: expected"),
    ],
)
def test_bad_graphs(edges, root, match):
    with pytest.raises(ValueError, match=match):
        spanning_tree(edges, root)


def test_bad_method_and_isolated_node():
    with pytest.raises(ValueError, match="method"):
        spanning_tree([("a", "b")], "a", method="bfsx")
    G = nx.Graph([("a", "b")])
    G.add_node("lonely")
    with pytest.raises(ValueError, match=r"\['lonely'\]"):
        spanning_tree(G, "a")
