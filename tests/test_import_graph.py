"""The import graph of sf/, read from the code: no module imports one of a higher layer, and no modules import each
other, directly or round a longer circle. Every import counts, also one inside a function or under TYPE_CHECKING.

The layers, lowest first (docs/architecture.md, "Packages and layers"); a module may import its own layer and those
below it:
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

LAYERS: tuple[tuple[str, ...], ...] = (
    ("sf.utils",),  # Timing, errors, roles and names, process settings: what every layer may use
    ("sf.profiling",),  # what runs inside a training: backends, ranges, timeline, resources, work/wait accounting
    ("sf.cfg",),  # flags, YAML presets, validation
    ("sf.envs",),  # env registry, env families, gymnasium adapter
    ("sf.algo",),  # losses, GAE and V-trace, running statistics
    ("sf.model",),  # networks
    ("sf.experiment",),  # the experiment folder: config and summary files, lock, checkpoints, durable writes, resume
    ("sf.analysis",),  # reading a run's files: run data, bottleneck model, advice, report, compare, charts
    ("sf.supervision",),  # process start and links, supervisor, guard, orphans, /dev/shm names, healing
    ("sf.runtime",),  # the components, the typed messages, the event loop, buffers, policy store
    ("sf.runner",),  # a run: build, parallel and serial placement, progress, outputs, observers
    ("sf.distributed",),  # the Ray backend
    ("sf.pbt",),  # population-based training: an observer steering the learners through the runner's hooks
    ("sf.breakdown",),  # the cross-stack breakdown (runs a training in-process)
    ("sf.bench", "sf.chaos"),  # whole-run benchmarks and the auto-tuner; the fault-injection matrix
    ("sf.huggingface",),  # staging a policy for the Hub, pushing it, loading it back
    ("sf.train", "sf.enjoy", "sf.export_onnx", "sf.profile", "sf.benchmark", "sf"),  # entry points
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, package: str) -> set[str]:
    """Every sf and sf_examples name the source imports, anywhere in it; `from a import b` gives `a` and `a.b` (b may
    be a module). `package` resolves relative imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in ("sf", "sf_examples")}


def imported(path: Path, module: str) -> set[str]:
    return imports_of(path.read_text(), module if path.name == "__init__.py" else module.rpartition(".")[0])


def graph(package: str = "sf") -> dict[str, set[str]]:
    paths = {module_name(p): p for p in (ROOT / package).rglob("*.py")}
    return {module: {m for m in imported(path, module) if m in paths and m != module} for module, path in paths.items()}


def layer_of(module: str) -> int:
    """The layer of the longest prefix that names the module or a package holding it."""
    matches = [
        (len(prefix), index)
        for index, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    return max(matches)[1]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(edges[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer():
    assert all(layer_of(module) is not None for module in graph())


def test_no_import_runs_up_the_layers():
    edges = graph()
    upward = sorted(
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in edges.items()
        for target in targets
        if layer_of(target) > layer_of(module) and target != "sf"  # the bare namespace package holds nothing
    )
    assert upward == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_no_import_cycles_in_the_examples():
    assert cycles(graph("sf_examples")) == []


def test_sf_never_imports_the_examples():
    """The examples use sf; sf names their modules only as strings, imported when a family is used."""
    found = {m for path in (ROOT / "sf").rglob("*.py") for m in imported(path, module_name(path))}
    assert sorted(m for m in found if m.startswith("sf_examples")) == []


def test_imports_in_functions_and_type_checking_blocks_count():
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from sf.analysis.report import Report\n"
        "def f():\n"
        "    from . import charts\n"
        "    import sf.utils.timing\n"
    )
    assert imports_of(source, "sf.analysis") == {
        "sf.analysis.report",
        "sf.analysis.report.Report",
        "sf.analysis",
        "sf.analysis.charts",
        "sf.utils.timing",
    }


def test_a_circle_and_an_upward_import_are_found():
    edges = {
        "sf.utils.a": {"sf.runtime.b"},
        "sf.runtime.b": {"sf.cfg.c"},
        "sf.cfg.c": {"sf.utils.a"},
        "sf.train": set(),
    }
    assert cycles(edges) == [["sf.cfg.c", "sf.runtime.b", "sf.utils.a"]]
    assert layer_of("sf.utils.a") < layer_of("sf.cfg.c") < layer_of("sf.runtime.b") < layer_of("sf.train")
