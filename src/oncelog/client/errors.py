"""Client-side errors, shaped as confluent-kafka's: :class:`KafkaError` with ``code()``, ``name()``, ``str()``,
``retriable()``, ``fatal()``, ``txn_requires_abort()`` and :class:`KafkaException` (``args[0]`` is the KafkaError).

Broker error codes keep Kafka's numbers; failures that happen inside the client (timeouts, closed connections,
nothing to commit...) use librdkafka's negative local codes (``KafkaError._TIMED_OUT`` ...), and ``name()``
spells a code as confluent-kafka does, so code that compares codes or names moves unchanged.

One difference in shape, none in use: here :class:`KafkaError` is itself raisable (a subclass of
:class:`KafkaException` whose ``args[0]`` is the error itself), so ``except KafkaException as e:
e.args[0].code()`` works for every error this client raises, and oncelog's finer classes
(:class:`KafkaTimeoutError`, :class:`CommitFailedError` ...) can be caught on their own.
"""

from __future__ import annotations

import builtins
from typing import Any

from oncelog.protocol.errors import ErrorCode, describe, is_retriable, lookup

__all__ = [
    "ConfigError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaException",
    "KafkaTimeoutError",
    "UnsupportedVersionError",
    "raise_for_code",
]

#: librdkafka's local (client-side) error codes, as confluent-kafka exposes them on KafkaError
LOCAL_CODES: dict[str, int] = {
    "_BAD_MSG": -199, "_BAD_COMPRESSION": -198, "_DESTROY": -197, "_FAIL": -196, "_TRANSPORT": -195,
    "_CRIT_SYS_RESOURCE": -194, "_RESOLVE": -193, "_MSG_TIMED_OUT": -192, "_PARTITION_EOF": -191,
    "_UNKNOWN_PARTITION": -190, "_FS": -189, "_UNKNOWN_TOPIC": -188, "_ALL_BROKERS_DOWN": -187,
    "_INVALID_ARG": -186, "_TIMED_OUT": -185, "_QUEUE_FULL": -184, "_ISR_INSUFF": -183, "_NODE_UPDATE": -182,
    "_SSL": -181, "_WAIT_COORD": -180, "_UNKNOWN_GROUP": -179, "_IN_PROGRESS": -178, "_PREV_IN_PROGRESS": -177,
    "_EXISTING_SUBSCRIPTION": -176, "_ASSIGN_PARTITIONS": -175, "_REVOKE_PARTITIONS": -174, "_CONFLICT": -173,
    "_STATE": -172, "_UNKNOWN_PROTOCOL": -171, "_NOT_IMPLEMENTED": -170, "_AUTHENTICATION": -169,
    "_NO_OFFSET": -168, "_OUTDATED": -167, "_TIMED_OUT_QUEUE": -166, "_UNSUPPORTED_FEATURE": -165,
    "_WAIT_CACHE": -164, "_INTR": -163, "_KEY_SERIALIZATION": -162, "_VALUE_SERIALIZATION": -161,
    "_KEY_DESERIALIZATION": -160, "_VALUE_DESERIALIZATION": -159, "_PARTIAL": -158, "_READ_ONLY": -157,
    "_NOENT": -156, "_UNDERFLOW": -155, "_INVALID_TYPE": -154, "_RETRY": -153, "_PURGE_QUEUE": -152,
    "_PURGE_INFLIGHT": -151, "_FATAL": -150, "_INCONSISTENT": -149, "_GAPLESS_GUARANTEE": -148,
    "_MAX_POLL_EXCEEDED": -147, "_UNKNOWN_BROKER": -146, "_NOT_CONFIGURED": -145, "_FENCED": -144,
    "_APPLICATION": -143, "_ASSIGNMENT_LOST": -142, "_NOOP": -141, "_AUTO_OFFSET_RESET": -140,
    "_LOG_TRUNCATION": -139, "_INVALID_DIFFERENT_RECORD": -138, "_DESTROY_BROKER": -137,
}
_LOCAL_NAMES = {v: k for k, v in LOCAL_CODES.items()}
_LOCAL_TEXT = {
    -195: "Local: Broker transport failure", -192: "Local: Message timed out", -191: "Broker: No more messages",
    -188: "Local: Unknown topic", -190: "Local: Unknown partition", -186: "Local: Invalid argument or configuration",
    -185: "Local: Timed out", -172: "Local: Erroneous state", -168: "Local: No offset stored",
    -150: "Local: Fatal error", -144: "Local: This instance has been fenced by a newer instance",
}
#: where librdkafka names a broker code differently from Kafka (name() returns librdkafka's spelling; both
#: spellings are KafkaError class attributes)
_RDKAFKA_NAMES = {
    0: "NO_ERROR", -1: "UNKNOWN", 2: "INVALID_MSG", 3: "UNKNOWN_TOPIC_OR_PART", 4: "INVALID_MSG_SIZE",
    6: "NOT_LEADER_FOR_PARTITION", 10: "MSG_SIZE_TOO_LARGE", 11: "STALE_CTRL_EPOCH", 17: "TOPIC_EXCEPTION",
}


