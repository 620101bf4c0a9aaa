"""The sans-I/O parts of authentication: the SASL state machine (Kafka's SaslServerAuthenticator), PLAIN and SCRAM
servers against scramp's client, SCRAM credential records and KIP-554's checks, JAAS text, principal mapping."""

from __future__ import annotations

import hashlib
import os

import pytest
import scramp

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.jaas import parse_jaas
from oncelog.security.authenticator import AuthFailure, SaslServerAuthenticator, State
from oncelog.security.mechanisms import MechanismServer, PlainServer, ScramServer
from oncelog.security.principal import KafkaPrincipal
from oncelog.security.principal_mapping import NoMatchingRule, PrincipalMapper
from oncelog.security.scram import (
    Deletion,
    ScramCredential,
    Upsertion,
    describe,
    from_password,
    from_salted_password,
    key_of,
    plan_alter,
)

API_VERSIONS, SASL_HANDSHAKE, METADATA = 18, 17, 3


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def authenticator(clock: Clock, max_reauth_ms: int = 0, users: dict[str, str] | None = None,
                  scram: dict[str, ScramCredential] | None = None) -> SaslServerAuthenticator:
    def server_for(mech: str) -> MechanismServer:
        if mech == "PLAIN":
            return PlainServer(lambda: users or {})
        return ScramServer(mech, lambda u: (scram or {}).get(u))

    return SaslServerAuthenticator(["PLAIN", "SCRAM-SHA-512"], server_for, lambda _m: max_reauth_ms, clock)


def scram_exchange(auth: SaslServerAuthenticator, user: str, password: str, version: int = 1) -> None:
    client = scramp.ScramClient(["SCRAM-SHA-512"], user, password)
    first = auth.authenticate(client.get_client_first().encode(), version)
    client.set_server_first(first.auth_bytes.decode())
    final = auth.authenticate(client.get_client_final().encode(), version)
    client.set_server_final(final.auth_bytes.decode())  # the client checks the server's signature too
    assert final.complete


def test_plain_then_requests_flow_and_the_principal_is_the_user() -> None:
    clock = Clock()
    auth = authenticator(clock, users={"alice": "s3cret"})
    assert auth.accepts(API_VERSIONS)
    auth.check_request(API_VERSIONS, "api_versions")
    assert auth.handshake("PLAIN", 1).mechanisms == ["PLAIN", "SCRAM-SHA-512"]
    result = auth.authenticate(b"\0alice\0s3cret", 1)
    assert result.complete and result.session_lifetime_ms == 0
    assert auth.principal == KafkaPrincipal("User", "alice") and not auth.authenticating
    assert not auth.accepts(METADATA) and not auth.session_expired()


@pytest.mark.parametrize(("token", "says"), [
    (b"\0alice\0wrong", "Invalid username or password"),
    (b"\0nobody\0s3cret", "Invalid username or password"),
    (b"\0alice", "expected 3 tokens, got 2"),
    (b"\0\0s3cret", "username not specified"),
    (b"bob\0alice\0s3cret", "authorization id that is different from username"),
    (b"\xff\xfe", "not UTF-8"),
])
def test_plain_failures_answer_kafkas_messages(token: bytes, says: str) -> None:
    auth = authenticator(Clock(), users={"alice": "s3cret"})
    auth.handshake("PLAIN", 1)
    with pytest.raises(AuthFailure) as e:
        auth.authenticate(token, 1)
    assert e.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and says in (e.value.client_message or "")
    assert auth.state is State.FAILED


def test_requests_before_authentication_close_the_connection_as_kafka_does() -> None:
    auth = authenticator(Clock())
    with pytest.raises(AuthFailure) as e:
        auth.check_request(METADATA, "metadata")
    assert e.value.error_code is None  # no answer: the connection closes
    auth = authenticator(Clock())
    auth.handshake("PLAIN", 1)
    with pytest.raises(AuthFailure) as e:
        auth.check_request(METADATA, "metadata")
    assert e.value.error_code == ErrorCode.ILLEGAL_SASL_STATE
    auth = authenticator(Clock())
    with pytest.raises(AuthFailure) as e:
        auth.handshake("GSSAPI", 1)
    assert e.value.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and e.value.mechanisms == ["PLAIN",
                                                                                                  "SCRAM-SHA-512"]


def test_scram_with_scramps_client_and_the_generic_failure() -> None:
    cred = from_password("SCRAM-SHA-512", "pw")
    auth = authenticator(Clock(), scram={"bob": cred})
    auth.handshake("SCRAM-SHA-512", 1)
    scram_exchange(auth, "bob", "pw")
    assert auth.principal == KafkaPrincipal("User", "bob")
    for user, password in (("bob", "wrong"), ("nobody", "pw")):
        auth = authenticator(Clock(), scram={"bob": cred})
        auth.handshake("SCRAM-SHA-512", 1)
        with pytest.raises(AuthFailure) as e:
            scram_exchange(auth, user, password)
        assert e.value.client_message == ("Authentication failed during authentication due to invalid credentials "
                                          "with SASL mechanism SCRAM-SHA-512")


def test_a_replayed_scram_exchange_fails() -> None:
    """The server's nonce is new each time: a recorded client-final does not prove anything on another exchange."""
    cred = from_password("SCRAM-SHA-512", "pw")
    auth = authenticator(Clock(), scram={"bob": cred})
    auth.handshake("SCRAM-SHA-512", 1)
    client = scramp.ScramClient(["SCRAM-SHA-512"], "bob", "pw")
    first_msg = client.get_client_first().encode()
    client.set_server_first(auth.authenticate(first_msg, 1).auth_bytes.decode())
    final_msg = client.get_client_final().encode()
    assert auth.authenticate(final_msg, 1).complete
    replay = authenticator(Clock(), scram={"bob": cred})
    replay.handshake("SCRAM-SHA-512", 1)
    replay.authenticate(first_msg, 1)
    with pytest.raises(AuthFailure):
        replay.authenticate(final_msg, 1)


