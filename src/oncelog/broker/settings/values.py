"""Parsing and checking of broker setting values (``config.py``'s table uses them): Kafka's value types and the
checks a value must pass (the listeners' are in ``listeners.py``, the security settings' in ``security.py``). Each
raises ValueError (or returns the problem) with what is expected."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------------------------- values
def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected an integer")
    if isinstance(v, int):
        return v
    try:
        return int(str(v).strip())
    except ValueError:
        raise ValueError("expected an integer") from None


def _str(v: Any) -> str:
    if isinstance(v, (dict, list, bool)):
        raise ValueError("expected a string")
    return str(v).strip()


def _path(v: Any) -> Path:
    dirs = [d.strip() for d in _str(v).split(",") if d.strip()]
    if not dirs:
        raise ValueError("expected a folder")
    if len(dirs) > 1:
        raise ValueError("oncelog keeps every partition in one folder: give one path")
    return Path(dirs[0])


# ---------------------------------------------------------------------------------------------- checks
Check = Callable[[Any], str | None]


def at_least(n: int) -> Check:
    return lambda v: None if v >= n else f"must be at least {n}"


def one_of(*options: str) -> Check:
    return lambda v: None if v in options else f"must be one of {', '.join(options)}"


def _policy(v: str) -> str | None:
    parts = [p.strip() for p in v.split(",") if p.strip()]
    bad = [p for p in parts if p not in ("delete", "compact")]
    return "must be delete, compact or delete,compact" if bad or not parts else None


def _listen(v: str) -> str | None:
    if not v:
        return None
    host, sep, port = v.rpartition(":")
    return None if sep and port.isdigit() and 0 <= int(port) <= 65535 else "expected HOST:PORT (empty: off)"


def parse_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,host:count`` -> {host: count}. Raises ValueError."""
    out: dict[str, int] = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host.strip() or not count.strip().isdigit():
            raise ValueError(f"{item!r} is not HOST:COUNT (e.g. 127.0.0.1:200)")
        out[host.strip().strip("[]")] = int(count)
    return out


def _overrides(v: str) -> str | None:
    try:
        parse_overrides(v)
    except ValueError as e:
        return str(e)
    return None


def _metadata(v: Any) -> str:
    s = _str(v)
    if s:
        from oncelog.cluster.metadata import parse_endpoints

        parse_endpoints(s)  # ValueError names the bad endpoint
    return s


def _cluster_name(v: Any) -> str:
    s = _str(v)
    if not s or "/" in s:
        raise ValueError("a cluster name is non-empty and has no '/'")
    return s


def _authorizer(v: str) -> str | None:
    from oncelog.security.authorizer import ACCEPTED_CLASS_NAMES

    return None if v in ("", *ACCEPTED_CLASS_NAMES) else f"must be empty or one of {', '.join(ACCEPTED_CLASS_NAMES)}"


def _super_users(v: Any) -> str:
    from oncelog.security.authorizer import parse_super_users

    s = _str(v)
    parse_super_users(s)  # ValueError names the bad principal
    return s


def _rack(v: Any) -> str | None:
    return _str(v) or None


def _assignors(v: str) -> str | None:
    from oncelog.coordinator.group.assignors import assignors_by_name  # off the start path (checked when given)

    names = [n for n in (p.strip() for p in v.split(",")) if n]
    if not names:
        return "must name at least one assignor"
    try:
        assignors_by_name(names)
    except ValueError as e:
        return str(e)
    return None


def consumer_group_problem(min_session: int, session: int, max_session: int, min_heartbeat: int, heartbeat: int,
                           max_heartbeat: int) -> str | None:
    """Kafka's GroupCoordinatorConfig checks of the consumer group (KIP-848) timeouts: what is wrong, or None."""
    for what, low, value, high in (("session.timeout.ms", min_session, session, max_session),
                                   ("heartbeat.interval.ms", min_heartbeat, heartbeat, max_heartbeat)):
        if not low <= value <= high:
            return (f"group.consumer.{what} ({value}) must be between group.consumer.min.{what} ({low}) and "
                    f"group.consumer.max.{what} ({high})")
    if heartbeat >= session:
        return (f"group.consumer.heartbeat.interval.ms ({heartbeat}) must be less than "
                f"group.consumer.session.timeout.ms ({session})")
    return None
