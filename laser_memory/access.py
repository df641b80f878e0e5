"""Who may read and write what: principals, their grants, and the governor.

A `Principal` is a name, the tenant it acts for, and its grants:

==================  ==========================================================
grant               allows
==================  ==========================================================
``kv:read:NS``      reading namespace ``NS``: recall, fetch, history, as_of, replay
``publish:TOPIC``   writing records to memory topic ``TOPIC``: remember,
                    improve, forget, named items, purge, consolidate, reembed
``view:stats``      the managed view's counters over HTTP (every tenant's)
==================  ==========================================================

A grant's last part may end with ``*`` to cover every name with that prefix
(``kv:read:stream:prod/*``, ``publish:*``). Purge and consolidate read and write,
so they need both grants. A conversation filter narrows a read; it never grants.

A handle built with a principal (`Laser.memory(..., principal=)`, or
``connect(principal=)``) is bound to the principal's tenant and checks its grants
before anything is read or written. A handle bound with ``tenant=`` alone checks
the tenant only. An unbound handle takes ``tenant=`` per call, defaulting to ``""``:
fine for one trusted process, never for code acting for several tenants.

A governor is any callable ``(ProposedWrite) -> bool`` (or an awaitable of one). It
sees every record a handle is about to write, after every other check and before
anything is written; one refusal (or exception) in a batch writes none of it.

>>> bot = Principal("support-bot", tenant="acme",
...                 grants={"kv:read:stream:prod/*", "publish:prod.agent.memory"})
>>> bot.may_read("stream:prod/notes"), bot.may_publish("other.agent.memory")
(True, False)
"""

from __future__ import annotations

import inspect
import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from collections.abc import Set as AbstractSet

import msgspec

from .errors import AccessDenied, ConfigError, PolicyDenied, shown
from .ids import validate_name

__all__ = [
    "GRANT_PREFIXES",
    "Governor",
    "Principal",
    "ProposedWrite",
    "bound_tenant",
    "check_governor",
    "is_loopback",
    "resolve_tenant",
    "validate_governor",
]

#: The grant families, each followed by a name or a name prefix ending in ``*``.
GRANT_PREFIXES = ("kv:read:", "publish:")
_WHOLE_GRANTS = frozenset({"view:stats"})


def _grant(grant: object) -> str:
    if not isinstance(grant, str):
        raise ConfigError(f"a grant is a string, got {type(grant).__name__}")
    if grant in _WHOLE_GRANTS:
        return grant
    for prefix in GRANT_PREFIXES:
        if grant.startswith(prefix) and len(grant) > len(prefix):
            pattern = grant[len(prefix) :]
            if "*" in pattern[:-1]:
                raise ConfigError(
                    f"grant {shown(grant)}: '*' may only end a grant (a prefix), not sit inside it"
                )
            return grant
    raise ConfigError(
        f"unknown grant {shown(grant)}: grants are 'kv:read:<namespace>', 'publish:<topic>' "
        "(either may end with '*' to cover a prefix) and 'view:stats'"
    )


def _covers(grants: AbstractSet[str], prefix: str, name: str) -> bool:
    wanted = prefix + name
    if wanted in grants:
        return True
    for grant in grants:
        if grant.endswith("*") and grant.startswith(prefix) and wanted.startswith(grant[:-1]):
            return True
    return False


