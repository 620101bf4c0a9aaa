"""Client-side exceptions. Every broker error code surfaces as :class:`KafkaError` with its :class:`ErrorCode`."""

from __future__ import annotations

from oncelog.protocol.errors import ErrorCode, describe, is_retriable, lookup

__all__ = [
    "ConfigError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "UnsupportedVersionError",
    "raise_for_code",
]


class KafkaError(Exception):
    """An error with a Kafka error code. ``retriable`` says whether the same request may succeed if repeated.

    ``code`` is an :class:`ErrorCode` when this client knows it, else the raw int.
    """

    def __init__(self, code: int, message: str | None = None, *, retriable: bool | None = None) -> None:
        known = lookup(code)
        self.code: ErrorCode | int = known if known is not None else int(code)
        self.name = known.name if known is not None else f"UNKNOWN_ERROR_{int(code)}"
        self.message = message or describe(code)
        self.retriable = is_retriable(code) if retriable is None else retriable
        super().__init__(f"{self.name}: {self.message}")


class KafkaConnectionError(KafkaError):
    """The connection to a broker failed or closed (NETWORK_EXCEPTION, retriable)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NETWORK_EXCEPTION, message, retriable=True)


class KafkaTimeoutError(KafkaError):
    """A request or operation did not finish in time (REQUEST_TIMED_OUT, retriable)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message, retriable=True)


class UnsupportedVersionError(KafkaError):
    """The broker and this client share no version of an API (UNSUPPORTED_VERSION, not retriable)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNSUPPORTED_VERSION, message, retriable=False)


class ConfigError(ValueError):
    """A client configuration key or value is invalid (raised before any network activity)."""


def raise_for_code(code: int, message: str | None = None, context: str | None = None) -> None:
    """Raise :class:`KafkaError` for a non-zero ``code``; ``context`` (e.g. ``"topic 'x'"``) prefixes the text."""
    if code == 0:
        return
    text = message or describe(code)
    if context:
        text = f"{context}: {text}"
    raise KafkaError(code, text)