def code_name(code: int) -> str:
    """confluent-kafka's name for ``code``."""
    name = _RDKAFKA_NAMES.get(code) or _LOCAL_NAMES.get(code)
    if name is not None:
        return name
    known = lookup(code)
    return known.name if known is not None else f"ERR_{int(code)}?"


class KafkaException(Exception):
    """What the client raises: ``args[0]`` is a :class:`KafkaError` (as in confluent-kafka)."""


class KafkaError(KafkaException):
    """An error with a Kafka (or librdkafka-local) error code; confluent-kafka's accessors.

    ``KafkaError(code, reason=None, fatal=False, retriable=None, txn_requires_abort=False)``; ``retriable``
    defaults to Kafka's classification of the code. Compares equal to its int code (``err == KafkaError._TIMED_OUT``).
    """

    def __init__(self, error: int, reason: builtins.str | None = None, fatal: bool = False, retriable: bool | None = None,
                 txn_requires_abort: bool = False) -> None:
        code = int(error)
        known = lookup(code)
        self._code: int = known if known is not None else code
        self.message: builtins.str = reason or _LOCAL_TEXT.get(code) or describe(code)
        self._retriable = is_retriable(code) if retriable is None else bool(retriable)
        self._fatal = bool(fatal)
        self._txn_requires_abort = bool(txn_requires_abort)
        super().__init__()
        self.args = (self,)

    def code(self) -> int:
        """The error code (an :class:`ErrorCode`, which is an int, when Kafka defines it)."""
        return self._code

    def name(self) -> builtins.str:
        return code_name(self._code)

    def str(self) -> builtins.str:
        """The human-readable reason."""
        return self.message

    def retriable(self) -> bool:
        return self._retriable

    def fatal(self) -> bool:
        return self._fatal

    def txn_requires_abort(self) -> bool:
        return self._txn_requires_abort

    def __str__(self) -> builtins.str:
        return f"{self.name()}: {self.message}"

    def __repr__(self) -> builtins.str:
        return f'KafkaError{{code={self.name()},val={int(self._code)},str="{self.message}"}}'

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return int(self._code) == int(other._code)
        if isinstance(other, int):
            return int(self._code) == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(int(self._code))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.__dict__))


def _rebuild(cls: type[KafkaError], state: dict[str, Any]) -> KafkaError:
    err = cls.__new__(cls)
    err.__dict__.update(state)
    err.args = (err,)
    return err


for _name, _code in LOCAL_CODES.items():
    setattr(KafkaError, _name, _code)
for _known in ErrorCode:
    if _known > 0:
        setattr(KafkaError, _known.name, int(_known))
for _code, _name in _RDKAFKA_NAMES.items():
    setattr(KafkaError, _name, _code)


class KafkaConnectionError(KafkaError):
    """The connection to a broker failed or closed (NETWORK_EXCEPTION, retriable)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NETWORK_EXCEPTION, message, retriable=True)


class KafkaTimeoutError(KafkaError):
    """A request or operation did not finish in time (``KafkaError._TIMED_OUT``, retriable)."""

    def __init__(self, message: str) -> None:
        super().__init__(LOCAL_CODES["_TIMED_OUT"], message, retriable=True)


class UnsupportedVersionError(KafkaError):
    """The broker and this client share no version of an API (UNSUPPORTED_VERSION, not retriable)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNSUPPORTED_VERSION, message, retriable=False)


class ConfigError(KafkaError, ValueError):
    """A client configuration key or value is invalid (``KafkaError._INVALID_ARG``; raised before any network
    activity). Also a ValueError."""

    def __init__(self, message: str) -> None:
        super().__init__(LOCAL_CODES["_INVALID_ARG"], message, retriable=False)


def raise_for_code(code: int, message: str | None = None, context: str | None = None) -> None:
    """Raise :class:`KafkaError` for a non-zero ``code``; ``context`` (e.g. ``"topic 'x'"``) prefixes the text."""
    if code == 0:
        return
    text = message or describe(code)
    if context:
        text = f"{context}: {text}"
    raise KafkaError(code, text)
