"""The import graph of all of ``src/`` has no circle and no arrow that climbs a layer
(docs/architecture.md, "Layers"). Every import counts: module level, inside a
module-level ``try:``/``if``, and inside functions (the few that load an optional package
on demand still name their layer). ``src/diffmb_cli.py`` and ``src/diffmb_env.py`` are
read too."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import networkx as nx
import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: The layers bottom-up: a module imports only modules of its own layer or of a lower one.
#: A folder is a layer; ``system.py`` is one on its own. The console script's environment
#: (standard library only) and the package's numeric config are the floor; the console
#: script and the package's face (``diffmb/__init__.py``, which hands the public names on)
#: stand on top.
LAYERS = (
    ("diffmb_env", "diffmb._config", "diffmb._moved"),
    ("diffmb.math",),
    ("diffmb.tree",),
    ("diffmb.closures",),
    ("diffmb.system",),
    ("diffmb.simulation",),
    ("diffmb.origami",),
    ("diffmb.formats",),
    ("diffmb.formulations",),
    ("diffmb.scenarios",),
    ("diffmb.design",),
    ("diffmb.viewer",),
    ("diffmb.cli",),
    ("diffmb", "diffmb.__main__", "diffmb_cli"),
)


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict:
    return {_module(p): p for p in SRC.rglob("*.py") if ".egg-info" not in str(p)}


def import_graph() -> nx.DiGraph:
    """Module -> module it imports, for every import statement anywhere in a file."""
    g = nx.DiGraph()
    modules = _modules()
    for name, path in modules.items():
        g.add_node(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(max(node.level - 1, 0)):
                    base = base.rpartition(".")[0]
                target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
                for alias in node.names:                    # `from . import x` imports module x
                    sub = f"{target}.{alias.name}"
                    g.add_edge(name, sub if sub in modules else target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    g.add_edge(name, alias.name)
    g = g.subgraph(modules).copy()
    g.remove_edges_from(nx.selfloop_edges(g))
    return g


def layer(module: str) -> int:
    """The index in :data:`LAYERS` of the layer ``module`` belongs to (its longest prefix)."""
    best, where = -1, None
    for i, names in enumerate(LAYERS):
        for prefix in names:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, where = len(prefix), i
    if where is None:
        raise AssertionError(f"{module} is in no layer: add its folder to LAYERS")
    return where


def test_every_import_is_seen():
    """The graph reads imports a top-level-only reader would miss: the one inside
    ``_config``'s module-level ``try:`` and those inside functions."""
    g = import_graph()
    assert g.number_of_edges() > 300
    assert g.has_edge("diffmb._config", "diffmb_env")                    # inside a try:
    assert g.has_edge("diffmb_cli", "diffmb.cli")                         # inside main()
    assert g.has_edge("diffmb.design.distributed", "diffmb.design.batch")


def test_no_import_circles_anywhere_in_src():
    assert list(nx.simple_cycles(import_graph())) == []


def test_every_import_goes_down_the_layers():
    g = import_graph()
    upward = sorted((a, b) for a, b in g.edges if layer(b) > layer(a))
    assert upward == []


def test_the_layers_are_the_folders():
    """``ls src/diffmb`` shows the layers: one folder each (``system.py`` alone), and
    nothing at the top but the package's face, ``__main__``, its config and the moved-name
    table."""
    top = SRC / "diffmb"
    files = sorted(p.name for p in top.glob("*.py"))
    folders = sorted(p.name for p in top.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert files == ["__init__.py", "__main__.py", "_config.py", "_moved.py", "system.py"]
    named = {n.split(".")[1] for names in LAYERS for n in names if n.count(".") == 1 and not n.startswith("diffmb._")}
    assert set(folders) == named - {"system", "__main__"}
    for name in _modules():
        layer(name)   # every module of src/ is in a layer


def test_the_floor_imports_nothing_of_the_package():
    """The environment helpers are standard library only (the console script sets the
    environment with them before JAX loads), and the numeric config imports only them."""
    g = import_graph()
    assert list(g.successors("diffmb_env")) == []
    assert list(g.successors("diffmb._config")) == ["diffmb_env"]
    text = (SRC / "diffmb_env.py").read_text()
    imported = {a.name.split(".")[0] for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Import) for a in n.names}
    assert imported <= {"os", "sys"}


@pytest.mark.parametrize("old, new", [("diffmb.fit", "diffmb.design.fit"),
                                      ("diffmb.integrate", "diffmb.simulation.integrate"),
                                      ("diffmb.kinematics", "diffmb.tree.kinematics"),
                                      ("diffmb.origami.fold", "diffmb.formats.fold")])
def test_a_moved_module_imports_under_its_old_name_with_one_warning(old, new):
    """``import diffmb.fit`` (and every name in ``diffmb._moved.MOVED``) works for one
    release: the same module object, one DeprecationWarning naming the new path."""
    import importlib
    import sys

    from diffmb import _moved

    sys.modules.pop(old, None)
    _moved._warned.discard(old)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
        again = importlib.import_module(old)
    assert module is again is importlib.import_module(new)
    said = [str(w.message) for w in seen if issubclass(w.category, DeprecationWarning)]
    assert len(said) == 1 and new in said[0]


def test_every_moved_name_has_its_new_module():
    from diffmb import _moved

    modules = _modules()
    for old, new in _moved.MOVED.items():
        assert new in modules and old not in modules, old
