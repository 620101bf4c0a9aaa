"""``oncelog user add|list|remove``: SCRAM users (what ``kafka-configs.sh --entity-type users --alter --add-config
'SCRAM-SHA-512=[password=...]'`` and ``kafka-storage.sh format --add-scram`` do).

Through a running broker (``-b HOST:PORT``, the default) with KIP-554's AlterUserScramCredentials and
DescribeUserScramCredentials: the password is salted here and only the salted password is sent. Before the first
start, when no one can authenticate yet: ``--data-dir DIR`` writes a single node's records (its
``security.json``; the broker must be stopped) and ``--metadata etcd://HOST:PORT`` a cluster's (in etcd, where
every broker sees them at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.alter_user_scram_credentials_request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from oncelog.protocol.messages.describe_user_scram_credentials_request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from oncelog.security.scram import MAX_ITERATIONS, MECHANISMS, Deletion, Upsertion, describe, plan_alter
from oncelog.security.store import SCRAM, FileSecurityStore, SecurityStoreError

from ._common import CONTEXT, Conn, connection_options, echo_json, fail, json_option
from ._wire import error_name, wire

__all__ = ["user"]

_TYPES = {name: t for t, name in MECHANISMS.items()}
_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_SECURITY_FILE = "security.json"  # broker/server.py's SECURITY_RECORDS_FILE


@click.group(context_settings=CONTEXT)
def user() -> None:
    """Add, list and remove SCRAM users (SASL SCRAM-SHA-256 / SCRAM-SHA-512)."""


def _offline_options(f: Any) -> Any:
    f = click.option("--cluster-name", default="oncelog", show_default=True, metavar="NAME",
                     help="with --metadata: the cluster's name in etcd (cluster.name)")(f)
    f = click.option("--metadata", metavar="etcd://HOST:PORT",
                     help="write a cluster's users in its etcd directly (before its first start)")(f)
    f = click.option("--data-dir", type=click.Path(path_type=Path, file_okay=False), metavar="DIR",
                     help="write a single node's users in its data folder directly (the broker must be stopped)")(f)
    return f


class _Target:
    """Where the records are: a broker (KIP-554), a stopped single node's data folder, or a cluster's etcd."""

    def __init__(self, conn: Conn, data_dir: Path | None, metadata: str | None, cluster_name: str) -> None:
        if data_dir is not None and metadata is not None:
            fail("give --data-dir (a single node) or --metadata (a cluster), not both", code=2)
        self.conn, self.data_dir, self.metadata, self.cluster_name = conn, data_dir, metadata, cluster_name

    @property
    def offline(self) -> bool:
        return self.data_dir is not None or self.metadata is not None

    @contextlib.contextmanager
    def _data_dir_store(self) -> Iterator[FileSecurityStore]:
        assert self.data_dir is not None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)  # the broker's lock (LogManager)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fail(f"a broker is running on {self.data_dir}: it would not see users written here",
                     "add the user through it: oncelog user add NAME -b HOST:PORT")
            try:
                yield FileSecurityStore(self.data_dir / _SECURITY_FILE)
            except SecurityStoreError as e:
                fail(str(e))
        finally:
            os.close(fd)

    async def _etcd(self, puts: Mapping[str, bytes] | None, deletes: list[str]) -> Mapping[str, bytes]:
        from oncelog.cluster.metadata import EtcdMetadata
        from oncelog.cluster.store import MetadataUnavailableError

        assert self.metadata is not None
        try:
            async with await EtcdMetadata.connect(self.metadata, self.cluster_name) as store:
                if puts or deletes:
                    await store.write_security(SCRAM, puts or {}, deletes)
                return dict(store.view.security.get(SCRAM, {}))
        except (MetadataUnavailableError, ValueError) as e:
            fail(str(e))

    def records(self) -> Mapping[str, bytes]:
        if self.data_dir is not None:
            with self._data_dir_store() as store:
                return store.records(SCRAM)
        return asyncio.run(self._etcd(None, []))

    def write(self, puts: Mapping[str, bytes], deletes: list[str]) -> None:
        if self.data_dir is not None:
            with self._data_dir_store() as store:
                try:
                    asyncio.run(store.write(SCRAM, puts, deletes))
                except SecurityStoreError as e:
                    fail(str(e))
            return
        asyncio.run(self._etcd(puts, deletes))


def _salted(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword = Hi(Normalize(password), salt, i): what KIP-554 sends instead of the password."""
    from scramp.utils import saslprep

    return hashlib.pbkdf2_hmac(_HASH[mechanism], saslprep(password).encode(), salt, iterations)


def _password(password: str | None, password_file: str | None, name: str) -> str:
    if password is not None and password_file is not None:
        fail("give --password or --password-file, not both", code=2)
    if password_file is not None:
        try:
            text = sys.stdin.read() if password_file == "-" else Path(password_file).read_text()
        except OSError as e:
            fail(f"cannot read the password file {password_file}: {e.strerror or e}", code=2)
        password = text.rstrip("\r\n")
    elif password is None:
        if not sys.stdin.isatty():
            fail("no password given", "use --password-file FILE (or - for stdin), or run in a terminal to be asked",
                 code=2)
        password = click.prompt(f"password of {name}", hide_input=True, confirmation_prompt=True)
    if not password:
        fail("the password must not be empty", code=2)
    return password


