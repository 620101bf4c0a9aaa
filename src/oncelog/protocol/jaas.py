"""Kafka's ``sasl.jaas.config`` text: one JAAS login module with its options, e.g.

    org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="s3cret";

Brokers read PLAIN users (``user_NAME="password"``) and their own credentials for other brokers from it; clients
(Kafka's tools' ``--command-config`` files) their username and password. Parsed as Kafka's ``JaasConfig`` does:
a class name, a control flag, ``key=value`` options (values quoted with ``"`` may hold spaces, ``;`` and ``\\"``),
a closing ``;``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["JaasEntry", "PLAIN_MODULE", "SCRAM_MODULE", "OAUTHBEARER_MODULE", "parse_jaas"]

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:(?P<quoted>"(?:[^"\\]|\\.)*")|(?P<punct>[=;])|(?P<word>[^\s=;"]+))', re.S)


@dataclass(frozen=True)
class JaasEntry:
    module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def users(self) -> dict[str, str]:
        """PLAIN users of a broker's config: ``user_NAME="password"`` options (Kafka's PlainServerCallbackHandler)."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_") and len(k) > 5}


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"unexpected character {text[pos:].lstrip()[:1]!r} in the JAAS config")
        if m.group("quoted") is not None:
            raw = m.group("quoted")[1:-1]
            out.append(("value", re.sub(r"\\(.)", r"\1", raw)))
        elif m.group("punct") is not None:
            out.append((m.group("punct"), m.group("punct")))
        else:
            out.append(("word", m.group("word")))
        pos = m.end()
    return out


def parse_jaas(text: str) -> JaasEntry:
    """One login module (Kafka refuses ``sasl.jaas.config`` with none or several). Raises ValueError saying what is
    wrong, never echoing option values (they are passwords)."""
    toks = _tokens(text)
    if len(toks) < 3 or toks[0][0] != "word":
        raise ValueError("expected 'LoginModuleClass required key=\"value\" ...;'")
    module, flag = toks[0][1], toks[1][1]
    if toks[1][0] != "word" or flag.lower() not in _FLAGS:
        raise ValueError(f"the login module {module} needs a control flag (required, requisite, sufficient or "
                         f"optional)")
    options: dict[str, str] = {}
    i = 2
    while i < len(toks) and toks[i][0] != ";":
        if i + 2 >= len(toks) or toks[i][0] != "word" or toks[i + 1][0] != "=" or toks[i + 2][0] not in ("word",
                                                                                                         "value"):
            raise ValueError(f"the options of {module} must be key=value (a value with spaces in double quotes)")
        options[toks[i][1]] = toks[i + 2][1]
        i += 3
    if i >= len(toks):
        raise ValueError(f"the JAAS config of {module} must end with ';'")
    if i + 1 != len(toks):
        raise ValueError("a JAAS config holds exactly one login module")
    return JaasEntry(module, flag.lower(), options)
