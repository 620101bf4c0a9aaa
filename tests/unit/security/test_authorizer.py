"""The authorizer decides as Kafka's StandardAuthorizer: DENY wins, LITERAL / PREFIXED / wildcard patterns, hosts,
super users, allow.everyone.if.no.acl.found, the implied DESCRIBE and DESCRIBE_CONFIGS, KIP-679's check by
resource type; its index follows the records of the store; the filters of Describe/DeleteAcls match as Kafka's."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    parse_enum,
)
from oncelog.security.authorizer import StandardAuthorizer, parse_super_users
from oncelog.security.store import ACLS, MemorySecurityStore

Op, R, P = AclOperation, ResourceType, PatternType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(name: str, op: AclOperation = Op.READ, perm: AclPermissionType = ALLOW, principal: str = ALICE,
        host: str = "*", rtype: ResourceType = R.TOPIC, pattern: PatternType = P.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*bindings: AclBinding, super_users: tuple[str, ...] = (),
               allow_if_no_acl: bool = False) -> StandardAuthorizer:
    store = MemorySecurityStore({ACLS: dict(b.record() for b in bindings)})
    return StandardAuthorizer(store, super_users, allow_if_no_acl)


def can(a: StandardAuthorizer, op: AclOperation, name: str, principal: str = ALICE, host: str = HOST,
        rtype: ResourceType = R.TOPIC) -> bool:
    return a.authorize(principal, host, op, rtype, name)


def test_literal_prefixed_and_wildcard_patterns() -> None:
    a = authorizer(acl("orders"), acl("logs-", pattern=P.PREFIXED), acl("*", op=Op.WRITE))
    assert can(a, Op.READ, "orders") and not can(a, Op.READ, "orders2")
    assert can(a, Op.READ, "logs-x") and can(a, Op.READ, "logs-") and not can(a, Op.READ, "logs")
    assert can(a, Op.WRITE, "anything") and not can(a, Op.READ, "anything")
    assert not can(a, Op.READ, "orders", principal=BOB)


def test_deny_wins_over_allow_and_only_for_its_own_operation() -> None:
    a = authorizer(acl("t", Op.ALL), acl("t", Op.WRITE, DENY), acl("t", Op.READ, DENY, host="10.0.0.9"))
    assert can(a, Op.READ, "t") and not can(a, Op.WRITE, "t")
    assert not can(a, Op.READ, "t", host="10.0.0.9")
    # a DENY of READ does not deny DESCRIBE (implication is for ALLOW only)
    assert authorizer(acl("t", Op.DESCRIBE), acl("t", Op.READ, DENY)).authorize(ALICE, HOST, Op.DESCRIBE, R.TOPIC, "t")
    # a prefixed DENY beats a literal ALLOW; a User:* DENY applies to everyone
    assert not can(authorizer(acl("te"), acl("t", Op.READ, DENY, pattern=P.PREFIXED)), Op.READ, "te")
    assert not can(authorizer(acl("t"), acl("t", Op.READ, DENY, principal="User:*")), Op.READ, "t")


def test_implied_operations() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert can(authorizer(acl("t", op)), Op.DESCRIBE, "t"), op
    for op in (Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS):
        assert not can(authorizer(acl("t", op)), Op.DESCRIBE, "t"), op
    assert can(authorizer(acl("t", Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS, "t")
    assert not can(authorizer(acl("t", Op.ALTER)), Op.DESCRIBE_CONFIGS, "t")
    assert not can(authorizer(acl("t", Op.WRITE)), Op.READ, "t")


def test_super_users_and_the_no_acl_default() -> None:
    a = authorizer(acl("t", Op.ALL, DENY, principal="User:*"), super_users=("User:admin",))
    assert can(a, Op.WRITE, "t", principal="User:admin") and not can(a, Op.WRITE, "t")
    assert not can(authorizer(), Op.READ, "free")
    b = authorizer(acl("owned", principal=BOB), allow_if_no_acl=True)
    assert can(b, Op.READ, "free") and can(b, Op.ALTER, "free", rtype=R.CLUSTER)
    assert not can(b, Op.READ, "owned")  # the topic has ACLs (for someone else): no default for it
    assert parse_super_users(" User:a ; User:b;") == {"User:a", "User:b"}
    with pytest.raises(ValueError):
        parse_super_users("alice")


def test_authorize_by_resource_type_is_kip_679() -> None:
    def by_type(*bindings: AclBinding, principal: str = ALICE, **kw: bool) -> bool:
        return authorizer(*bindings, **kw).authorize_by_resource_type(  # type: ignore[arg-type]
            principal, HOST, Op.WRITE, R.TOPIC)

    assert not by_type()
    assert by_type(allow_if_no_acl=True)
    assert by_type(acl("out", Op.WRITE))
    assert by_type(acl("out-", Op.WRITE, pattern=P.PREFIXED))
    assert by_type(acl("*", Op.ALL))
    assert not by_type(acl("out", Op.WRITE), acl("out", Op.WRITE, DENY))
    assert not by_type(acl("out-x", Op.WRITE), acl("out", Op.WRITE, DENY, pattern=P.PREFIXED))
    assert not by_type(acl("out", Op.WRITE), acl("*", Op.WRITE, DENY))
    assert not by_type(acl("out", Op.READ))
    assert not by_type(acl("out", Op.WRITE, principal=BOB))
    assert by_type(acl("out", Op.WRITE, principal="User:*"))
    assert by_type(super_users=("User:alice",))  # type: ignore[arg-type]


def test_authorized_operations_bits() -> None:
    a = authorizer(acl("t", Op.READ), acl("t", Op.ALTER_CONFIGS))
    bits = a.authorized_operations(ALICE, HOST, R.TOPIC, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.ALTER_CONFIGS) | (1 << Op.DESCRIBE_CONFIGS)


def test_the_index_follows_the_store() -> None:
    store = MemorySecurityStore()
    a = StandardAuthorizer(store)
    assert not can(a, Op.READ, "t")
    results = asyncio.run(a.create_acls([acl("t"), acl("t"), acl("", Op.READ), acl("x", rtype=R.CLUSTER)]))
    assert [r is None for r in results] == [True, True, False, False]
    assert "empty" in str(results[2]) and CLUSTER_NAME in str(results[3])
    assert len(store.records(ACLS)) == 1 and can(a, Op.READ, "t")  # the same binding twice is one record
    asyncio.run(store.write(ACLS, {"junk": b"{"}))  # an unreadable record is skipped, the rest still applies
    assert can(a, Op.READ, "t")
    deleted = asyncio.run(a.delete_acls([AclBindingFilter(principal=ALICE), AclBindingFilter(principal=BOB)]))
    assert deleted == [[acl("t")], []]
    assert not can(a, Op.READ, "t")


def test_filters_match_as_kafka() -> None:
    lit, pre, wild = acl("orders"), acl("ord", pattern=P.PREFIXED), acl("*")
    other = acl("invoices", Op.WRITE, DENY, principal=BOB, host="1.2.3.4", rtype=R.GROUP)
    every = [lit, pre, wild, other]

    def sel(**kw: object) -> list[AclBinding]:
        return [b for b in every if AclBindingFilter(**kw).matches(b)]  # type: ignore[arg-type]

    assert sel() == every
    assert sel(resource_type=R.TOPIC, name="orders", pattern_type=P.MATCH) == [lit, pre, wild]
    assert sel(resource_type=R.TOPIC, name="orders", pattern_type=P.ANY) == [lit]
    assert sel(name="ord", pattern_type=P.PREFIXED) == [pre]
    assert sel(name="ord", pattern_type=P.LITERAL) == []
    assert sel(principal=BOB) == sel(host="1.2.3.4") == sel(permission=DENY) == sel(operation=Op.WRITE) == [other]
    assert AclBindingFilter(operation=Op.UNKNOWN).is_unknown() and not AclBindingFilter().is_unknown()


def test_enum_names_in_kafka_spellings() -> None:
    assert parse_enum(AclOperation, "IdempotentWrite") is Op.IDEMPOTENT_WRITE
    assert parse_enum(AclOperation, "describe_configs") is Op.DESCRIBE_CONFIGS
    assert parse_enum(ResourceType, "TransactionalId") is R.TRANSACTIONAL_ID
    assert parse_enum(PatternType, "prefixed") is P.PREFIXED
    assert AclOperation.of(99) is Op.UNKNOWN
    with pytest.raises(ValueError, match="one of"):
        parse_enum(AclOperation, "Fly")


# ---------------------------------------------------------------------------------------- against a reference
def reference(bindings: list[AclBinding], principal: str, host: str, op: AclOperation, rtype: ResourceType,
              name: str, super_users: frozenset[str], allow_if_no_acl: bool) -> bool:
    """The rules as Kafka's documentation states them, evaluated over every binding, without an index."""
    if principal in super_users:
        return True
    applies = [b for b in bindings if b.resource_type == rtype and (
        (b.pattern_type == P.LITERAL and b.name in (name, "*")) or
        (b.pattern_type == P.PREFIXED and name.startswith(b.name)))]
    if not applies:
        return allow_if_no_acl
    mine = [b for b in applies if b.principal in (principal, "User:*") and b.host in (host, "*")]
    if any(b.permission == DENY and b.operation in (op, Op.ALL) for b in mine):
        return False
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}, Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}
    return any(b.permission == ALLOW and (b.operation in (op, Op.ALL) or b.operation in implied.get(op, ()))
               for b in mine)