def _check(results: list[tuple[str, int, str | None]], action: str) -> None:
    for name, code, message in results:
        if code:
            fail(f"cannot {action} user {name!r}: {error_name(code)}" + (f": {message}" if message else ""),
                 "list the users with 'oncelog user list'" if code == ErrorCode.RESOURCE_NOT_FOUND else None)


@user.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-m", "--mechanism", "mechanisms", multiple=True, type=click.Choice(sorted(_TYPES)),
              help="SCRAM mechanism (repeatable)  [default: SCRAM-SHA-512]")
@click.option("--iterations", type=click.IntRange(4096, MAX_ITERATIONS), default=4096, show_default=True,
              help="PBKDF2 iterations of the salted password")
@click.option("--password", help="the password (visible to other users of this machine: prefer --password-file)")
@click.option("--password-file", metavar="FILE", help="read the password from FILE (- for stdin)")
@connection_options
@_offline_options
def add(name: str, mechanisms: tuple[str, ...], iterations: int, password: str | None, password_file: str | None,
        conn: Conn, data_dir: Path | None, metadata: str | None, cluster_name: str) -> None:
    """Create user NAME, or set a new password (its salted SCRAM credential; the password is never stored)."""
    target = _Target(conn, data_dir, metadata, cluster_name)
    secret = _password(password, password_file, name)
    for mech in mechanisms or ("SCRAM-SHA-512",):  # one per request: KIP-554 refuses a user named twice in one
        salt = os.urandom(32)
        u = Upsertion(name, _TYPES[mech], iterations, salt, _salted(mech, secret, salt, iterations))
        if target.offline:
            plan = plan_alter(target.records(), [], [u])
            _check(plan.results, "add")
            target.write(plan.puts, plan.deletes)
            continue
        with wire(conn) as w:
            resp = w.send(AlterUserScramCredentialsRequest(upsertions=[ScramCredentialUpsertion(
                name=u.name, mechanism=u.mechanism, iterations=u.iterations, salt=u.salt,
                salted_password=u.salted_password)]))
        _check([(r.user, r.error_code, r.error_message) for r in resp.results], "add")
    click.echo(f"user {name}: {', '.join(mechanisms or ('SCRAM-SHA-512',))} credential stored")


@user.command("list", context_settings=CONTEXT)
@click.argument("names", nargs=-1)
@connection_options
@_offline_options
@json_option
def list_(names: tuple[str, ...], conn: Conn, data_dir: Path | None, metadata: str | None, cluster_name: str,
          as_json: bool) -> None:
    """List SCRAM users (all, or NAMES) with their mechanisms and iterations."""
    target = _Target(conn, data_dir, metadata, cluster_name)
    if target.offline:
        rows = describe(target.records(), list(names) or None)
    else:
        with wire(conn) as w:
            resp = w.send(DescribeUserScramCredentialsRequest(users=[UserName(name=n) for n in names] or None))
        if resp.error_code:
            fail(f"cannot list users: {error_name(resp.error_code)}: {resp.error_message or ''}")
        rows = [(r.user, r.error_code, r.error_message, [(c.mechanism, c.iterations) for c in r.credential_infos])
                for r in resp.results]
    _check([(u, c, m) for u, c, m, _ in rows], "list")
    users = {u: [{"mechanism": MECHANISMS.get(m, str(m)), "iterations": i} for m, i in infos]
             for u, _, _, infos in sorted(rows)}
    if as_json:
        echo_json(users)
        return
    if not users:
        click.echo("no SCRAM users")
    for u, creds in users.items():
        click.echo(f"{u}\t" + ", ".join(f"{c['mechanism']} ({c['iterations']} iterations)" for c in creds))


@user.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-m", "--mechanism", "mechanisms", multiple=True, type=click.Choice(sorted(_TYPES)),
              help="remove only this mechanism's credential (repeatable)  [default: every one]")
@connection_options
@_offline_options
def remove(name: str, mechanisms: tuple[str, ...], conn: Conn, data_dir: Path | None, metadata: str | None,
           cluster_name: str) -> None:
    """Remove user NAME's SCRAM credentials (its open connections stay until they re-authenticate)."""
    target = _Target(conn, data_dir, metadata, cluster_name)
    if not mechanisms:  # every mechanism the user has
        if target.offline:
            rows = describe(target.records(), [name])
        else:
            with wire(conn) as w:
                resp = w.send(DescribeUserScramCredentialsRequest(users=[UserName(name=name)]))
            rows = [(r.user, r.error_code, r.error_message, [(c.mechanism, 0) for c in r.credential_infos])
                    for r in resp.results]
        _check([(u, c, m) for u, c, m, _ in rows], "remove")
        mechanisms = tuple(MECHANISMS[m] for _, _, _, infos in rows for m, _ in infos)
    # one deletion per request: KIP-554 refuses a user named twice in one request
    for mech in mechanisms:
        if target.offline:
            plan = plan_alter(target.records(), [Deletion(name, _TYPES[mech])], [])
            _check(plan.results, "remove")
            target.write(plan.puts, plan.deletes)
        else:
            with wire(conn) as w:
                resp = w.send(AlterUserScramCredentialsRequest(deletions=[
                    ScramCredentialDeletion(name=name, mechanism=_TYPES[mech])]))
            _check([(r.user, r.error_code, r.error_message) for r in resp.results], "remove")
    click.echo(f"user {name}: {', '.join(mechanisms)} credential removed")
