"""``regency._api`` is layered: module-level imports flow one way (ADR 0015).

Each module of the package has a layer; a module imports modules of its own layer or below,
never above, and the imports form no cycle. Imports under ``if TYPE_CHECKING:`` are for
annotations only (they never run) and may point anywhere. Imports inside functions are gone,
except the few listed in ``LAZY`` with the reason for each.
"""

from __future__ import annotations

import ast
from pathlib import Path

API = Path(__file__).resolve().parents[2] / "src" / "regency" / "_api"  # read, not imported

#: The layers, lowest first; a module may import only from its own layer and those before.
LAYERS: list[tuple[str, set[str]]] = [
    ("base: records, values, replies, fail fast, SIGTERM, futures, hooks before the mailbox",
     {"_actor", "_value_mesh", "_replies", "_sealed", "_failfast", "_terminate", "_supervise",
      "_future", "_intercept", "_bootstrap_command", "_not_a_mesh", "_ids", "_mast", "_attach",
      "_returns_future", "_incarnation", "_mailbox",
      "_worker_addr"}),
    ("supervision: the supervisor that feeds the pure state machine",
     {"_supervisor"}),
    ("state: what the API layer keeps per runtime",
     {"_state"}),
    ("process: the runtime of this process, the running context",
     {"_process", "_context"}),
    ("messaging: routes, endpoints and their adverbs, ports, mesh helpers, asking workers, "
     "probes of calls that wait on each other, cancelling calls, streams of replies, "
     "deadlines of calls",
     {"_route", "_endpoint", "_ports", "_as_endpoint", "_mesh_state", "_leases", "_waits",
      "_cancel", "_value_stream", "_deadlines"}),
    ("meshes: actor meshes, proc and host meshes, respawning ranks of elastic meshes, "
     "detaching and reattaching proc meshes",
     {"_actor_mesh", "_proc_mesh", "_respawn", "_sync", "_reattach", "_topology"}),
    ("hosting: actors of this process, their spawn and stop, failures at owners, singletons, "
     "what workers and procs do with detached meshes",
     {"_behavior", "_spawning", "_stopping", "_failures", "_controllers", "_kept"}),
    ("dispatch: the table of system-message handlers",
     {"_dispatch"}),
    ("entry: starting a controller, a proc, a worker; the controller's hang notice",
     {"_hang_notice", "_bootstrap", "_proc_main", "_workers", "_bootstrap_main", "_worker_loops"}),
]

#: Imports inside functions that stay, as (module, imported module): each is a lazy feature.
LAZY = {
    # test-only fault injection: a proc loads regency.testing when a test injects a fault
    ("_dispatch", "regency.testing"),
}


def _layer_of() -> dict[str, int]:
    table: dict[str, int] = {}
    for n, (_, modules) in enumerate(LAYERS):
        for mod in modules:
            assert mod not in table, f"{mod} is in two layers"
            table[mod] = n
    return table


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement loads, as dotted names from ``regency``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        base = node.module or ""
    else:
        parts = ["regency", "_api"][: 3 - node.level] if node.level <= 2 else []
        base = ".".join(parts + ([node.module] if node.module else []))
    if node.module is None:  # from . import a, b: the names are modules
        return [f"{base}.{alias.name}" for alias in node.names]
    return [base]


def _imports(path: Path) -> tuple[list[str], list[str]]:
    """(module-level imports that run, imports inside functions) of the module at ``path``."""
    return _imports_in(path.read_text())


def _imports_in(source: str) -> tuple[list[str], list[str]]:
    """(module-level imports that run, imports inside functions) of module ``source``."""
    tree = ast.parse(source)
    top: list[str] = []
    inner: list[str] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (inner if in_function else top).extend(_targets(child))
                continue
            nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, in_function or nested)

    visit(tree, False)
    return top, inner


def _api_module(name: str) -> str | None:
    prefix = "regency._api."
    if name.startswith(prefix):
        return name[len(prefix):].split(".")[0]
    return None


def _modules() -> list[str]:
    return sorted(p.stem for p in API.glob("*.py") if p.stem != "__init__")


def test_every_module_has_a_layer() -> None:
    layer = _layer_of()
    missing = [mod for mod in _modules() if mod not in layer]
    assert not missing, f"give these modules a layer in LAYERS: {missing}"
    gone = sorted(set(layer) - set(_modules()))
    assert not gone, f"LAYERS names modules that do not exist: {gone}"


def test_no_module_imports_from_a_higher_layer() -> None:
    layer = _layer_of()
    upward: list[str] = []
    for mod in _modules():
        top, _ = _imports(API / f"{mod}.py")
        for target in top:
            other = _api_module(target)
            if other is not None and layer[other] > layer[mod]:
                upward.append(f"{mod} ({LAYERS[layer[mod]][0].split(':')[0]}) imports "
                              f"{other} ({LAYERS[layer[other]][0].split(':')[0]})")
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_the_imports_form_no_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for mod in _modules():
        top, _ = _imports(API / f"{mod}.py")
        graph[mod] = {o for t in top if (o := _api_module(t)) is not None and o != mod}
    done: set[str] = set()

    def walk(mod: str, path: list[str]) -> None:
        if mod in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(mod):], mod]))
        if mod in done:
            return
        for other in sorted(graph[mod]):
            walk(other, [*path, mod])
        done.add(mod)

    for mod in graph:
        walk(mod, [])


def test_no_imports_inside_functions_but_the_lazy_features() -> None:
    found: set[tuple[str, str]] = set()
    for mod in _modules():
        _, inner = _imports(API / f"{mod}.py")
        found.update((mod, target) for target in inner)
    assert found == LAZY, (
        f"imports inside functions: {sorted(found - LAZY)} (move them to the top, or list a "
        f"genuinely lazy feature in LAZY with its reason); no longer there: {sorted(LAZY - found)}"
    )


def test_the_checker_sees_what_it_should() -> None:
    """The parser itself: relative forms, ``from . import``, TYPE_CHECKING, functions."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import _a, _b\n"
        "from ._c import x\n"
        "from .. import config\n"
        "import os\n"
        "if TYPE_CHECKING:\n"
        "    from ._d import y\n"
        "def f():\n"
        "    from ._e import z\n"
        "    g = lambda: __import__('x')\n"
    )
    top, inner = _imports_in(source)
    assert "regency._api._a" in top and "regency._api._b" in top and "regency._api._c" in top
    assert "regency.config" in top and "os" in top
    assert not any("_d" in t for t in top + inner)
    assert inner == ["regency._api._e"]