def test_reauthentication_keeps_mechanism_and_principal_and_the_session_expires() -> None:
    clock = Clock()
    users = {"alice": "a", "bob": "b"}
    auth = authenticator(clock, max_reauth_ms=10_000, users=users)
    auth.handshake("PLAIN", 1)
    assert auth.authenticate(b"\0alice\0a", 1).session_lifetime_ms == 10_000
    assert auth.accepts(SASL_HANDSHAKE)  # v1 SaslAuthenticate seen: the client may re-authenticate
    clock.ms += 5_000
    auth.handshake("PLAIN", 1)
    assert auth.reauthenticating and auth.accepts(METADATA)  # in re-authentication the authenticator takes all
    assert auth.authenticate(b"\0alice\0a", 1).complete
    clock.ms += 9_000
    assert not auth.session_expired()  # the new session started 5 s in
    clock.ms += 2_000
    assert auth.session_expired()
    auth.handshake("PLAIN", 1)
    with pytest.raises(AuthFailure) as e:
        auth.authenticate(b"\0bob\0b", 1)
    assert "Cannot change principals during re-authentication from User.alice: User.bob" in str(e.value)
    auth = authenticator(clock, users=users)
    auth.handshake("PLAIN", 1)
    auth.authenticate(b"\0alice\0a", 1)
    auth.handshake("SCRAM-SHA-512", 1)
    with pytest.raises(AuthFailure, match="not supported for re-authentication of mechanism 'PLAIN'"):
        auth.authenticate(b"n,,n=alice,r=x", 1)


def test_a_client_of_saslauthenticate_v0_cannot_reauthenticate() -> None:
    auth = authenticator(Clock(), users={"alice": "a"})
    auth.handshake("PLAIN", 1)
    auth.authenticate(b"\0alice\0a", 0)
    assert not auth.accepts(SASL_HANDSHAKE)  # goes to the handler, which answers ILLEGAL_SASL_STATE


def test_scram_records_and_kip_554_checks() -> None:
    salt, pw = os.urandom(16), "secret"
    salted = hashlib.pbkdf2_hmac("sha256", pw.encode(), salt, 4096)
    cred = from_salted_password("SCRAM-SHA-256", salt, salted, 4096)
    assert ScramCredential.decode(cred.encode()) == cred
    assert cred.encode().startswith(b"salt=") and b"secret" not in cred.encode()
    # the credential made from the salted password is the one scramp makes from the password itself
    assert scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info(pw, 4096, salt)[1:3] == (cred.stored_key,
                                                                                       cred.server_key)
    records = {key_of("SCRAM-SHA-256", "alice"): cred.encode()}
    plan = plan_alter(records, [Deletion("ghost", 1), Deletion("alice", 3)],
                      [Upsertion("bob", 2, 4096, salt, salted), Upsertion("carol", 2, 100, salt, salted),
                       Upsertion("", 2, 4096, salt, salted), Upsertion("dave", 2, 4096, salt, salted),
                       Upsertion("dave", 1, 4096, salt, salted), Upsertion("eve", 2, 20000, salt, salted)])
    results = {u: (code, msg) for u, code, msg in plan.results}
    assert results["bob"] == (ErrorCode.NONE, None) and list(plan.puts) == ["SCRAM-SHA-512:bob"]
    assert results["ghost"] == (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not "
                                                                "exist")
    assert results["alice"] == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    assert results["carol"] == (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    assert results["eve"] == (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    assert results[""] == (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    assert results["dave"][0] == ErrorCode.DUPLICATE_RESOURCE and not plan.deletes
    rows = {u: (code, infos) for u, code, _, infos in describe(records, ["alice", "ghost", "alice"])}
    assert rows["alice"][0] == ErrorCode.DUPLICATE_RESOURCE and rows["ghost"][0] == ErrorCode.RESOURCE_NOT_FOUND
    assert describe(records, None) == [("alice", ErrorCode.NONE, None, [(1, 4096)])]


def test_jaas_config_as_kafka_writes_it() -> None:
    e = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                   'password="a \\"quoted\\"; secret" user_admin="a" user_bob=b;')
    assert (e.module.endswith("PlainLoginModule"), e.flag, e.username) == (True, "required", "admin")
    assert e.password == 'a "quoted"; secret' and e.users() == {"admin": "a", "bob": "b"}
    for bad in ("", "Module;", 'Module required username="x"', "Module required a=b; Other required;",
                "Module maybe;"):
        with pytest.raises(ValueError):
            parse_jaas(bad)


def test_certificate_subjects_map_to_principal_names_as_kafkas_rules_say() -> None:
    rules = PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=([^,]*),.*$/$1/, DEFAULT")
    assert rules.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert rules.name("CN=alice,OU=eng,O=Acme") == "alice"
    assert rules.name("O=Acme") == "O=Acme"
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=(.*)$/$1/U").name("O=Acme")
    assert PrincipalMapper("RULE:^CN=(.*)$/$1/U").name("CN=bob") == "BOB"
    for bad in ("RULE:a/b", "nonsense", "RULE:(/x/"):
        with pytest.raises(ValueError):
            PrincipalMapper(bad)
