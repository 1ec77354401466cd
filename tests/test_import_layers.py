"""The package's import graph has no cycles, and the library never imports upward into
the command line (docs/architecture.md, "The data flow"). Module-level imports only: the
few imports inside functions load optional packages (matplotlib, MuJoCo) on demand."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

SRC = Path(__file__).resolve().parents[1] / "src" / "diffmb"


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> nx.DiGraph:
    g = nx.DiGraph()
    modules = {_module(p): p for p in SRC.rglob("*.py")}
    for name, path in modules.items():
        g.add_node(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.parse(path.read_text()).body:          # module level only
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
    return g.subgraph(modules).copy()


def test_no_import_cycles():
    g = import_graph()
    assert g.number_of_edges() > 100 and list(nx.simple_cycles(g)) == []


def test_library_does_not_import_the_cli():
    g = import_graph()
    upward = [(a, b) for a, b in g.edges if b.startswith("diffmb.cli") and not a.startswith("diffmb.cli")
              and a != "diffmb.__main__"]
    assert upward == []


#: Packages above the dynamics core: the core (the top-level modules, ``formulations`` and
#: ``origami``) never imports them. ``plot`` and ``viewer`` draw runs and fit results, so
#: they sit above ``design`` too.
ABOVE_THE_CORE = ("diffmb.design", "diffmb.formats", "diffmb.scenarios", "diffmb.viewer", "diffmb.cli")


def test_the_core_never_imports_design_tools_or_file_formats():
    g = import_graph()
    core = [n for n in g if n.startswith("diffmb.") and not n.startswith(ABOVE_THE_CORE)
            and n not in ("diffmb.plot", "diffmb.__main__")]
    upward = [(a, b) for a, b in g.edges if a in core and b.startswith(("diffmb.design", "diffmb.formats"))]
    assert "diffmb.system" in core and "diffmb.formulations.udwadia_kalaba.reconfig" in core
    assert upward == []


def test_moved_modules_are_reached_through_the_package():
    """``from diffmb import fit`` (and the other modules that moved into ``design/``,
    ``formats/``, ``origami/`` and ``udwadia_kalaba/``) keeps working."""
    import diffmb

    for name, target in diffmb._MOVED.items():
        assert getattr(diffmb, name).__name__ == target
        assert (SRC / (target.removeprefix("diffmb.").replace(".", "/") + ".py")).is_file()
        assert not (SRC / f"{name}.py").exists()
