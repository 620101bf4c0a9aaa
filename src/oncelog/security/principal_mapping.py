"""Kafka's ``SslPrincipalMapper``: a client certificate's subject (an RFC 2253 distinguished name such as
``CN=alice,OU=eng,O=Acme``) -> the name of its principal, by ``ssl.principal.mapping.rules``.

Rules are tried in order; the first that matches gives the name::

    RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT

``RULE:pattern/replacement/[L|U]`` matches the whole subject against the (Java) regular expression and replaces
it, ``$1`` naming a group, then lower- (``L``) or upper-cases (``U``) the result; ``DEFAULT`` is the subject as it
is. When no rule matches, the connection is refused (Kafka's ``NoMatchingRule``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NoMatchingRule", "PrincipalMapper", "parse_rules"]

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)
_BACKREF = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No rule of ``ssl.principal.mapping.rules`` applies to a subject."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        out = self.pattern.sub(_java_replacement(self.replacement, self.pattern.groups), dn)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def _java_replacement(replacement: str, groups: int) -> str:
    """A Java replacement (``$1``; a ``$N`` beyond the groups is literal, as Kafka's escapeLiteralBackReferences)
    as a Python one (``\\g<1>``)."""
    out, pos = [], 0
    for m in _BACKREF.finditer(replacement):
        out.append(replacement[pos:m.start()].replace("\\", "\\\\"))
        digits = m.group(1)
        n = int(digits)
        while n > groups and n >= 10:  # $12 with 3 groups is group 1 then "2"
            n //= 10
        if digits.startswith("0") or n > groups:
            out.append(m.group(0))
        else:
            out.append(f"\\g<{n}>" + digits[len(str(n)):])
        pos = m.end()
    out.append(replacement[pos:].replace("\\", "\\\\"))
    return "".join(out)


def parse_rules(text: str) -> list[_Rule]:
    """The rules of ``ssl.principal.mapping.rules`` (empty: ``DEFAULT``). Raises ValueError naming a bad rule."""
    rules: list[_Rule] = []
    for m in _SPLITTER.finditer((text or "DEFAULT").strip()):
        rule = m.group(1)
        if not rule:
            continue
        parsed = _PARSER.match(rule)
        if parsed is None or parsed.end() != len(rule):
            raise ValueError(f"invalid rule: {rule!r}")
        if parsed.group(1) is not None:
            rules.append(_Rule(None))
        elif parsed.group(2) is not None:
            try:
                pattern = re.compile(parsed.group(2))
            except re.error as e:
                raise ValueError(f"invalid rule {rule!r}: {e}") from None
            rules.append(_Rule(pattern, parsed.group(3), parsed.group(4)))
        else:
            raise ValueError(f"invalid rule: {rule!r} (expected RULE:pattern/replacement/[LU] or DEFAULT)")
        if m.end() >= len(text.strip()):
            break
    return rules


class PrincipalMapper:
    def __init__(self, rules: str) -> None:
        self.text = rules
        self.rules = parse_rules(rules)

    def name(self, dn: str) -> str:
        """The principal name of subject ``dn``; raises :class:`NoMatchingRule`."""
        for rule in self.rules:
            out = rule.apply(dn)
            if out is not None:
                return out
        raise NoMatchingRule(f"no rule of ssl.principal.mapping.rules ({self.text}) applies to {dn}")
