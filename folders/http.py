"""The managed view over HTTP, read-only, for readers on other hosts.

``laser-memory serve --view PATH`` serves, JSON in and out:

- ``GET /v1/recall?namespace=NS`` with any of ``tenant conversation agent user
  application kind text strategy limit``
- ``GET /v1/fetch?namespace=NS&key=K[&tenant=&version=]`` (404 when absent)
- ``GET /v1/history?namespace=NS&(id=ID|key=K)[&tenant=]``
- ``GET /v1/stats``

Every handler receives the caller's `Principal`. Today every caller is the
anonymous principal; authentication and grants come later and will only have
to replace `authenticate` and check the principal where it is passed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from laser_memory.errors import InvalidInput, LaserError
from laser_memory.ids import MemoryId

from .state import ItemFilter
from .view import MemoryView

__all__ = ["Principal", "ViewServer", "make_app"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking. ``anonymous`` until authentication lands."""

    name: str = "anonymous"


Authenticate = Callable[[web.Request], Awaitable[Principal]]


async def authenticate(request: web.Request) -> Principal:
    return Principal()


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(data, ensure_ascii=False), status=status, content_type="application/json"
    )


def _error(status: int, exc: Exception) -> web.Response:
    return _json({"error": type(exc).__name__, "message": str(exc)}, status)


class ViewServer:
    """Request handlers over one view; each takes the principal and the query."""

    def __init__(self, view: MemoryView, auth: Authenticate = authenticate) -> None:
        self._view = view
        self._auth = auth

    @staticmethod
    def _arg(request: web.Request, name: str, *, required: bool = False) -> str | None:
        value = request.query.get(name)
        if required and not value:
            raise InvalidInput(f"query parameter {name!r} is required")
        return value

    def _where(self, request: web.Request) -> ItemFilter:
        query = request.query
        return ItemFilter.build(
            tenant=query.get("tenant", ""),
            conversation=query.get("conversation"),
            agent=query.get("agent"),
            user=query.get("user"),
            application=query.get("application"),
            kind=query.get("kind") or None,
        )

    async def recall(self, principal: Principal, request: web.Request) -> web.Response:
        namespace = self._arg(request, "namespace", required=True)
        try:
            limit = int(request.query.get("limit", "50"))
        except ValueError:
            raise InvalidInput(
                f"limit must be a whole number, got {request.query['limit']!r}"
            ) from None
        items = self._view.recall(
            namespace,
            self._where(request),
            strategy=request.query.get("strategy", "auto"),
            text=self._arg(request, "text"),
            limit=limit,
        )
        return _json([item.to_json() for item in items])

    async def fetch(self, principal: Principal, request: web.Request) -> web.Response:
        namespace = self._arg(request, "namespace", required=True)
        key = self._arg(request, "key", required=True)
        version = request.query.get("version")
        try:
            number = int(version) if version is not None else None
        except ValueError:
            raise InvalidInput(f"version must be a whole number, got {version!r}") from None
        item = self._view.fetch(
            namespace, key, tenant=request.query.get("tenant", ""), version=number
        )
        if item is None:
            return _json({"error": "NotFound", "message": f"no named item {key!r}"}, 404)
        return _json(
            {
                "key": item.key,
                "body": item.text,
                "version": item.version,
                "append_time_ms": item.append_time_ms,
                "source": item.source._asdict(),
            }
        )

    async def history(self, principal: Principal, request: web.Request) -> web.Response:
        namespace = self._arg(request, "namespace", required=True)
        tenant = request.query.get("tenant", "")
        if "id" in request.query:
            entries = self._view.item_history(
                namespace, MemoryId.parse(request.query["id"]).bytes, tenant=tenant
            )
        else:
            key = self._arg(request, "key", required=True)
            entries = self._view.named_history(namespace, key, tenant=tenant)
        return _json([entry.to_json() for entry in entries])

    async def stats(self, principal: Principal, request: web.Request) -> web.Response:
        return _json(msgspec.to_builtins(self._view.stats()))

    def route(self, handler: Callable[[Principal, web.Request], Awaitable[web.Response]]):
        async def serve(request: web.Request) -> web.Response:
            try:
                principal = await self._auth(request)
                return await handler(principal, request)
            except InvalidInput as exc:
                return _error(400, exc)
            except LaserError as exc:
                return _error(503, exc)

        return serve


def make_app(view: MemoryView, auth: Authenticate = authenticate) -> web.Application:
    """The aiohttp application serving ``view``."""
    server = ViewServer(view, auth)
    app = web.Application()
    app.router.add_get("/v1/recall", server.route(server.recall))
    app.router.add_get("/v1/fetch", server.route(server.fetch))
    app.router.add_get("/v1/history", server.route(server.history))
    app.router.add_get("/v1/stats", server.route(server.stats))
    return app
