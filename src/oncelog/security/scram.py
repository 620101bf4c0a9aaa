"""SCRAM credentials (RFC 5802, Kafka's ``ScramCredential``): what the broker keeps of a SCRAM user, never the
password: a random salt, the iteration count, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``.

Records of kind ``scram`` in the security store: the key is ``MECHANISM:user`` (``SCRAM-SHA-512:alice``), the value
Kafka's text form ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`` (``ScramCredentialUtils``).

KIP-554's AlterUserScramCredentials sends a salted password (``Hi(password, salt, i)``, computed by the client);
``oncelog user add`` has the password and salts it here with scramp (4096 iterations by default, Kafka's minimum).
The checks and error messages of both follow Kafka's ``ScramControlManager`` and ``ScramImage``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from oncelog.protocol.errors import ErrorCode

__all__ = ["Deletion", "MAX_ITERATIONS", "MECHANISMS", "ScramCredential", "ScramStoreError", "ScramUpdate",
           "Upsertion", "describe", "from_password", "from_salted_password", "key_of", "plan_alter", "split_key"]

#: Kafka's ScramMechanism types (the KIP-554 wire values) -> names, with each one's hash
MECHANISMS: dict[int, str] = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_TYPES = {name: t for t, name in MECHANISMS.items()}
_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations() of both
MAX_ITERATIONS = 16384  # Kafka's ScramControlManager.MAX_ITERATIONS


class ScramStoreError(ValueError):
    """A stored credential cannot be read (written by hand, or by a newer version)."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def encode(self) -> bytes:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}").encode()

    @staticmethod
    def decode(raw: bytes) -> ScramCredential:
        try:
            fields = dict(item.split("=", 1) for item in raw.decode("ascii").split(","))
            return ScramCredential(base64.b64decode(fields["salt"], validate=True),
                                   base64.b64decode(fields["stored_key"], validate=True),
                                   base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (ValueError, KeyError, UnicodeDecodeError) as e:
            raise ScramStoreError(f"a SCRAM credential record is damaged ({e})") from None

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """What scramp's server asks for a user: (salt, stored key, server key, iterations)."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def key_of(mechanism: str, user: str) -> str:
    return f"{mechanism}:{user}"


def split_key(key: str) -> tuple[str, str]:
    """``MECHANISM:user`` -> (mechanism, user) (a user name may contain ':'; a mechanism does not)."""
    mechanism, _, user = key.partition(":")
    return mechanism, user


def from_salted_password(mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
    """The credential of KIP-554's upsertion (Kafka's ``ScramFormatter.storedKey/serverKey``)."""
    name = _HASH[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", name).digest()
    return ScramCredential(salt, hashlib.new(name, client_key).digest(),
                           hmac.new(salted_password, b"Server Key", name).digest(), iterations)


def from_password(mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> ScramCredential:
    """A new credential with a random salt (scramp salts, with SASLprep of the password as RFC 5802 asks)."""
    import scramp

    salt, stored_key, server_key, i = scramp.ScramMechanism(mechanism).make_auth_info(password, iterations)
    return ScramCredential(salt, stored_key, server_key, i)


# --------------------------------------------------------------------------------- KIP-554 on the records
@dataclass(frozen=True)
class Deletion:
    name: str
    mechanism: int


@dataclass(frozen=True)
class Upsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass
class ScramUpdate:
    """What AlterUserScramCredentials does: records to put and delete, and (user, error code, message) per user."""

    puts: dict[str, bytes]
    deletes: list[str]
    results: list[tuple[str, int, str | None]]


def _check_name(name: str, mechanism: int) -> tuple[int, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISMS:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def plan_alter(records: Mapping[str, bytes], deletions: Sequence[Deletion],
               upsertions: Sequence[Upsertion]) -> ScramUpdate:
    """KIP-554's AlterUserScramCredentials on ``records`` (Kafka's ``ScramControlManager.alterCredentials``): a user
    altered twice in one request fails whole (DUPLICATE_RESOURCE); the rest are applied together."""
    errors: dict[str, tuple[int, str]] = {}
    deletes: dict[str, Deletion] = {}
    upserts: dict[str, Upsertion] = {}
    duplicate = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    for d in deletions:
        if d.name in errors:
            continue
        if deletes.pop(d.name, None) is not None:
            errors[d.name] = duplicate
            continue
        err = _check_name(d.name, d.mechanism)
        if err is None and key_of(MECHANISMS[d.mechanism], d.name) not in records:
            err = ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        if err is not None:
            errors[d.name] = err
        else:
            deletes[d.name] = d
    for u in upsertions:
        if u.name in errors:
            continue
        if deletes.pop(u.name, None) is not None or upserts.pop(u.name, None) is not None:
            errors[u.name] = duplicate
            continue
        err = _check_name(u.name, u.mechanism)
        if err is None and u.iterations < MIN_ITERATIONS:
            err = ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        elif err is None and u.iterations > MAX_ITERATIONS:
            err = ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        elif err is None and (not u.salt or not u.salted_password):
            err = ErrorCode.UNACCEPTABLE_CREDENTIAL, "Credential salt and salted password must not be empty"
        if err is not None:
            errors[u.name] = err
        else:
            upserts[u.name] = u
    out = ScramUpdate({}, [], [])
    for d in deletes.values():
        out.deletes.append(key_of(MECHANISMS[d.mechanism], d.name))
        out.results.append((d.name, ErrorCode.NONE, None))
    for u in upserts.values():
        mech = MECHANISMS[u.mechanism]
        out.puts[key_of(mech, u.name)] = from_salted_password(mech, u.salt, u.salted_password, u.iterations).encode()
        out.results.append((u.name, ErrorCode.NONE, None))
    for name, (code, message) in errors.items():
        out.results.append((name, code, message))
    return out


def describe(records: Mapping[str, bytes], users: Iterable[str] | None
             ) -> list[tuple[str, int, str | None, list[tuple[int, int]]]]:
    """KIP-554's DescribeUserScramCredentials (Kafka's ``ScramImage.describe``): (user, error code, message,
    [(mechanism type, iterations)]) for the users named (none: every user)."""
    by_user: dict[str, list[tuple[int, int]]] = {}
    for key, raw in sorted(records.items()):
        mech, user = split_key(key)
        if mech in _TYPES:
            try:
                by_user.setdefault(user, []).append((_TYPES[mech], ScramCredential.decode(raw).iterations))
            except ScramStoreError:
                continue
    names = list(users) if users else []
    wanted: dict[str, bool] = {}  # user -> named twice
    for name in names or sorted(by_user):
        wanted[name] = name in wanted
    out: list[tuple[str, int, str | None, list[tuple[int, int]]]] = []
    for name, twice in wanted.items():
        if twice:
            out.append((name, ErrorCode.DUPLICATE_RESOURCE,
                        f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}", []))
        elif name in by_user:
            out.append((name, ErrorCode.NONE, None, by_user[name]))
        else:
            out.append((name, ErrorCode.RESOURCE_NOT_FOUND,
                        f"Attempt to describe a user credential that does not exist: {name}", []))
    return out
