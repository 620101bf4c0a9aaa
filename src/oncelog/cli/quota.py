"""``oncelog quota set|remove|list``: client quotas, as ``kafka-configs.sh --entity-type users|clients|ips``.

A quota belongs to an entity: a user (the principal's name; ``ANONYMOUS`` on a PLAINTEXT listener), a client id,
both, or an IP address, each either named or the default (``--user-default``: Kafka's ``<default>``). Keys:
``producer_byte_rate``, ``consumer_byte_rate`` (bytes a second), ``request_percentage`` (percent of one thread's
time) and ``controller_mutation_rate`` for users and client ids; ``connection_creation_rate`` (connections a
second) for IPs. The broker checks them as Kafka does; its message is printed as is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ._common import CONTEXT, Conn, connection_options, echo_json, fail, json_option
from ._table import Col, print_table

if TYPE_CHECKING:
    from oncelog.protocol.messages.alter_client_quotas_request import OpData

MATCH_EXACT, MATCH_DEFAULT = 0, 1
_TYPES = (("user", "user"), ("client-id", "client"), ("ip", "ip"))


@click.group(context_settings=CONTEXT)
def quota() -> None:
    """Set, remove and list client quotas (like kafka-configs.sh for users, clients and ips)."""


def _entity_options(f: Any) -> Any:
    for kind, flag in reversed(_TYPES):
        f = click.option(f"--{flag}-default", f"{flag.replace('-', '_')}_default", is_flag=True,
                         help=f"the default {kind} (Kafka's <default>)")(f)
        f = click.option(f"--{kind}", f"{kind.replace('-', '_')}", metavar="NAME" if kind != "ip" else "ADDRESS",
                         help=f"a {kind}" + (" (a user is the principal's name)" if kind == "user" else ""))(f)
    return f


def _entity(options: dict[str, Any], required: bool = True) -> dict[str, str | None]:
    """{entity type: name, or None for the default} from --user/--user-default, --client-id/--client-default,
    --ip/--ip-default."""
    entity: dict[str, str | None] = {}
    for kind, flag in _TYPES:
        name, default = options[kind.replace("-", "_")], options[f"{flag}_default"]
        if name is not None and default:
            fail(f"--{kind} and --{flag}-default name the same part of the entity: give one", code=2)
        if name is not None:
            entity[kind] = name
        elif default:
            entity[kind] = None
    if required and not entity:
        fail("name the entity: --user/--user-default and/or --client-id/--client-default, or --ip/--ip-default",
             code=2)
    return entity


def _entity_text(entity: dict[str, str | None]) -> str:
    return ", ".join(f"{k}={'<default>' if v is None else v}" for k, v in entity.items())


def _alter(conn: Conn, entity: dict[str, str | None], ops: list[OpData]) -> None:
    from oncelog.protocol.messages.alter_client_quotas_request import AlterClientQuotasRequest, EntityData, EntryData

    from ._wire import error_name, wire

    request = AlterClientQuotasRequest(entries=[EntryData(
        entity=[EntityData(entity_type=k, entity_name=v) for k, v in entity.items()], ops=ops)])
    with wire(conn) as w:
        resp = w.send(request)
    for entry in resp.entries:
        if entry.error_code:
            fail(f"cannot change the quotas of {_entity_text(entity)}: "
                 f"{entry.error_message or error_name(entry.error_code)}")


def _number(text: str, key: str) -> float:
    try:
        return float(text)
    except ValueError:
        fail(f"the value of {key} must be a number, got {text!r}", code=2)


@quota.command("set", context_settings=CONTEXT)
@_entity_options
@click.argument("quotas", nargs=-1, required=True, metavar="KEY=VALUE...")
@connection_options
def set_(quotas: tuple[str, ...], conn: Conn, **options: Any) -> None:
    """Set quotas of an entity, e.g. 'oncelog quota set --client-id app producer_byte_rate=1048576'."""
    from oncelog.protocol.messages.alter_client_quotas_request import OpData

    entity = _entity(options)
    ops = []
    for item in quotas:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"expected KEY=VALUE, got {item!r}", "e.g. producer_byte_rate=1048576", code=2)
        ops.append(OpData(key=key.strip(), value=_number(value.strip(), key.strip()), remove=False))
    _alter(conn, entity, ops)
    click.echo(f"set {', '.join(quotas)} for {_entity_text(entity)}")


@quota.command(context_settings=CONTEXT)
@_entity_options
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
@connection_options
def remove(keys: tuple[str, ...], conn: Conn, **options: Any) -> None:
    """Remove quotas of an entity, e.g. 'oncelog quota remove --client-id app producer_byte_rate'."""
    from oncelog.protocol.messages.alter_client_quotas_request import OpData

    entity = _entity(options)
    _alter(conn, entity, [OpData(key=k, value=0.0, remove=True) for k in keys])
    click.echo(f"removed {', '.join(keys)} of {_entity_text(entity)}")


@quota.command("list", context_settings=CONTEXT)
@_entity_options
@click.option("--strict", is_flag=True, help="only entities of exactly the types named")
@connection_options
@json_option
def list_(strict: bool, conn: Conn, as_json: bool, **options: Any) -> None:
    """List the quotas of the entities matching the options (all entities without any)."""
    from oncelog.protocol.messages.describe_client_quotas_request import ComponentData, DescribeClientQuotasRequest

    from ._wire import error_name, wire

    entity = _entity(options, required=False)
    request = DescribeClientQuotasRequest(strict=strict, components=[
        ComponentData(entity_type=k, match_type=MATCH_DEFAULT if v is None else MATCH_EXACT, match=v)
        for k, v in entity.items()])
    with wire(conn) as w:
        resp = w.send(request)
    if resp.error_code:
        fail(f"cannot list the quotas: {resp.error_message or error_name(resp.error_code)}")
    found = [({e.entity_type: e.entity_name for e in entry.entity}, {v.key: v.value for v in entry.values})
             for entry in resp.entries or []]
    if as_json:
        echo_json([{"entity": e, "quotas": q} for e, q in found])
        return
    rows = [(_entity_text(e), ", ".join(f"{k}={int(v) if v.is_integer() else v}" for k, v in sorted(q.items())))
            for e, q in found]
    print_table(f"{len(found)} entit{'y' if len(found) == 1 else 'ies'} with quotas",
                [Col("Entity", fold=True), Col("Quotas", fold=True)], rows)
