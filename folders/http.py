"""The managed view over HTTP, read-only, for readers on other hosts.

``laser-memory serve --view PATH`` serves, JSON in and out:

- ``GET /v1/recall?namespace=NS`` with any of ``tenant conversation agent user
  application kind text strategy limit include_superseded`` (``limit`` at most
  `MAX_LIMIT`)
- ``GET /v1/context?namespace=NS`` with recall's parameters and ``token_budget``:
  ``{"block": ...}``, the recalled items as the prompt block ``recall(block=True)`` makes
- ``GET /v1/fetch?namespace=NS&key=K[&tenant=&version=]`` (404 when absent)
- ``GET /v1/named?namespace=NS[&prefix=P&tenant=&limit=]``: named items by key, the
  first ``limit`` (default and at most `MAX_LIMIT`) whose key starts with the prefix
- ``GET /v1/history?namespace=NS&(id=ID|key=K)[&tenant=]``
- ``GET /v1/stats``
- ``GET /v1/health``: ``{"status": "ok"}`` while the view can be read, else a 503; the
  one route that asks for no token, as it says nothing of any tenant (for probes)

Bad input is a 400 (a parameter the route does not take, or one given twice, is bad
input: a misspelt filter must not widen a recall), an absent named item a 404, a
view that cannot be read a 503. LMDB reads run on worker threads, at most
``max_concurrent_reads`` at a time, so a burst of heavy recalls never holds the
event loop: other requests are still answered meanwhile.

`ConnectionGuard` keeps the server answering under a flood of connections
that never finish their request: it bounds the open connections, closes one
that has not sent its request headers within ``header_timeout_s``, and when
full makes room by closing the oldest connection still waiting for headers.

Every other request is authenticated first (`folders.http_auth`): with ``--auth FILE``
by its bearer token (401 without a valid one), else as the local anonymous
principal. A request acts in its principal's tenant only (a ``tenant`` parameter
naming another is a 403) and within its grants: ``kv:read:<namespace>`` for
recall, context, fetch, named and history, ``view:stats`` for stats. Grants are checked before
the view is read, so a 403 says nothing about whether a namespace or item exists.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

import msgspec
from aiohttp import web

from laser_memory.access import Principal, resolve_tenant
from laser_memory.embedding import Embedder, embed_texts, validate_embedder
from laser_memory.errors import AccessDenied, ConfigError, InvalidInput, LaserError, shown
from laser_memory.ids import MemoryId, validate_name
from laser_memory.items import MemoryItem, body_fields
from laser_memory.log.naming import check_settings
from laser_memory.named import MAX_VERSION, validate_key
from laser_memory.recall import MAX_LIMIT, to_context_block, validate_strategy

from .http_auth import Unauthorized, anonymous, is_loopback
from .replay import chain_history
from .state import ItemFilter
from .view import MemoryView

__all__ = [
    "ConnectionGuard",
    "Principal",
    "ServerConfig",
    "ViewServer",
    "make_app",
    "serve_view",
]


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Limits of the HTTP server. Seconds are floats."""

    max_concurrent_reads: int = 4
    max_connections: int = 512
    header_timeout_s: float = 5.0
    keepalive_timeout_s: float = 15.0
    #: How long an answer of ``GET /v1/health`` stands before the view is read again
    #: (anyone may ask it: probes share one read a second, not a worker thread each).
    health_check_every_s: float = 1.0
    #: The longest request line (method, path and query) read: a recall's or a context
    #: block's text is a query parameter, and aiohttp's 8,190 bytes held about 2,700
    #: characters of a question in a script of three-byte letters. Past it aiohttp
    #: answers a plain-text 400 of its own, before any route.
    max_request_line_bytes: int = 65_536
    #: Embeds the text of semantic, hybrid and auto recalls (``serve --embedder``);
    #: without one they rank by keyword alone.
    embedder: Embedder | None = None

    def __post_init__(self) -> None:
        # At construction: a zero read limit served nothing and hung every request.
        check_settings(
            self,
            positive_ints=("max_concurrent_reads", "max_connections", "max_request_line_bytes"),
            positive_seconds=("header_timeout_s", "keepalive_timeout_s"),
            seconds=("health_check_every_s",),
        )
        if self.embedder is not None:
            try:
                validate_embedder(self.embedder)
            except InvalidInput as exc:
                raise ConfigError(f"ServerConfig.embedder: {exc}") from None


