"""Kafka's ``KafkaPrincipal``: who a request comes from, as ``type:name`` (``User:alice``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANONYMOUS", "KafkaPrincipal", "USER_TYPE", "parse_principal"]

#: the principal type of every principal Kafka's authenticators build (``KafkaPrincipal.USER_TYPE``)
USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A type (``User``) and a name; ``str()`` gives Kafka's ``User:alice`` form."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


#: Kafka's ``KafkaPrincipal.ANONYMOUS``: the principal of an unauthenticated (PLAINTEXT) connection
ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def parse_principal(text: str) -> KafkaPrincipal:
    """``User:alice`` -> KafkaPrincipal("User", "alice") (Kafka's ``SecurityUtils.parseKafkaPrincipal``). The name
    may contain ':'; the type may not be empty. Raises ValueError with what is wrong."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"{text!r} is not a principal: expected TYPE:NAME, e.g. User:alice")
    return KafkaPrincipal(kind, name)
