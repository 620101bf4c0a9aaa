#!/usr/bin/env python3
"""Generate oncelog's Kafka wire codecs from Kafka's JSON message schemas.

    python tools/gen_protocol.py [--schemas DIR] [--coordinator-records DIR] [--overrides DIR] [--out DIR]

Reads every request/response schema of ``schemas/kafka-protocol/message`` (overlaid by
``schemas/schema_overrides/*.json``, which replace same-named files: schemas newer than the Kafka snapshot) plus the
coordinator record schemas of ``schemas/kafka-protocol/coordinator-records`` (overlaid by
``schemas/schema_overrides/coordinator-records/*.json`` the same way), and writes one module per schema into
``src/oncelog/protocol/messages/`` (coordinator records into ``messages/coordinator/``, the consumer protocol's
subscription/assignment data schemas into ``messages/consumer_protocol/``) and an index
``messages/_index.py``. ``make gen`` runs it; ``tests/unit/protocol/test_generated_code.py`` checks that the
committed modules are what it writes.

Each module holds ``@dataclass(slots=True)`` classes (one per struct, all fields defaulted) and straight-line
per-version reader/writer functions; versions whose code is identical share one function. The schema model is
``protocol_gen/schema.py``, the code of one module ``protocol_gen/emit.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from protocol_gen.emit import BANNER, ModuleGen
from protocol_gen.schema import MessageSchema, SchemaError, load_json, snake

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "schemas"
DEFAULT_SCHEMAS = SCHEMAS / "kafka-protocol" / "message"
DEFAULT_COORD = SCHEMAS / "kafka-protocol" / "coordinator-records"
OVERRIDES = SCHEMAS / "schema_overrides"
OUT_DIR = ROOT / "src/oncelog/protocol/messages"


def module_name(schema_name: str) -> str:
    return snake(schema_name).rstrip("_")


def collect(schema_dir: Path, overrides: Path | None = None) -> dict[str, Path]:
    """file name -> path of every ``*.json`` schema of ``schema_dir``, a same-named file of ``overrides`` winning."""
    files = {p.name: p for p in sorted(schema_dir.glob("*.json"))}
    if not files:
        raise SchemaError(f"no *.json schema in {schema_dir}: pass the folder of Kafka's schemas (see --help)")
    if overrides is not None:
        if not overrides.is_dir():
            raise SchemaError(f"the overrides folder {overrides} does not exist")
        for p in sorted(overrides.glob("*.json")):
            files[p.name] = p
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schemas", type=Path, default=DEFAULT_SCHEMAS)
    ap.add_argument("--coordinator-records", type=Path, default=DEFAULT_COORD)
    ap.add_argument("--overrides", type=Path, default=OVERRIDES)
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    args = ap.parse_args(argv)

    out_dir: Path = args.out
    coord_dir = out_dir / "coordinator"
    coord_dir.mkdir(parents=True, exist_ok=True)
    written: set[Path] = set()

    def write(path: Path, text: str) -> None:
        written.add(path)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)

    requests: dict[int, tuple[str, str]] = {}
    responses: dict[int, tuple[str, str]] = {}
    versions: dict[int, tuple[int, int, int | None]] = {}
    for fname, path in collect(args.schemas, args.overrides).items():
        data = load_json(path)
        if data["type"] not in ("request", "response"):
            continue
        schema = MessageSchema(data, f"{path.parent.name}/{fname}")
        mod = module_name(schema.name)
        write(out_dir / f"{mod}.py", ModuleGen(schema).generate())
        table = requests if schema.kind == "request" else responses
        assert schema.api_key is not None
        if schema.api_key in table:
            raise SchemaError(f"duplicate api key {schema.api_key}")
        table[schema.api_key] = (mod, schema.name)
        if schema.kind == "request":
            fmin = schema.flexible.lo if not schema.flexible.empty and schema.flexible.lo <= schema.valid.hi else None
            versions[schema.api_key] = (schema.valid.lo, schema.valid.hi, fmin)

    coord: list[tuple[str, str]] = []
    coord_overrides = args.overrides / "coordinator-records" if args.overrides is not None else None
    if coord_overrides is not None and not coord_overrides.is_dir():
        coord_overrides = None
    for fname, path in collect(args.coordinator_records, coord_overrides).items():
        data = load_json(path)
        schema = MessageSchema(data, f"coordinator-records/{fname}")
        mod = module_name(schema.name)
        write(coord_dir / f"{mod}.py", ModuleGen(schema).generate())
        coord.append((mod, schema.name))

    # the consumer's embedded protocol (JoinGroup/SyncGroup metadata): "type": "data" schemas of the message dir
    cp_dir = out_dir / "consumer_protocol"
    cp_dir.mkdir(parents=True, exist_ok=True)
    cp: list[tuple[str, str]] = []
    for fname, path in collect(args.schemas, args.overrides).items():
        data = load_json(path)
        if data["type"] != "data" or not str(data["name"]).startswith("ConsumerProtocol"):
            continue
        schema = MessageSchema(data, f"{path.parent.name}/{fname}")
        mod = module_name(schema.name)
        write(cp_dir / f"{mod}.py", ModuleGen(schema).generate())
        cp.append((mod, schema.name))
    write(
        cp_dir / "__init__.py",
        BANNER
        + '"""Generated codecs of the consumer protocol\'s subscription and assignment (group member metadata)."""\n\n'
        + "".join(f"from .{m} import {n}\n" for m, n in cp)
        + f"\n__all__ = [{', '.join(repr(n) for _, n in cp)}]\n",
    )

    write(out_dir / "__init__.py", BANNER + '"""Generated Kafka message codecs (see tools/gen_protocol.py)."""\n')
    write(
        coord_dir / "__init__.py",
        BANNER
        + '"""Generated codecs of the coordinator records (__consumer_offsets, __transaction_state)."""\n\n'
        + "".join(f"from .{m} import {n}\n" for m, n in coord)
        + f"\n__all__ = [{', '.join(repr(n) for _, n in coord)}]\n",
    )
    index = [BANNER, '"""api key -> (module, class) of the generated request/response codecs."""\n\n']
    index.append("REQUESTS: dict[int, tuple[str, str]] = {\n")
    index.extend(f"    {k}: {requests[k]!r},\n" for k in sorted(requests))
    index.append("}\n\nRESPONSES: dict[int, tuple[str, str]] = {\n")
    index.extend(f"    {k}: {responses[k]!r},\n" for k in sorted(responses))
    index.append("}\n\n# api key -> (min version, max version, first flexible version or None), from the request schema\n")
    index.append("VERSIONS: dict[int, tuple[int, int, int | None]] = {\n")
    index.extend(f"    {k}: {versions[k]!r},\n" for k in sorted(versions))
    index.append("}\n")
    write(out_dir / "_index.py", "".join(index))

    # remove stale generated modules
    for d in (out_dir, coord_dir, cp_dir):
        for p in d.glob("*.py"):
            if p not in written and p.read_text().startswith(BANNER):
                p.unlink()
    print(
        f"generated {len(requests)} requests, {len(responses)} responses, {len(coord)} coordinator records, "
        f"{len(cp)} consumer protocol schemas"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SchemaError as e:
        sys.exit(f"gen_protocol: {e}")
