"""``oncelog acl add|list|remove``: manage ACLs with kafka-acls.sh's options.

Resources: ``--topic``, ``--group``, ``--transactional-id`` (repeatable; ``*`` is every name) and ``--cluster``,
with ``--resource-pattern-type`` (LITERAL by default; PREFIXED; for list/remove also ANY and MATCH). Entries:
``--allow-principal``/``--deny-principal`` (``User:alice``, ``User:*``), ``--allow-host``/``--deny-host`` (``*`` by
default), ``--operation`` (Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
AlterConfigs, IdempotentWrite, All). ``--producer`` / ``--consumer`` add what such a client needs, as kafka-acls.sh
does: a producer WRITE, DESCRIBE and CREATE on its topics (and WRITE, DESCRIBE on ``--transactional-id``,
IDEMPOTENT_WRITE on the cluster with ``--idempotent``); a consumer READ and DESCRIBE on its topics and READ on its
``--group``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import product
from typing import TYPE_CHECKING, Any, TypeVar

import click

from oncelog.security.acl import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType, parse_enum

from ._common import CONTEXT, Conn, connection_options, echo_json, fail, json_option, user_errors

if TYPE_CHECKING:  # the client is imported when a command runs, not when the CLI starts
    from oncelog.client.admin import Admin
    from oncelog.client.admin_acls import AclBinding, AclBindingFilter

Op, R = AclOperation, ResourceType
F = TypeVar("F", bound=Callable[..., Any])


def _resources(topic: tuple[str, ...], group: tuple[str, ...], transactional_id: tuple[str, ...],
               cluster: bool) -> list[tuple[ResourceType, str]]:
    return ([(R.TOPIC, t) for t in topic] + [(R.GROUP, g) for g in group]
            + [(R.TRANSACTIONAL_ID, t) for t in transactional_id] + ([(R.CLUSTER, CLUSTER_NAME)] if cluster else []))


def _op(text: str) -> AclOperation:
    try:
        return parse_enum(AclOperation, text)
    except ValueError as e:
        fail(str(e), code=2)


def _pattern(text: str) -> PatternType:
    try:
        return parse_enum(PatternType, text)
    except ValueError as e:
        fail(str(e), code=2)


def _admin(conn: Conn) -> Admin:
    from oncelog.client.admin import Admin

    return Admin(conn.client_conf())


def _show(b: AclBinding) -> str:
    return str(b)


resource_options = [
    click.option("--topic", multiple=True, metavar="NAME", help="a topic (repeatable; * for every topic)"),
    click.option("--group", multiple=True, metavar="NAME", help="a consumer group (repeatable; * for every group)"),
    click.option("--transactional-id", "transactional_id", multiple=True, metavar="ID",
                 help="a transactional id (repeatable; * for every one)"),
    click.option("--cluster", is_flag=True, help="the cluster resource"),
    click.option("--resource-pattern-type", "pattern", default="LITERAL", show_default=True,
                 metavar="LITERAL|PREFIXED|ANY|MATCH", help="how the names match (ANY and MATCH: list/remove only)"),
]
entry_options = [
    click.option("--allow-principal", "allow_principal", multiple=True, metavar="TYPE:NAME",
                 help="principal the ACL allows (repeatable), e.g. User:alice"),
    click.option("--deny-principal", "deny_principal", multiple=True, metavar="TYPE:NAME",
                 help="principal the ACL denies (repeatable)"),
    click.option("--allow-host", "allow_host", multiple=True, metavar="HOST", help="host of the allowing ACLs "
                 "(repeatable; default *)"),
    click.option("--deny-host", "deny_host", multiple=True, metavar="HOST", help="host of the denying ACLs "
                 "(repeatable; default *)"),
    click.option("--operation", multiple=True, metavar="OP", help="Read, Write, Create, Delete, Alter, Describe, "
                 "ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite or All (repeatable)"),
]


def _with(options: Sequence[Callable[[F], F]]) -> Callable[[F], F]:
    def deco(f: F) -> F:
        for o in reversed(options):
            f = o(f)
        return f
    return deco


@click.group(context_settings=CONTEXT)
def acl() -> None:
    """Manage ACLs (like kafka-acls.sh); the broker needs authorizer.class.name set."""


def _entries(allow_principal: tuple[str, ...], deny_principal: tuple[str, ...], allow_host: tuple[str, ...],
             deny_host: tuple[str, ...]) -> list[tuple[str, str, AclPermissionType]]:
    return ([(p, h, AclPermissionType.ALLOW) for p, h in product(allow_principal, allow_host or ("*",))]
            + [(p, h, AclPermissionType.DENY) for p, h in product(deny_principal, deny_host or ("*",))])


@acl.command("add", context_settings=CONTEXT)
@_with(resource_options)
@_with(entry_options)
@click.option("--producer", is_flag=True, help="what a producer needs on --topic (and --transactional-id)")
@click.option("--consumer", is_flag=True, help="what a consumer needs on --topic and --group")
@click.option("--idempotent", is_flag=True, help="with --producer: IDEMPOTENT_WRITE on the cluster")
@connection_options
def add(topic: tuple[str, ...], group: tuple[str, ...], transactional_id: tuple[str, ...], cluster: bool,
        pattern: str, allow_principal: tuple[str, ...], deny_principal: tuple[str, ...],
        allow_host: tuple[str, ...], deny_host: tuple[str, ...], operation: tuple[str, ...], producer: bool,
        consumer: bool, idempotent: bool, conn: Conn) -> None:
    """Add ACLs: every entry (principal, host, operation) on every resource given."""
    from oncelog.client.admin_acls import AclBinding, create_acls_sync

    pattern_type = _pattern(pattern)
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        fail("--resource-pattern-type must be LITERAL or PREFIXED when adding ACLs", code=2)
    entries = _entries(allow_principal, deny_principal, allow_host, deny_host)
    if not entries:
        fail("name who the ACLs are for with --allow-principal or --deny-principal", code=2)
    wanted: list[tuple[ResourceType, str, AclOperation]] = []
    if producer or consumer:
        if operation:
            fail("--operation does not go with --producer or --consumer", code=2)
        if not topic:
            fail("--producer and --consumer need --topic", code=2)
        if consumer and not group:
            fail("--consumer needs --group", code=2)
        if producer:
            wanted += [(R.TOPIC, t, op) for t in topic for op in (Op.WRITE, Op.DESCRIBE, Op.CREATE)]
            wanted += [(R.TRANSACTIONAL_ID, t, op) for t in transactional_id for op in (Op.WRITE, Op.DESCRIBE)]
            wanted += [(R.CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE)] if idempotent else []
        if consumer:
            wanted += [(R.TOPIC, t, op) for t in topic for op in (Op.READ, Op.DESCRIBE)]
            wanted += [(R.GROUP, g, Op.READ) for g in group]
    else:
        resources = _resources(topic, group, transactional_id, cluster)
        if not resources or not operation:
            fail("name the resources (--topic, --group, --transactional-id, --cluster) and --operation", code=2)
        ops = [_op(o) for o in operation]
        wanted = [(rt, name, op) for (rt, name), op in product(resources, ops)]
    bindings = [AclBinding(rt, name, pattern_type if rt != R.CLUSTER else PatternType.LITERAL, principal, host,
                           op, perm)
                for (rt, name, op), (principal, host, perm) in product(dict.fromkeys(wanted), entries)]
    with user_errors("cannot add the ACLs", conn):
        admin = _admin(conn)
        try:
            create_acls_sync(admin, bindings)
        finally:
            admin.close()
    for b in bindings:
        click.echo(f"added {_show(b)}")


def _filters(topic: tuple[str, ...], group: tuple[str, ...], transactional_id: tuple[str, ...], cluster: bool,
             pattern: str, principal: str | None = None) -> list[AclBindingFilter]:
    from oncelog.client.admin_acls import AclBindingFilter

    pattern_type = int(_pattern(pattern))
    resources = _resources(topic, group, transactional_id, cluster)
    if not resources:
        return [AclBindingFilter(principal=principal)]
    return [AclBindingFilter(int(rt), name, pattern_type, principal) for rt, name in resources]


@acl.command("list", context_settings=CONTEXT)
@_with(resource_options)
@click.option("--principal", metavar="TYPE:NAME", help="only the ACLs of this principal")
@connection_options
@json_option
def list_(topic: tuple[str, ...], group: tuple[str, ...], transactional_id: tuple[str, ...], cluster: bool,
          pattern: str, principal: str | None, conn: Conn, as_json: bool) -> None:
    """List ACLs: of the resources given (all without one), of --principal."""
    from oncelog.client.admin_acls import describe_acls_sync

    if pattern.upper() == "LITERAL" and not (topic or group or transactional_id or cluster):
        pattern = "ANY"
    with user_errors("cannot list the ACLs", conn):
        admin = _admin(conn)
        try:
            found = [b for f in _filters(topic, group, transactional_id, cluster, pattern, principal)
                     for b in describe_acls_sync(admin, f)]
        finally:
            admin.close()
    found = list(dict.fromkeys(found))
    if as_json:
        echo_json([{"resource_type": R(b.resource_type).name, "name": b.name,
                    "pattern_type": PatternType(b.pattern_type).name, "principal": b.principal, "host": b.host,
                    "operation": Op(b.operation).name, "permission": AclPermissionType(b.permission).name}
                   for b in found])
        return
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in found:
        by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    for (rt, name, pt), bindings in by_resource.items():
        click.echo(f"Current ACLs for resource `ResourcePattern(resourceType={R(rt).name}, name={name}, "
                   f"patternType={PatternType(pt).name})`:")
        for b in bindings:
            click.echo(f"\t(principal={b.principal}, host={b.host}, operation={Op(b.operation).name}, "
                       f"permissionType={AclPermissionType(b.permission).name})")
        click.echo("")


@acl.command("remove", context_settings=CONTEXT)
@_with(resource_options)
@_with(entry_options)
@click.option("--force", is_flag=True, help="do not ask before removing every ACL of a resource")
@connection_options
def remove(topic: tuple[str, ...], group: tuple[str, ...], transactional_id: tuple[str, ...], cluster: bool,
           pattern: str, allow_principal: tuple[str, ...], deny_principal: tuple[str, ...],
           allow_host: tuple[str, ...], deny_host: tuple[str, ...], operation: tuple[str, ...], force: bool,
           conn: Conn) -> None:
    """Remove ACLs: the entries given on the resources given, or every ACL of the resources."""
    from oncelog.client.admin_acls import AclBindingFilter, delete_acls_sync

    resources = _filters(topic, group, transactional_id, cluster, pattern)
    if not (topic or group or transactional_id or cluster):
        fail("name the resources (--topic, --group, --transactional-id, --cluster)", code=2)
    entries = _entries(allow_principal, deny_principal, allow_host, deny_host)
    ops = [int(_op(o)) for o in operation] or [int(Op.ANY)]
    if entries:
        filters = [AclBindingFilter(f.resource_type, f.name, f.pattern_type, principal, host, op, int(perm))
                   for f, (principal, host, perm), op in product(resources, entries, ops)]
    else:
        if not force and not click.confirm(f"Remove every ACL of {len(resources)} resource(s)?", default=False):
            fail("nothing removed", code=1)
        filters = [AclBindingFilter(f.resource_type, f.name, f.pattern_type, None, None, op) for f, op in
                   product(resources, ops)]
    with user_errors("cannot remove the ACLs", conn):
        admin = _admin(conn)
        try:
            removed = delete_acls_sync(admin, filters)
        finally:
            admin.close()
    for b in dict.fromkeys(b for bs in removed for b in bs):
        click.echo(f"removed {_show(b)}")
