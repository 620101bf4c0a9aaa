"""The layers of ``oncelog`` depend one way (README, "Layout"; docs/design/overview.md and cluster.md):

    protocol  <-  storage  <-  coordinator  <-  cluster  <-  broker  <-  cli
    protocol, storage  <-  security  <-  broker
    protocol  <-  client   <-  spark
                  client.connection  <-  cluster, broker (the replica fetcher's inter-broker requests)
                  client.security  <-  broker (its credentials on the inter-broker listener)

``protocol`` (sans-I/O codecs, record batches) imports nothing of oncelog; ``storage`` only ``protocol``;
``coordinator`` (deterministic state machines) only ``storage`` and ``protocol``; ``cluster`` (metadata, replica
and controller decisions) those three and, for inter-broker requests, ``client.connection``; ``client`` only
``protocol`` (a client is not a broker: nothing of the broker's side may leak into it); ``security``
(principals, ACLs, credentials, quotas: decisions and their records) only ``protocol`` and ``storage``; ``spark`` only ``client``
(it reaches the protocol through the client's public API); ``broker`` anything below it; ``cli`` and
``python -m oncelog`` are on top (``broker``'s replica fetcher also uses ``client.connection`` and the errors
it raises, ``client.errors``, for the follower's Fetch and OffsetForLeaderEpoch, and ``client.fetch_session``, the
fetcher's side of KIP-227 sessions, as Kafka's ReplicaFetcherThread uses the clients' FetchSessionHandler); ``testing`` (test harness:
broker processes, power cuts) may import anything.
``clock`` is a shared leaf (the injected clock): anyone may import it and it imports nothing of oncelog.

Every import counts: module level, inside functions, under ``if TYPE_CHECKING:``, relative ones, and
``importlib.import_module("oncelog....")`` / ``__import__`` with a literal name.

Inside a layer, modules import each other without cycles (TYPE_CHECKING imports included: a cycle there is two
modules that each need the other to be understood). The cycles that remain are listed in ``KNOWN_CYCLES``, a list
that may only shrink; none is allowed in ``broker``. Only the wiring (``broker/server.py``) knows every part of the
broker: no other module of ``broker`` imports it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

from repo_files import ROOT, SRC, hand_written_modules

EVERYTHING = {"broker", "cli", "client", "cluster", "spark", "coordinator", "storage", "protocol", "security", "testing"}
SHARED = {"clock", "__init__"}  # leaves anyone may import (the root package only defines __version__)
ALLOWED: dict[str, set[str]] = {
    "__init__": set(),
    "clock": set(),
    "protocol": set(),
    "storage": {"protocol"},
    "coordinator": {"storage", "protocol"},
    "security": {"storage", "protocol"},  # principals, ACLs, credentials, quotas: pure decisions and their records
    "cluster": {"coordinator", "storage", "protocol", "client.connection"},  # a layer, or one module of a layer
    "client": {"protocol"},
    "spark": {"client"},
    # client.security: the broker's own TLS/SASL credentials on its connections to other brokers
    "broker": {"cluster", "coordinator", "security", "storage", "protocol", "client.connection", "client.errors",
               "client.security", "client.fetch_session"},
    "cli": EVERYTHING,
    "testing": EVERYTHING,
    "__main__": EVERYTHING,  # python -m oncelog: the CLI
}


def module_name(path: Path) -> tuple[str, bool]:
    """(dotted module name, whether it is a package's ``__init__``) of a file under ``src/``."""
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


#: import cycles inside a layer that are still to be broken (each the set of modules of one cycle); this list may
#: only shrink: a cycle that is gone must be removed from it, a new one fails the test
KNOWN_CYCLES: list[set[str]] = []


def imports_of(source: str, module: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, wherever it sits."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from oncelog import storage` imports oncelog.storage
                yield node.lineno, f"{target}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                yield node.lineno, node.args[0].value


def layer(module: str) -> str | None:
    """The layer of an ``oncelog`` module: its top-level package or module under ``src/oncelog`` ("__init__" for
    the root package and the names it defines); None outside oncelog."""
    parts = module.split(".")
    if parts[0] != "oncelog":
        return None
    if len(parts) > 1 and ((SRC / parts[1]).is_dir() or (SRC / f"{parts[1]}.py").is_file()):
        return parts[1]
    return "__init__"


def allowed(own: str, target: str) -> bool:
    """Whether layer ``own`` may import module ``target`` (a whole layer, or the named module and its children)."""
    rest = target.split(".")[1:]
    return any(rest[: len(rule.split("."))] == rule.split(".") for rule in ALLOWED[own])


def violations() -> list[str]:
    found: dict[tuple[str, int, str], str] = {}  # (file, line, layer imported) -> the import
    for path in hand_written_modules():
        module, is_package = module_name(path)
        own = layer(module)
        assert own is not None and own in ALLOWED, f"{module}: a layer the test does not know; add it to ALLOWED"
        for lineno, target in imports_of(path.read_text(), module, is_package):
            other = layer(target)
            if other is None or other == own or other in SHARED or allowed(own, target):
                continue
            found.setdefault((str(path.relative_to(ROOT)), lineno, other), f"{own} imports {target}")
    return [f"{file}:{lineno}: {what}" for (file, lineno, _), what in sorted(found.items())]


def test_layers_depend_one_way() -> None:
    bad = violations()
    assert not bad, "imports against the layering (see this test's docstring):\n" + "\n".join(bad)


def test_every_module_belongs_to_a_known_layer() -> None:
    layers = {layer(module_name(p)[0]) for p in hand_written_modules()}
    assert layers <= set(ALLOWED), layers - set(ALLOWED)
    assert {"protocol", "storage", "coordinator", "broker", "client", "spark", "cli"} <= layers


def test_the_scan_sees_every_kind_of_import() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import oncelog.broker.server\n"
        "from ..storage import log\n"
        "from . import framing\n"
        "if TYPE_CHECKING:\n"
        "    from oncelog.client import Producer\n"
        "def f():\n"
        "    from oncelog import coordinator\n"
        "    importlib.import_module('oncelog.spark.sink')\n"
        "    return __import__('oncelog.cli.main')\n"
    )
    got = {target for _, target in imports_of(source, "oncelog.protocol.records")}
    assert {
        "oncelog.broker.server", "oncelog.storage.log", "oncelog.protocol.framing", "oncelog.client.Producer",
        "oncelog.coordinator", "oncelog.spark.sink", "oncelog.cli.main",
    } <= got
    assert {layer(t) for t in got} >= {"broker", "storage", "protocol", "client", "coordinator", "spark", "cli"}
    assert layer("oncelog") == layer("oncelog.__version__") == "__init__"
    assert layer("typing") is None
    assert allowed("cluster", "oncelog.client.connection") and allowed("cluster", "oncelog.storage.log")
    assert not allowed("cluster", "oncelog.client.producer") and not allowed("cluster", "oncelog.client")


def all_modules() -> dict[str, Path]:
    """Every module of ``src/oncelog``, generated ones included (an import resolves to the module it names)."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        out[module_name(path)[0]] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the hand-written modules it imports. An import of one's own ancestor package is not an edge (Python
    has imported the package before any of its modules: ``from . import submodule`` names the package only to reach
    the submodule, which is the edge)."""
    known = all_modules()
    hand_written = {module_name(p)[0] for p in hand_written_modules()}

    def resolve(target: str) -> str | None:
        parts = target.split(".")
        while parts and ".".join(parts) not in known:
            parts.pop()
        return ".".join(parts) if parts else None

    graph: dict[str, set[str]] = {}
    for path in hand_written_modules():
        module, is_package = module_name(path)
        edges = set()
        for _, target in imports_of(path.read_text(), module, is_package):
            resolved = resolve(target)
            if resolved is None or resolved not in hand_written or module == resolved \
                    or module.startswith(resolved + "."):
                continue
            edges.add(resolved)
        graph[module] = edges
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_import_cycles_but_the_known_ones() -> None:
    found = cycles(import_graph())
    new = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not new, "import cycles (TYPE_CHECKING imports count too); break them:\n" + "\n".join(map(str, new))
    assert not gone, "cycles no longer there: remove them from KNOWN_CYCLES:\n" + "\n".join(map(str, gone))
    assert not [c for c in KNOWN_CYCLES if any(m.startswith("oncelog.broker.") for m in c)], \
        "no import cycle may be allowed in broker/"


def test_the_cycle_finder_sees_cycles_through_type_checking_and_packages() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n"
              "    from .server import Broker\n")
    assert {t for _, t in imports_of(source, "oncelog.broker.topics")} >= {"oncelog.broker.server"}
    graph = import_graph()
    # `from . import framing` in a protocol module is an edge to protocol.framing, not to the package
    assert all("oncelog.protocol" not in edges for module, edges in graph.items()
               if module.startswith("oncelog.protocol."))
    assert "oncelog.broker.context" in graph["oncelog.broker.server"]


def test_only_the_wiring_imports_broker_server() -> None:
    graph = import_graph()
    importers = sorted(m for m, edges in graph.items() if "oncelog.broker.server" in edges)
    inside = [m for m in importers if m.startswith("oncelog.broker.")]
    assert not inside, f"only broker/server.py wires the broker; these modules import it: {inside}"