NAMES = st.sampled_from(["a", "ab", "b", "*"])
OPS = st.sampled_from([Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS])
PRINCIPALS = st.sampled_from([ALICE, BOB, "User:*"])
HOSTS = st.sampled_from(["*", "*", HOST, "10.0.0.2"])
BINDINGS = st.builds(AclBinding, st.sampled_from([R.TOPIC, R.GROUP]), NAMES,
                     st.sampled_from([P.LITERAL, P.PREFIXED]), PRINCIPALS, HOSTS, OPS, st.sampled_from([ALLOW, DENY]))


@settings(max_examples=600, deadline=None)
@given(st.lists(BINDINGS, max_size=8), st.sampled_from([ALICE, BOB]), st.sampled_from([HOST, "10.0.0.2"]),
       OPS.filter(lambda o: o != Op.ALL), st.sampled_from([R.TOPIC, R.GROUP]), NAMES,
       st.booleans(), st.booleans())
def test_decisions_agree_with_a_reference_evaluation(bindings: list[AclBinding], principal: str, host: str,
                                                     op: AclOperation, rtype: ResourceType, name: str,
                                                     alice_super: bool, allow_if_no_acl: bool) -> None:
    supers = frozenset({ALICE} if alice_super else ())
    a = authorizer(*bindings, super_users=tuple(supers), allow_if_no_acl=allow_if_no_acl)
    assert a.authorize(principal, host, op, rtype, name) == reference(
        bindings, principal, host, op, rtype, name, supers, allow_if_no_acl)