#: Who a request comes from; raises `Unauthorized` for a caller without valid credentials.
Authenticate = Callable[[web.Request], Principal | Awaitable[Principal]]


def _json(data: Any, status: int = 200) -> web.Response:
    # allow_nan=False: strict JSON parsers reject NaN and Infinity, so never send them.
    return web.Response(
        text=json.dumps(data, ensure_ascii=False, allow_nan=False),
        status=status,
        content_type="application/json",
    )


def _error(status: int, exc: Exception) -> web.Response:
    return _json({"error": type(exc).__name__, "message": str(exc)}, status)


#: Where aiohttp logs a request's failure, so ours go with them (`_RepeatFilter`).
_server_log = logging.getLogger("aiohttp.server")


def _log_failed_health_check(check: asyncio.Future[Any]) -> None:
    """Log a failed health check once, however many probes it answers (and retrieve its
    exception even if they all hung up)."""
    if not check.cancelled() and isinstance(failed := check.exception(), LaserError):
        _server_log.error("health check: %s", failed)


@web.middleware
async def _json_refusals(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The router's own refusals and the server's failures as every other error of the
    server: JSON a client parses, not aiohttp's "404: Not Found" text, which a client
    reading errors as JSON failed to parse. Refusals of the routes are theirs
    (`ViewServer.route`)."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        routes = ", ".join(sorted(_PARAMETERS))
        return _json(
            {"error": "NotFound", "message": f"no route {shown(request.path)}; routes: {routes}"},
            404,
        )
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        response = _json(
            {
                "error": "MethodNotAllowed",
                "message": f"{shown(request.path)} takes {allowed}, not {request.method}",
            },
            405,
        )
        response.headers["Allow"] = ",".join(sorted(exc.allowed_methods))
        return response
    except web.HTTPException:
        raise
    except Exception:
        # The server's own fault: logged whole where aiohttp logs it (and throttled there
        # by `serve_view`), answered as JSON that says no more than that.
        _server_log.exception("Error handling request %s %s", request.method, request.path)
        said = "the server failed this request; its log says why"
        return _json({"error": "InternalError", "message": said}, 500)


def _flag(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "false")
    if raw not in ("true", "false"):
        raise InvalidInput(f"{name} is true or false, got {shown(raw)}")
    return raw == "true"


#: The query parameters each route reads. Any other is refused: a misspelt filter
#: (``agnet=``) ignored would answer a wider recall than the caller asked for.
_RECALL_PARAMETERS = frozenset(
    {
        "namespace",
        "tenant",
        "conversation",
        "agent",
        "user",
        "application",
        "kind",
        "text",
        "strategy",
        "limit",
        "include_superseded",
    }
)
_PARAMETERS = {
    "/v1/recall": _RECALL_PARAMETERS,
    "/v1/context": _RECALL_PARAMETERS | {"token_budget"},
    "/v1/fetch": frozenset({"namespace", "key", "tenant", "version"}),
    "/v1/named": frozenset({"namespace", "prefix", "tenant", "limit"}),
    "/v1/history": frozenset({"namespace", "id", "key", "tenant"}),
    "/v1/stats": frozenset(),
    "/v1/health": frozenset(),
}


def _check_parameters(request: web.Request, path: str) -> None:
    """Refuse a parameter the route does not read, and one given more than once (which
    of two tenants or namespaces a request meant is not for the server to guess)."""
    allowed = _PARAMETERS[path]
    try:
        unquote_to_bytes(request.rel_url.raw_query_string).decode("utf-8")
    except UnicodeDecodeError:
        # Read with replacement, %FF and %FE would both name the key (or text) U+FFFD.
        raise InvalidInput(
            "the query string is not UTF-8 once percent-decoded; encode each parameter's "
            "text as UTF-8"
        ) from None
    query = request.query
    unknown = sorted(set(query) - allowed)
    if unknown:
        takes = ", ".join(sorted(allowed)) if allowed else "no parameters"
        raise InvalidInput(
            f"unknown query parameter(s) {', '.join(map(shown, unknown))}; "
            f"{path} takes {takes}"
        )
    for name in allowed:
        if len(query.getall(name, ())) > 1:
            raise InvalidInput(f"query parameter {shown(name)} is given more than once")


#: The largest ``token_budget`` the context route takes (past any model's window).
MAX_TOKEN_BUDGET = 1_000_000_000


def _whole_number(request: web.Request, name: str, low: int, high: int) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    # ASCII digits only: int() also reads "1_0" as 10, " 5 " and "+5" as 5, and other
    # scripts' digits, none of which a client that means a number sends. At most 20
    # (past every limit): int() raises ValueError beyond 4,300 digits.
    number = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 20 else None
    if number is None or not low <= number <= high:
        raise InvalidInput(f"{name} must be a whole number from {low} to {high}, got {shown(raw)}")
    return number


class ViewServer:
    """Request handlers over one view; each takes the principal and the query."""

    def __init__(
        self,
        view: MemoryView,
        auth: Authenticate = anonymous,
        config: ServerConfig | None = None,
    ) -> None:
        self._view = view
        self._auth = auth
        self._config = config or ServerConfig()
        self._reads = asyncio.Semaphore(self._config.max_concurrent_reads)
        # The health route's last check (when it began, and its outcome): anyone may ask
        # it, so probes share one read of the view (see `health_check_every_s`) rather
        # than each taking a worker thread from the recalls.
        self._health: tuple[float, asyncio.Future[dict[int, int]]] | None = None

    async def _off_loop(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        async with self._reads:
            return await asyncio.to_thread(fn, *args, **kwargs)

    @staticmethod
    def _arg(request: web.Request, name: str) -> str | None:
        return request.query.get(name)

    @staticmethod
    def _required(request: web.Request, name: str) -> str:
        value = request.query.get(name)
        if not value:
            raise InvalidInput(f"query parameter {shown(name)} is required")
        return value

    @staticmethod
    def _tenant(principal: Principal, request: web.Request) -> str:
        """The principal's tenant; the ``tenant`` parameter only for a principal bound
        to none (the local anonymous one)."""
        given = request.query.get("tenant")
        try:
            return resolve_tenant(principal.tenant, given)
        except AccessDenied:
            # Said as a client of the server knows it: a token, not a handle.
            raise AccessDenied(
                f"this token acts for tenant {shown(principal.tenant)}; it cannot read tenant "
                f"{shown(given)} (leave tenant= out: a token's tenant is its own)"
            ) from None

    def _namespace(self, principal: Principal, request: web.Request) -> str:
        namespace = self._required(request, "namespace")
        # The name a handle would refuse is refused here too (before the grant check,
        # which says nothing of what exists), not answered with an empty list.
        validate_name(namespace, "namespace")
        principal.check_read(namespace)
        return namespace

    def _where(self, principal: Principal, request: web.Request) -> ItemFilter:
        query = request.query
        return ItemFilter.build(
            tenant=self._tenant(principal, request),
            conversation=query.get("conversation"),
            agent=query.get("agent"),
            user=query.get("user"),
            application=query.get("application"),
            kind=query.get("kind"),
            now_ms=time.time_ns() // 1_000_000,
            include_superseded=_flag(request, "include_superseded"),
        )

    async def _recalled(self, principal: Principal, request: web.Request) -> list[MemoryItem]:
        """The items a recall with the request's parameters gives (the recall and context
        routes take the same ones)."""
        namespace = self._namespace(principal, request)
        limit = _whole_number(request, "limit", 0, MAX_LIMIT)
        strategy = validate_strategy(request.query.get("strategy", "auto"))
        text = self._arg(request, "text")
        where = self._where(principal, request)
        embedder = self._config.embedder
        ranking: dict[str, Any] = {}
        if embedder is not None and text and text.strip() and strategy != "recent":
            if strategy != "keyword":
                ranking["query_vector"] = (
                    await embed_texts(embedder, [text], then="nothing was recalled")
                )[0]
                ranking["embedder"] = embedder.label
                where = msgspec.structs.replace(where, embedder=embedder.label)
        return await self._off_loop(
            self._view.recall,
            namespace,
            where,
            strategy=strategy,
            text=text,
            limit=50 if limit is None else limit,
            **ranking,
        )

    async def recall(self, principal: Principal, request: web.Request) -> web.Response:
        return _json([item.to_json() for item in await self._recalled(principal, request)])

    async def context(self, principal: Principal, request: web.Request) -> web.Response:
        """``{"block": ...}``: the items a recall with the same parameters gives, as one
        prompt block within ``token_budget`` (`recall(block=True)`; without text or
        filters, what `MemoryHandle.context` gives)."""
        budget = _whole_number(request, "token_budget", 0, MAX_TOKEN_BUDGET)
        items = await self._recalled(principal, request)
        return _json({"block": to_context_block(items, budget)})

    async def fetch(self, principal: Principal, request: web.Request) -> web.Response:
        namespace = self._namespace(principal, request)
        key = validate_key(self._required(request, "key"))
        version = _whole_number(request, "version", 1, MAX_VERSION)
        tenant = self._tenant(principal, request)
        item = await self._off_loop(
            self._view.fetch, namespace, key, tenant=tenant, version=version
        )
        if item is None:
            return _json({"error": "NotFound", "message": f"no named item {shown(key)}"}, 404)
        return _json(
            {
                "key": item.key,
                **body_fields(item.body),
                "version": item.version,
                "append_time_ms": item.append_time_ms,
                "source": item.source._asdict(),
            }
        )

    async def named(self, principal: Principal, request: web.Request) -> web.Response:
        namespace = self._namespace(principal, request)
        prefix = self._arg(request, "prefix") or ""
        limit = _whole_number(request, "limit", 0, MAX_LIMIT)
        tenant = self._tenant(principal, request)
        items = await self._off_loop(
            self._view.named_items,
            namespace,
            tenant=tenant,
            prefix=prefix,
            limit=MAX_LIMIT if limit is None else limit,
        )
        return _json(
            [{"key": item.key, **body_fields(item.body), "version": item.version} for item in items]
        )

    async def history(self, principal: Principal, request: web.Request) -> web.Response:
        namespace = self._namespace(principal, request)
        tenant = self._tenant(principal, request)
        if "id" in request.query and "key" in request.query:
            raise InvalidInput("history takes an item's id or a named item's key, not both")
        if "id" in request.query:
            raw_id = MemoryId.parse(request.query["id"]).bytes
            entries = await self._off_loop(
                chain_history,
                raw_id,
                lambda one: self._view.item_history(namespace, one, tenant=tenant),
            )
        else:
            key = validate_key(self._required(request, "key"))
            entries = await self._off_loop(self._view.named_history, namespace, key, tenant=tenant)
        return _json([entry.to_json() for entry in entries])

    async def stats(self, principal: Principal, request: web.Request) -> web.Response:
        if not principal.may_see_stats():
            raise AccessDenied(
                f"principal {shown(principal.name)} may not read the view's stats: it needs "
                "the grant 'view:stats'"
            )
        # Not behind the read limit: an operator's stats answer while recalls queue.
        stats = await asyncio.to_thread(self._view.stats)
        return _json(msgspec.to_builtins(stats))

    async def health(self, request: web.Request) -> web.Response:
        """200 ``{"status": "ok"}`` while the view can be read, else a 503: for a load
        balancer's or an orchestrator's probe, which holds no token. It reads no tenant's
        data and answers nothing of any (so no token is asked for), and is not behind the
        read limit: a probe answers while recalls queue."""
        try:
            _check_parameters(request, "/v1/health")
        except InvalidInput as exc:
            return _error(400, exc)
        now = time.monotonic()
        # A new read only once the last has ended (a view on a stalled disk holds one
        # thread, not one a second) and its answer has stood its time.
        health = self._health
        if health is None or (
            health[1].done() and now - health[0] >= self._config.health_check_every_s
        ):
            check: asyncio.Future[dict[int, int]]
            check = asyncio.ensure_future(asyncio.to_thread(self._view.watermark))
            check.add_done_callback(_log_failed_health_check)
            health = self._health = (now, check)
        try:
            # Shielded: a probe that hangs up must not cancel the check the others share.
            await asyncio.shield(health[1])
        except LaserError as exc:
            # The cause names the view's path on disk: the log has it (once a check), an
            # unauthenticated caller does not.
            said = "the view cannot be read; the server's log says why"
            return _json({"error": type(exc).__name__, "message": said}, 503)
        return _json({"status": "ok"})

    def route(
        self, path: str, handler: Callable[[Principal, web.Request], Awaitable[web.Response]]
    ):
        async def serve(request: web.Request) -> web.Response:
            try:
                principal = self._auth(request)
                if inspect.isawaitable(principal):  # sync or async, as every hook of ours
                    principal = await principal
            except Unauthorized as exc:
                response = _json({"error": "Unauthorized", "message": str(exc)}, 401)
                response.headers["WWW-Authenticate"] = 'Bearer realm="laser-memory"'
                return response
            if not isinstance(principal, Principal):
                # The server's own code is wrong: a 500, logged with this, not a raw
                # AttributeError from deep in a route (a sync one's was "can't be awaited").
                raise ConfigError(
                    f"the authenticator {shown(self._auth)} returned {shown(principal)}; it "
                    "returns a Principal, or raises folders.http_auth.Unauthorized"
                )
            try:
                _check_parameters(request, path)
                return await handler(principal, request)
            except AccessDenied as exc:
                return _error(403, exc)
            except InvalidInput as exc:
                return _error(400, exc)
            except LaserError as exc:
                return _error(503, exc)

        return serve


def make_app(
    view: MemoryView, auth: Authenticate = anonymous, config: ServerConfig | None = None
) -> web.Application:
    """The aiohttp application serving ``view``."""
    if not isinstance(view, MemoryView):
        # Taken as it came, every request failed as the server's fault (a 500).
        raise ConfigError(
            f"make_app serves a MemoryView (MemoryView.open(path)), got {shown(view)}"
        )
    if not callable(auth):
        raise ConfigError(f"auth is a callable taking a request (TokenAuth), got {shown(auth)}")
    if config is not None and not isinstance(config, ServerConfig):
        raise ConfigError(f"config is a ServerConfig or None, got {shown(config)}")
    server = ViewServer(view, auth, config)
    app = web.Application(middlewares=[_json_refusals])
    for path, handler in (
        ("/v1/recall", server.recall),
        ("/v1/context", server.context),
        ("/v1/fetch", server.fetch),
        ("/v1/named", server.named),
        ("/v1/history", server.history),
        ("/v1/stats", server.stats),
    ):
        app.router.add_get(path, server.route(path, handler))
    app.router.add_get("/v1/health", server.health)
    return app


class _GuardedProtocol(asyncio.Protocol):
    """Passes everything to aiohttp's protocol and notes when request headers arrived."""

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard) -> None:
        self._inner = inner
        self._guard = guard
        self._head = b""
        self.headers_seen = False
        self.opened = time.monotonic()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._guard._opened(self)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.headers_seen:
            self._head = (self._head + data)[-4096:]
            if b"\r\n\r\n" in self._head:
                self.headers_seen = True
                self._head = b""
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard._closed(self)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class ConnectionGuard:
    """Wraps a protocol factory to bound connections and drop slow header senders."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], config: ServerConfig) -> None:
        self._factory = factory
        self._config = config
        self._open: dict[_GuardedProtocol, None] = {}  # insertion order: oldest first
        self.dropped = 0

    def __call__(self) -> asyncio.Protocol:
        return _GuardedProtocol(self._factory(), self)

    def _opened(self, conn: _GuardedProtocol) -> None:
        if len(self._open) >= self._config.max_connections:
            victim = next((c for c in self._open if not c.headers_seen), None)
            if victim is None:
                # Every slot serves a request: the newcomer waits for none of them.
                self.dropped += 1
                conn.abort()
                return
            self._drop(victim)
        self._open[conn] = None

    def _closed(self, conn: _GuardedProtocol) -> None:
        self._open.pop(conn, None)

    def _drop(self, conn: _GuardedProtocol) -> None:
        self._open.pop(conn, None)
        self.dropped += 1
        conn.abort()

    @property
    def open_connections(self) -> int:
        return len(self._open)

    async def reap(self) -> None:
        """Close connections that sent no complete request headers in time; runs until
        cancelled."""
        while True:
            await asyncio.sleep(min(1.0, self._config.header_timeout_s / 2))
            cutoff = time.monotonic() - self._config.header_timeout_s
            for conn in [c for c in self._open if not c.headers_seen and c.opened < cutoff]:
                self._drop(conn)


class _RepeatFilter(logging.Filter):
    """Lets one record of each message through per second and counts the rest, so an
    error that repeats at every accept (for example 'Too many open files') cannot fill
    the disk with log lines."""

    def __init__(self, interval_s: float = 1.0) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = f"{record.name}:{record.msg}"
        now = time.monotonic()
        if now - self._last.get(key, -1e9) < self._interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        self._last[key] = now
        skipped = self._suppressed.pop(key, 0)
        if skipped:
            record.msg = f"{record.msg} (and {skipped} more like it)"
        return True


async def serve_view(
    view: MemoryView,
    host: str,
    port: int,
    *,
    config: ServerConfig | None = None,
    auth: Authenticate | None = None,
    ready: Callable[[str], object] | None = None,
) -> None:
    """Serve ``view`` on host:port until cancelled, behind a `ConnectionGuard`.
    ``ready`` (sync or async) is given the lines to say once it listens. ``auth`` (a
    `folders.http_auth.TokenAuth`) authenticates every request; without one, every caller
    is the anonymous local principal, so only a loopback host is allowed."""
    config = config or ServerConfig()
    if auth is None and not is_loopback(host):
        raise ConfigError(
            f"serving on {shown(host)} without authentication would let anyone who reaches it "
            "read every tenant; pass an auth file (serve --auth FILE) or serve on 127.0.0.1"
        )
    repeat = _RepeatFilter()
    for name in ("asyncio", "aiohttp.server", "aiohttp.access"):
        logging.getLogger(name).addFilter(repeat)
    runner = web.AppRunner(
        make_app(view, auth if auth is not None else anonymous, config=config),
        access_log=None,
        keepalive_timeout=config.keepalive_timeout_s,
        max_line_size=config.max_request_line_bytes,
    )
    await runner.setup()
    try:
        assert runner.server is not None
        guard = ConnectionGuard(runner.server, config)
        try:
            server = await asyncio.get_running_loop().create_server(
                guard, host, port, backlog=1024, reuse_address=True
            )
        except (OSError, OverflowError) as exc:  # in use, not this host's, no such port
            raise ConfigError(f"cannot serve on {host}:{port}: {exc}") from None
        async with server, asyncio.TaskGroup() as tasks:
            tasks.create_task(guard.reap(), name="laser-http-reaper")
            if ready is not None:
                lines = [f"serving {view.path} on http://{host}:{port}"]
                if auth is None:
                    lines.append(
                        "no --auth: every caller on this host reads every namespace of "
                        "every tenant (tenant= per request); use --auth FILE to require tokens"
                    )
                for line in lines:
                    # Sync or async: an async one was called and never run.
                    if inspect.isawaitable(said := ready(line)):
                        await said
            await server.serve_forever()
    finally:
        await runner.cleanup()
        for name in ("asyncio", "aiohttp.server", "aiohttp.access"):
            logging.getLogger(name).removeFilter(repeat)
