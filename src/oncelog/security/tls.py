"""TLS for a listener: the server's ``ssl.SSLContext`` from Kafka's ``ssl.*`` settings (PEM keystores and
truststores, in files or inline), and the principal of a client certificate.

Kafka's settings map onto the standard library's ``ssl``: ``ssl.keystore.location`` (a PEM file with the private key
and the certificate chain) or ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` (inline PEM);
``ssl.key.password`` for an encrypted key; ``ssl.truststore.location`` / ``ssl.truststore.certificates`` (the CAs
of client certificates; none: the system's); ``ssl.client.auth`` ``none`` / ``requested`` / ``required``;
``ssl.enabled.protocols`` (TLSv1.2, TLSv1.3) and ``ssl.cipher.suites`` (TLS 1.2 suites, OpenSSL or IANA names;
TLS 1.3 suites are always OpenSSL's).

A client certificate's principal is ``User:`` + its subject as RFC 2253 text (Kafka's
``X500Principal.getName()``, e.g. ``CN=alice,OU=eng,O=Acme``) mapped by ``ssl.principal.mapping.rules``.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TlsError", "TlsOptions", "openssl_ciphers", "server_context", "subject_of"]


class TlsError(ValueError):
    """A certificate, key or setting cannot be used; the message names it and says what to do."""


@dataclass(frozen=True)
class TlsOptions:
    keystore_location: str = ""
    key_password: str = ""
    certificate_chain: str = ""  # inline PEM
    private_key: str = ""  # inline PEM
    truststore_location: str = ""
    truststore_certificates: str = ""  # inline PEM
    client_auth: str = "none"
    enabled_protocols: str = "TLSv1.2,TLSv1.3"
    cipher_suites: str = ""

    def files(self) -> list[Path]:
        """The files this context is read from (a change to any of them is a renewed certificate)."""
        return [Path(p) for p in (self.keystore_location, self.truststore_location) if p]


_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_KX = {"ECDHE_RSA": "ECDHE-RSA-", "ECDHE_ECDSA": "ECDHE-ECDSA-", "DHE_RSA": "DHE-RSA-", "RSA": ""}
_CIPHER = {"AES_128_GCM": "AES128-GCM", "AES_256_GCM": "AES256-GCM", "CHACHA20_POLY1305": "CHACHA20-POLY1305",
           "AES_128_CBC": "AES128", "AES_256_CBC": "AES256"}


def openssl_ciphers(suites: str) -> tuple[list[str], list[str]]:
    """(OpenSSL names of the TLS 1.2 suites, TLS 1.3 suites) of ``ssl.cipher.suites``: IANA names
    (``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384``, Kafka's) become OpenSSL's (``ECDHE-RSA-AES256-GCM-SHA384``)."""
    tls12, tls13 = [], []
    for name in (s.strip() for s in suites.split(",") if s.strip()):
        if name.startswith("TLS_") and "_WITH_" not in name:
            tls13.append(name)  # TLS 1.3 names are the same in both
            continue
        if name.startswith("TLS_") and "_WITH_" in name:
            kx, _, rest = name[4:].partition("_WITH_")
            cipher, _, mac = rest.rpartition("_")
            if kx not in _KX or cipher not in _CIPHER:
                raise TlsError(f"ssl.cipher.suites: {name} has no OpenSSL equivalent oncelog knows; give OpenSSL "
                               f"names (`openssl ciphers -stdname` lists both)")
            suffix = "" if cipher == "CHACHA20_POLY1305" else "-" + mac
            name = f"{_KX[kx]}{_CIPHER[cipher]}{suffix}"
        tls12.append(name)
    return tls12, tls13


def _load_chain(ctx: ssl.SSLContext, opts: TlsOptions) -> None:
    password = opts.key_password or None
    if opts.keystore_location:
        try:
            ctx.load_cert_chain(opts.keystore_location, password=password)
        except FileNotFoundError:
            raise TlsError(f"ssl.keystore.location {opts.keystore_location} does not exist") from None
        except PermissionError:
            raise TlsError(f"ssl.keystore.location {opts.keystore_location} cannot be read (permission "
                           f"denied)") from None
        except ssl.SSLError as e:
            raise TlsError(f"ssl.keystore.location {opts.keystore_location} is not a PEM file with a private key "
                           f"and its certificate chain, or ssl.key.password does not open the key ({e.reason or e})"
                           ) from None
        return
    # inline PEM: the ssl module loads keys from files only, so through a private temporary file
    with tempfile.TemporaryDirectory(prefix="oncelog-tls-") as tmp:
        path = os.path.join(tmp, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(opts.private_key.strip() + "\n" + opts.certificate_chain.strip() + "\n")
        try:
            ctx.load_cert_chain(path, password=password)
        except ssl.SSLError as e:
            raise TlsError(f"ssl.keystore.key and ssl.keystore.certificate.chain are not a PEM private key and its "
                           f"certificate chain, or ssl.key.password does not open the key ({e.reason or e})") from None


def load_trust(ctx: ssl.SSLContext, location: str, certificates: str, what: str = "ssl.truststore") -> None:
    """The CAs a peer's certificate must chain to: a PEM file, inline PEM, or (neither) the system's."""
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
        if certificates:
            ctx.load_verify_locations(cadata=certificates)
    except FileNotFoundError:
        raise TlsError(f"{what}.location {location} does not exist") from None
    except (ssl.SSLError, ValueError) as e:
        raise TlsError(f"{what} holds no PEM CA certificate ({getattr(e, 'reason', None) or e})") from None
    if not location and not certificates:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH if ctx.protocol == ssl.PROTOCOL_TLS_SERVER
                               else ssl.Purpose.SERVER_AUTH)


def apply_versions(ctx: ssl.SSLContext, enabled: str, suites: str) -> None:
    versions = sorted(_VERSIONS[v] for v in enabled.split(",") if v in _VERSIONS)
    if not versions:
        raise TlsError(f"ssl.enabled.protocols {enabled!r} names no TLS version oncelog speaks (TLSv1.2, TLSv1.3)")
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    tls12, _ = openssl_ciphers(suites)
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise TlsError(f"ssl.cipher.suites: OpenSSL knows none of {', '.join(tls12)}") from None


def server_context(opts: TlsOptions, into: ssl.SSLContext | None = None) -> ssl.SSLContext:
    """A listener's TLS context. Raises :class:`TlsError`.

    ``into``: a live context to renew in place (the server hands it to every new connection), once the options have
    been checked on a fresh one: the certificate chain is replaced, CAs of the truststore are added (one removed is
    trusted until the broker restarts), the versions, ciphers and client authentication are set again."""
    fresh = _build(opts)  # raises before the live context is touched
    if into is None:
        return fresh
    _build(opts, into)
    return into


def _build(opts: TlsOptions, ctx: ssl.SSLContext | None = None) -> ssl.SSLContext:
    ctx = ctx or ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    apply_versions(ctx, opts.enabled_protocols, opts.cipher_suites)
    _load_chain(ctx, opts)
    if opts.client_auth in ("requested", "required"):
        load_trust(ctx, opts.truststore_location, opts.truststore_certificates)
        ctx.verify_mode = ssl.CERT_REQUIRED if opts.client_auth == "required" else ssl.CERT_OPTIONAL
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def subject_of(der: bytes) -> str:
    """A certificate's subject as RFC 2253 text (what Kafka's ``X500Principal.getName()`` gives)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
