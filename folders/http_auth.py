"""Who is calling the HTTP view: bearer tokens mapped to principals.

``laser-memory serve --auth FILE`` reads a TOML file of principals, each with the
SHA-256 of its token (tokens themselves are never stored; ``laser-memory token``
makes one and prints the line to paste)::

    [[principal]]
    name = "support-bot"
    tenant = "acme"
    grants = ["kv:read:stream:prod/*"]
    token_sha256 = "3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b"

A request carries ``Authorization: Bearer <token>``. Without a valid one it gets
401; with one, it acts as that principal: in its tenant only, within its grants
(see `laser_memory.access`).

Without ``--auth`` the server is for local use: it binds loopback only, and every
caller is `ANONYMOUS`, who may read every namespace and picks the tenant per
request.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tomllib
from collections.abc import Mapping

from aiohttp import web

from laser_memory.access import Principal, is_loopback
from laser_memory.errors import ConfigError, shown

__all__ = [
    "ANONYMOUS",
    "TokenAuth",
    "Unauthorized",
    "anonymous",
    "hash_token",
    "is_loopback",
    "load_principals",
    "new_token",
]

#: The caller of a server without ``--auth``: loopback only, every namespace, any tenant.
ANONYMOUS = Principal("anonymous", tenant=None, grants={"kv:read:*", "view:stats"})

_HEX = frozenset("0123456789abcdef")


class Unauthorized(Exception):
    """No valid bearer token (the server answers 401)."""


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token, as the auth file stores it. A header's bytes that are
    no UTF-8 (which the server reads as lone surrogates) are hashed as they came: such a
    token is no valid one, a 401, never a failure of the server."""
    if not isinstance(token, str):
        raise ConfigError(f"a token is a str (new_token() makes one), got {shown(token)}")
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


#: An auth file holds a table per principal: a few hundred bytes each.
MAX_AUTH_FILE_BYTES = 16 << 20


def _auth_text(path: str | os.PathLike[str]) -> str:
    """The auth file's text, read only from a regular file of at most
    `MAX_AUTH_FILE_BYTES`: a path naming a pipe waited for a writer at start, and one
    naming a device such as /dev/zero was read until memory ran out. (Links are
    followed: mounted secrets are often links.)"""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("it is not a regular file (a pipe, a device or a directory)")
        if info.st_size > MAX_AUTH_FILE_BYTES:
            raise ValueError(
                f"it is {info.st_size} bytes, more than an auth file's {MAX_AUTH_FILE_BYTES}"
            )
        with os.fdopen(fd, "rb", closefd=False) as file:
            raw = file.read(MAX_AUTH_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_AUTH_FILE_BYTES:  # it grew while it was read
        raise ValueError(f"it is more than an auth file's {MAX_AUTH_FILE_BYTES} bytes")
    return raw.decode("utf-8")


def load_principals(path: str | os.PathLike[str]) -> dict[str, Principal]:
    """The auth file's principals by token hash. Any mistake in the file is a
    `ConfigError` naming the entry: a server never starts with half its principals."""
    if not isinstance(path, str | os.PathLike):
        raise ConfigError(f"the auth file's path is a str or os.PathLike, got {shown(path)}")
    try:
        data = tomllib.loads(_auth_text(path))
    except tomllib.TOMLDecodeError as exc:  # a ValueError too: caught first
        raise ConfigError(f"the auth file {shown(os.fspath(path))} is not TOML: {exc}") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise ConfigError(f"cannot read the auth file {shown(os.fspath(path))}: {exc}") from None
    entries = data.get("principal")
    unknown = set(data) - {"principal"}
    if unknown or not isinstance(entries, list) or not entries:
        raise ConfigError(
            f"the auth file {shown(os.fspath(path))} holds [[principal]] tables (name, tenant, "
            "grants, token_sha256) and nothing else"
        )
    out: dict[str, Principal] = {}
    names: set[str] = set()
    for number, entry in enumerate(entries, 1):
        where = f"auth file {shown(os.fspath(path))}, principal {number}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: a [[principal]] table, got {shown(entry)}")
        extra = set(entry) - {"name", "tenant", "grants", "token_sha256"}
        missing = {"name", "tenant", "grants", "token_sha256"} - set(entry)
        if extra or missing:
            raise ConfigError(
                f"{where}: needs name, tenant, grants and token_sha256"
                + (f"; unknown {sorted(extra)}" if extra else "")
                + (f"; missing {sorted(missing)}" if missing else "")
            )
        digest = entry["token_sha256"]
        if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
            raise ConfigError(
                f"{where}: token_sha256 is 64 lower-case hex digits (laser-memory token prints one)"
            )
        if not isinstance(entry["tenant"], str):
            raise ConfigError(f"{where}: tenant is a string ('' for the default tenant)")
        if not isinstance(entry["grants"], list):
            raise ConfigError(f"{where}: grants is a list of grant strings")
        try:
            principal = Principal(entry["name"], tenant=entry["tenant"], grants=entry["grants"])
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if principal.name in names:
            raise ConfigError(f"{where}: a second principal named {shown(principal.name)}")
        if digest in out:
            raise ConfigError(f"{where}: the same token as principal {shown(out[digest].name)}")
        names.add(principal.name)
        out[digest] = principal
    return out


class TokenAuth:
    """Authenticates a request by its bearer token."""

    def __init__(self, principals: dict[str, Principal]) -> None:
        """``principals`` maps the hex SHA-256 of each token (`hash_token`) to its
        principal. Checked here: a digest or principal of another kind failed every
        request that reached it as the server's fault (a 500)."""
        if not isinstance(principals, Mapping):
            raise ConfigError(
                f"TokenAuth takes a dict of token digests to Principals, got {shown(principals)}"
            )
        for digest, principal in principals.items():
            if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
                raise ConfigError(
                    f"a token's digest is 64 lower-case hex digits (hash_token(token)), got "
                    f"{shown(digest)}"
                )
            if not isinstance(principal, Principal):
                raise ConfigError(f"a token's principal is a Principal, got {shown(principal)}")
        self._principals = dict(principals)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TokenAuth:
        return cls(load_principals(path))

    async def __call__(self, request: web.Request) -> Principal:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("send 'Authorization: Bearer <token>'")
        digest = hash_token(token.strip())
        for known, principal in self._principals.items():
            # Constant time in the digest: a caller learns nothing from how long a
            # refusal took.
            if hmac.compare_digest(known, digest):
                return principal
        raise Unauthorized("the bearer token is not valid")


async def anonymous(request: web.Request) -> Principal:
    """The authenticator of a server without ``--auth``."""
    return ANONYMOUS
