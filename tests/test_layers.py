"""The package's layers, read from its imports: no import cycle, and no module imports a
layer above its own. The layers, bottom to top (docs/architecture.md draws them):

    vocabulary   ir, kinds, errors, version, intervals, tpu_facts, records (and lower.registry, engines.budget)
    model        the builder API (model), passes/ (IR -> IR), result
    frontends    lower/, frontends/, jax_compat (jaxpr -> IR; never the semantics)
    semantics    semantics/ (IR -> transition system; never JAX)
    engines      engines/, parametric/ (consume the semantics; never a frontend or a report)
    reports      report/ (render Results; never the semantics)
    run          run/ (check a protocol, a file, a sweep of them; declared verdicts)
    entry        cli/, api, testing, the package itself

Every import counts, also one inside a function (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
import functools
import os

import networkx as nx
import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "semcheck")

LAYERS = [
    ("vocabulary", ("semcheck.ir", "semcheck.kinds", "semcheck.errors", "semcheck.version", "semcheck.intervals",
                    "semcheck.tpu_facts", "semcheck.records", "semcheck.lower.registry", "semcheck.engines.budget",
                    "semcheck.parsing")),
    ("model", ("semcheck.model", "semcheck.passes", "semcheck.result")),
    ("frontends", ("semcheck.lower", "semcheck.frontends", "semcheck.jax_compat")),
    ("semantics", ("semcheck.semantics",)),
    ("engines", ("semcheck.engines", "semcheck.parametric")),
    ("reports", ("semcheck.report",)),
    ("run", ("semcheck.run", "semcheck.parametric.family", "semcheck.parametric.command")),
    ("entry", ("semcheck.cli", "semcheck.api", "semcheck.testing", "semcheck.__main__", "semcheck")),
]

# The one place a frontend consults the semantics: evaluating the kernel's data needs to know
# when a remote copy's data is visible, and that is synchronization, which only semantics/
# defines; lower/schedule.py runs it in one canonical schedule rather than re-implement it
# (docs/data-evaluation.md).
ALLOWED = {
    ("semcheck.lower.schedule", "semcheck.semantics"),
}

# Layers that may not see each other although neither is above the other.
APART = {("frontends", "semantics"), ("semantics", "frontends"), ("frontends", "engines"),
         ("reports", "engines"), ("reports", "frontends")}


@functools.cache
def _modules() -> dict[str, str]:
    found = {}
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                module = os.path.relpath(path[:-3], os.path.dirname(PACKAGE)).replace(os.sep, ".")
                found[module.removesuffix(".__init__")] = path
    return found


@functools.cache
def _import_graph() -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    for module, path in modules.items():
        graph.add_node(module)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("semcheck"):
                # `from semcheck import ir` imports the submodule, not the package's __init__.
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "semcheck"]
            else:
                continue
            for target in targets:
                if target in modules and target != module:
                    graph.add_edge(module, target)
    return graph


def layer_of(module: str) -> int:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            # The package itself is the entry point; its modules are not in its layer.
            if module == prefix or (prefix != "semcheck" and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS in {__file__}"
    return best[0]


def test_no_import_cycle():
    graph = _import_graph().copy()
    graph.remove_edges_from(ALLOWED)  # lazy, and named above with their reasons
    # A package's __init__ importing its own submodules is how a package re-exports; only
    # a cycle through other modules is a cycle.
    cycles = [c for c in nx.simple_cycles(graph) if len(c) > 1]
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c + [c[0]]) for c in cycles[:10])


@pytest.mark.parametrize("module", sorted(_modules()))
def test_imports_go_down(module):
    graph = _import_graph()
    mine = layer_of(module)
    bad = []
    for target in graph.successors(module):
        theirs = layer_of(target)
        pair = (LAYERS[mine][0], LAYERS[theirs][0])
        if (theirs > mine or pair in APART) and (module, target) not in ALLOWED:
            bad.append(f"{target} ({pair[1]})")
    assert not bad, f"{module} ({LAYERS[mine][0]}) imports from a layer it must not see: {', '.join(bad)}"