class Principal(msgspec.Struct, frozen=True):
    """Who acts: a name, the tenant it acts for, and its grants (see the module).

    ``tenant=None`` is a principal bound to no tenant; only the anonymous local
    principal of ``laser-memory serve`` without ``--auth`` is one, and a handle built
    with it is unbound.

    >>> bot = Principal("bot", tenant="acme", grants={"kv:read:stream:prod/*"})
    >>> bot.may_read("stream:prod/notes"), bot.may_read("stream:dev/notes")
    (True, False)
    """

    name: str
    tenant: str | None = ""
    #: A set of grant strings (any iterable of them is taken), kept as a frozenset.
    grants: AbstractSet[str] = frozenset()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"a principal's name is a non-empty string, got {shown(self.name)}")
        if self.tenant is not None:
            try:
                tenant = validate_name(self.tenant, "tenant", allow_empty=True)
            except Exception as exc:
                raise ConfigError(f"principal {shown(self.name)}: {exc}") from None
            if tenant is not self.tenant:  # a str subclass: the text it holds
                msgspec.structs.force_setattr(self, "tenant", tenant)
        if isinstance(self.grants, str) or not isinstance(self.grants, Iterable):
            raise ConfigError(f"principal {shown(self.name)}: grants is a set of grant strings")
        # A frozen Struct: set the normalised grants once, here.
        msgspec.structs.force_setattr(
            self, "grants", frozenset(_grant(grant) for grant in self.grants)
        )

    def may_read(self, namespace: str) -> bool:
        return _covers(self.grants, "kv:read:", namespace)

    def may_publish(self, topic: str) -> bool:
        return _covers(self.grants, "publish:", topic)

    def may_see_stats(self) -> bool:
        return "view:stats" in self.grants

    def check_read(self, namespace: str) -> None:
        if not self.may_read(namespace):
            raise AccessDenied(
                f"principal {shown(self.name)} may not read namespace {shown(namespace)}: it needs "
                f"the grant 'kv:read:{namespace}' (or a prefix of it ending in '*')"
            )

    def check_publish(self, topic: str) -> None:
        if not self.may_publish(topic):
            raise AccessDenied(
                f"principal {shown(self.name)} may not write to topic {shown(topic)}: it needs the "
                f"grant 'publish:{topic}' (or a prefix of it ending in '*')"
            )


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only (``localhost``,
    127.0.0.0/8, ``::1``): the only address a server without authentication may take.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    >>> is_loopback("laser.example")  # a name may resolve anywhere
    False
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # any other name may resolve to any address
        return False


def bound_tenant(tenant: str | None, principal: Principal | None) -> str | None:
    """The tenant a handle is bound to: the one given, else its principal's; None when
    neither names one. Refuses a tenant other than the principal's."""
    if tenant is not None:
        try:
            tenant = validate_name(tenant, "tenant", allow_empty=True)
        except Exception as exc:
            raise ConfigError(str(exc)) from None
    if principal is None or principal.tenant is None:
        return tenant
    if tenant is not None and tenant != principal.tenant:
        raise AccessDenied(
            f"principal {shown(principal.name)} acts for tenant {shown(principal.tenant)}; "
            f"a handle for it cannot be bound to tenant {shown(tenant)}"
        )
    return principal.tenant


class ProposedWrite(msgspec.Struct, frozen=True):
    """One record a handle is about to write, as its governor sees it.

    ``op`` is the record's tag (``remember``, ``feedback``, ``forget``, ``embedded``,
    ``named.set``, ``named.patch``, ``named.remove``); ``body`` the body a remember or
    named set carries (a patch's patch), else None; ``record`` the encoded record as
    it will go on the log.
    """

    op: str
    namespace: str
    topic: str
    tenant: str
    principal: Principal | None
    body: bytes | None
    record: bytes


#: A policy over proposed writes: True allows, False refuses; may be async.
Governor = Callable[[ProposedWrite], bool | Awaitable[bool]]


def validate_governor(governor: object) -> Governor:
    if not callable(governor):
        raise ConfigError(
            f"a governor is a callable (ProposedWrite) -> bool, got {type(governor).__name__}"
        )
    return governor  # type: ignore[return-value]


async def check_governor(governor: Governor, proposals: list[ProposedWrite]) -> None:
    """Ask the governor about every proposal; the first refusal raises `PolicyDenied`.
    A governor that raises, or answers anything but True or False, refuses: a policy
    that cannot decide must not let a write through."""
    for index, proposal in enumerate(proposals):
        where = f"entry {index}: " if len(proposals) > 1 else ""
        try:
            answer = governor(proposal)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            raise PolicyDenied(
                f"{where}the governor failed deciding on a {proposal.op} record "
                f"({type(exc).__name__}: {exc}); nothing was written"
            ) from exc
        if answer is True:
            continue
        if answer is False:
            raise PolicyDenied(
                f"{where}the governor refused a {proposal.op} record in namespace "
                f"{shown(proposal.namespace)}; nothing was written"
            )
        raise PolicyDenied(
            f"{where}the governor answered {shown(answer)} for a {proposal.op} record; a "
            "governor returns True (allow) or False (refuse); nothing was written"
        )


def resolve_tenant(bound: str | None, given: str | None) -> str:
    """The tenant one call acts in: ``given`` on an unbound handle (``""`` if None);
    the bound one on a bound handle, which refuses a call naming another."""
    if given is not None:
        given = validate_name(given, "tenant", allow_empty=True)
    if bound is None:
        return given if given is not None else ""
    if given is not None and given != bound:
        raise AccessDenied(
            f"this handle is bound to tenant {shown(bound)}; it cannot act in tenant "
            f"{shown(given)} (leave tenant= out, or use a handle bound to that tenant)"
        )
    return bound
