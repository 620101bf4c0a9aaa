"""The schema model of Kafka's JSON message definitions: versions, fields, structs, defaults.

``MessageSchema`` reads one schema file (after ``load_json``) into ``StructSpec``s whose ``FieldSpec``s know in
which versions they are present, nullable and tagged, following Kafka's generator
(``org.apache.kafka.message.MessageGenerator``, ``FieldSpec``, ``StructSpec``); the schema language is described in
``schemas/kafka-protocol/message/README.md``.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

FIXED = {  # kafka type -> (struct code, size)
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "float64": ("d", 8),
    "bool": ("?", 1),
    "uuid": ("16s", 16),
}
INT_TYPES = {"int8", "int16", "int32", "int64", "uint16", "uint32"}
PRIMITIVES = set(FIXED) | {"string", "bytes", "records"}


# ---------------------------------------------------------------------------------------------- schema model


@dataclass(frozen=True)
class Versions:
    lo: int
    hi: int  # inclusive; lo > hi means empty

    @staticmethod
    def parse(spec: str | None, cap: int = 0x7FFF) -> Versions:
        if spec is None or spec == "none":
            return Versions(1, 0)
        spec = spec.strip()
        if spec.endswith("+"):
            return Versions(int(spec[:-1]), cap)
        if "-" in spec:
            a, b = spec.split("-")
            return Versions(int(a), int(b))
        return Versions(int(spec), int(spec))

    def __contains__(self, v: int) -> bool:
        return self.lo <= v <= self.hi

    @property
    def empty(self) -> bool:
        return self.lo > self.hi


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    s = s.lower()
    if keyword.iskeyword(s) or s in {"buf", "pos", "out", "parts", "o"}:
        s += "_"
    return s


@dataclass
class FieldSpec:
    name: str
    attr: str
    type: str  # element type for arrays
    is_array: bool
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: object
    flexible_override: Versions | None
    struct: StructSpec | None = None

    def present(self, v: int) -> bool:
        return v in self.versions

    def is_tagged(self, v: int) -> bool:
        return v in self.tagged

    def is_nullable(self, v: int) -> bool:
        return v in self.nullable


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec]
    used: set[int] = field(default_factory=set)
    is_top: bool = False


def strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def load_json(path: Path) -> dict[str, object]:
    return json.loads(strip_comments(path.read_text()))  # type: ignore[no-any-return]


class SchemaError(Exception):
    pass


class MessageSchema:
    def __init__(self, data: dict, source: str):  # type: ignore[type-arg]
        self.source = source
        self.name: str = data["name"]
        self.kind: str = data["type"]
        self.api_key: int | None = data.get("apiKey")
        self.valid = Versions.parse(data["validVersions"])
        self.flexible = Versions.parse(data.get("flexibleVersions", "none"))
        self.structs: dict[str, StructSpec] = {}
        self._pending_common: dict[str, list[dict]] = {}  # type: ignore[type-arg]
        for cs in data.get("commonStructs", []):
            self._pending_common[cs["name"]] = cs["fields"]
        self.top = StructSpec(self.name, [], is_top=True)
        self.top.fields = [self._field(f) for f in data["fields"]]
        # common structs never referenced are still generated (cheap, and harmless)
        for name in list(self._pending_common):
            self._struct(name, None)
        self.versions = list(range(self.valid.lo, self.valid.hi + 1))
        self._mark(self.top, set(self.versions))

    def _struct(self, name: str, fields: list[dict] | None) -> StructSpec:  # type: ignore[type-arg]
        if fields is None:
            if name in self.structs:
                return self.structs[name]
            if name not in self._pending_common:
                raise SchemaError(f"{self.source}: unknown struct type {name}")
            fields = self._pending_common.pop(name)
        elif name in self.structs or name in self._pending_common:
            raise SchemaError(f"{self.source}: struct {name} defined twice")
        spec = StructSpec(name, [])
        self.structs[name] = spec
        spec.fields = [self._field(f) for f in fields]
        return spec

    def _field(self, f: dict) -> FieldSpec:  # type: ignore[type-arg]
        t: str = f["type"]
        is_array = t.startswith("[]")
        elem = t[2:] if is_array else t
        tagged = Versions.parse(f.get("taggedVersions"))
        versions = Versions.parse(f.get("versions") or f.get("taggedVersions"))
        if not tagged.empty and f.get("tag") is None:
            raise SchemaError(f"{self.source}: tagged field {f['name']} without a tag")
        fo = f.get("flexibleVersions")
        spec = FieldSpec(
            name=f["name"],
            attr=snake(f["name"]),
            type=elem,
            is_array=is_array,
            versions=versions,
            nullable=Versions.parse(f.get("nullableVersions")),
            tagged=tagged,
            tag=int(f["tag"]) if f.get("tag") is not None else None,
            # a JSON null default ("default": null) is Kafka's null, like the string "null"
            default="null" if "default" in f and f["default"] is None else f.get("default"),
            flexible_override=Versions.parse(fo) if fo is not None else None,
        )
        if elem not in PRIMITIVES:
            spec.struct = self._struct(elem, f.get("fields"))
        return spec

    def _mark(self, s: StructSpec, versions: set[int]) -> None:
        new = versions - s.used
        if not new and s.used:
            return
        s.used |= versions
        for f in s.fields:
            if f.struct is not None:
                self._mark(f.struct, {v for v in versions if f.present(v)})


# ---------------------------------------------------------------------------------------------- defaults


def default_value(f: FieldSpec) -> tuple[str, str]:
    """(python expression for a fresh default value, dataclass default clause)."""
    d = f.default
    ds = None if d is None else str(d)
    if f.is_array:
        if ds == "null":
            return "None", "None"
        if ds not in (None, "", "[]"):
            raise SchemaError(f"array default {d!r} for {f.name}")
        return "[]", "_field(default_factory=list)"
    if f.struct is not None:
        if ds == "null":
            return "None", "None"
        return f"{f.struct.name}()", f"_field(default_factory={f.struct.name})"
    t = f.type
    if t in INT_TYPES:
        if ds is None or ds == "":
            return "0", "0"
        number = int(ds, 16) if ds.lower().startswith(("0x", "-0x")) else int(ds)
        return repr(number), repr(number)
    if t == "float64":
        real = float(ds) if ds else 0.0
        return repr(real), repr(real)
    if t == "bool":
        flag = ds is not None and ds.lower() == "true"
        return repr(flag), repr(flag)
    if t == "string":
        if ds == "null":
            return "None", "None"
        return repr(ds or ""), repr(ds or "")
    if t == "bytes":
        if ds == "null":
            return "None", "None"
        return "b''", "b''"
    if t == "records":
        return "None", "None"
    if t == "uuid":
        return "_ZERO_UUID", "_ZERO_UUID"
    raise SchemaError(f"no default for type {t}")


def py_type(f: FieldSpec) -> str:
    if f.struct is not None:
        base = f.struct.name
    else:
        base = {
            "float64": "float",
            "bool": "bool",
            "string": "str",
            "bytes": "bytes",
            "records": "Any",
            "uuid": "_UUID",
        }.get(f.type, "int")
    if f.is_array:
        base = f"list[{base}]"
    nullable = not f.nullable.empty or default_value(f)[0] == "None"
    if nullable and base != "Any":
        base += " | None"
    return base
