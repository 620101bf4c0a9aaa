"""Hypothesis strategies for generated messages, built from the same JSON schemas as the generator."""

from __future__ import annotations

import importlib
import sys
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[3]


def _load_gen() -> Any:
    """``tools/gen_protocol.py`` (the generator's entry point; its ``protocol_gen`` package sits beside it)."""
    tools = str(ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    return importlib.import_module("gen_protocol")


gen = _load_gen()

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


@lru_cache(maxsize=None)
def schemas() -> dict[str, Any]:
    """schema name -> MessageSchema (requests, responses and coordinator records, overrides applied)."""
    result = {}
    for _, path in gen.collect(gen.DEFAULT_SCHEMAS, gen.OVERRIDES).items():
        data = gen.load_json(path)
        if data["type"] in ("request", "response"):
            result[data["name"]] = gen.MessageSchema(data, path.name)
    for _, path in gen.collect(gen.DEFAULT_COORD).items():
        data = gen.load_json(path)
        result[data["name"]] = gen.MessageSchema(data, path.name)
    return result


def module_for(schema: Any) -> Any:
    pkg = "oncelog.protocol.messages."
    if schema.api_key is None:
        pkg += "coordinator."
    return importlib.import_module(pkg + gen.module_name(schema.name))


def _scalar(f: Any, small: bool) -> st.SearchStrategy[Any]:
    t = f.type
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        if small:
            lo, hi = max(lo, 0), min(hi, 40)
        return st.integers(lo, hi)
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "bool":
        return st.booleans()
    if t == "string":
        return st.text(max_size=8)
    if t in ("bytes", "records"):
        return st.binary(max_size=12)
    if t == "uuid":
        return st.uuids() | st.just(uuid.UUID(int=0))
    raise AssertionError(t)


def value_strategy(schema: Any, mod: Any, f: Any, v: int, small: bool, depth: int = 0) -> st.SearchStrategy[Any]:
    if f.struct is not None:
        elem = struct_strategy(schema, mod, f.struct, v, small, depth + 1)
    else:
        elem = _scalar(f, small)
    if f.is_array:
        s: st.SearchStrategy[Any] = st.lists(elem, max_size=3 if depth < 2 else 1)
    else:
        s = elem
    if f.is_nullable(v):
        s = st.none() | s
    return s


def struct_strategy(schema: Any, mod: Any, struct: Any, v: int, small: bool = False, depth: int = 0) -> Any:
    cls = getattr(mod, struct.name)
    kwargs = {
        f.attr: value_strategy(schema, mod, f, v, small, depth) for f in struct.fields if f.present(v)
    }
    return st.builds(cls, **kwargs)


def message_strategy(schema: Any, v: int, small: bool = False) -> Any:
    return struct_strategy(schema, module_for(schema), schema.top, v, small)
