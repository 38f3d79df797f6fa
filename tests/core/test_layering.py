"""The packages import downward only, and no module imports itself back through others.

Every import statement of ``h2m2sim`` and ``dram_models`` is read from the source (those
inside function bodies too), and so is every ``importlib.import_module`` of a literal
name, so a layer cannot hide an upward import in a function or behind a string. The
package root sits on top: a module that takes a name (its version, say) from ``h2m2sim``
itself imports upward.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Layers from the bottom up. A module may import its own layer's modules and those of
#: lower layers. Layers on one line are peers: they may not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("dram_models",),
    ("h2m2sim._version",),            # written by setuptools-scm at build time
    ("h2m2sim.version",),             # a leaf: every layer may stamp its results
    ("h2m2sim.errors",),
    ("h2m2sim.registry", "h2m2sim.quantities", "h2m2sim.outputs"),
    ("h2m2sim.parallel", "h2m2sim.store"),
    ("h2m2sim.cache", "h2m2sim.trace_events"),
    ("h2m2sim.model", "h2m2sim.predictors"),
    ("h2m2sim.system",),
    ("h2m2sim.memory",),
    ("h2m2sim.mapping",),
    ("h2m2sim.npu",),
    ("h2m2sim.compute",),
    ("h2m2sim.allocators",),
    ("h2m2sim.decode",),
    ("h2m2sim.serving",),
    ("h2m2sim.config",),
    ("h2m2sim.runner", "h2m2sim.catalog"),
    ("h2m2sim.sweeps", "h2m2sim.plotting", "h2m2sim.timeline_plot"),
    ("h2m2sim.exploration",),         # searches run designs on the sweeps' backends
    ("h2m2sim.api",),                 # the Python interface (h2m2sim.run, ...)
    ("h2m2sim.cli",),
    ("h2m2sim.__main__",),
    ("h2m2sim",),                     # the package root offers the api, loaded lazily
)
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in ("h2m2sim", "dram_models"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()


def _layer(module: str) -> str:
    """The layer a module belongs to: the longest LAYERS name that prefixes it."""
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in RANK:
            return ".".join(parts[:k])
    raise AssertionError(f"{module} is in no layer; add it to LAYERS")


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import of a project module."""
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # ``from pkg import submodule`` imports the submodule; other names come
            # from the package itself
            subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in MODULES]
            targets = subs + ([mod] if len(subs) < len(node.names) else [])
        elif _is_import_module(node):
            targets = [node.args[0].value]
        else:
            continue
        out += [(t, node.lineno) for t in targets if t.split(".")[0] in ("h2m2sim",
                                                                          "dram_models")]
    return out


def _is_import_module(node: ast.AST) -> bool:
    """``importlib.import_module("literal")``: an import spelled as a call."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module" and len(node.args) >= 1
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))


EDGES = [(m, t, line) for m, p in MODULES.items() for t, line in _imports(m, p)]


def test_every_module_has_a_layer():
    for m in MODULES:
        _layer(m)


def test_imports_go_downward():
    upward = []
    for m, t, line in EDGES:
        lm, lt = _layer(m), _layer(t)
        if lm != lt and RANK[lt] >= RANK[lm]:
            upward.append(f"{MODULES[m].relative_to(ROOT)}:{line} imports {t} "
                          f"({lt} is not below {lm})")
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    graph = nx.DiGraph()
    for m, t, _ in EDGES:
        # an import of a package runs its __init__; of a name in it, the module
        target = t if t in MODULES else t.rsplit(".", 1)[0]
        if target != m:
            graph.add_edge(m, target)
    cycles = [c for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, cycles


def test_dram_models_stands_alone():
    assert not [e for e in EDGES if e[0].startswith("dram_models")
                and e[1].startswith("h2m2sim")]


@pytest.mark.parametrize("pkg", ["h2m2sim", "dram_models"])
def test_the_walker_sees_imports(pkg):
    """A check of the checker: it finds the imports it must judge."""
    assert sum(1 for m, _, _ in EDGES if m.startswith(pkg)) > 30


def test_the_walker_sees_string_imports_and_names_from_the_root():
    """The two ways round the layering that once hid a cycle: a lower module taking a
    name from the package root, and an import spelled ``importlib.import_module``."""
    src = ("import importlib\nfrom h2m2sim import __version__\n"
           "def f():\n    return importlib.import_module('h2m2sim.api')\n")
    path = ROOT / "build" / "probe_layering.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(src)
    try:
        found = {t for t, _ in _imports("h2m2sim.store", path)}
    finally:
        path.unlink()
    assert found == {"h2m2sim", "h2m2sim.api"}
    assert RANK[_layer("h2m2sim")] > RANK[_layer("h2m2sim.store")]
    assert RANK[_layer("h2m2sim.api")] > RANK[_layer("h2m2sim.store")]
