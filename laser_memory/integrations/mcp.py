"""A Model Context Protocol server over one memory namespace, for MCP clients (desktop
assistants, agent frameworks): ``laser-memory mcp``.

Tools: ``remember``, ``recall``, ``context``, ``improve``, ``forget`` for items, and
``fetch``, ``named``, ``set``, ``update``, ``remove`` for named items. The namespace and
tenant are fixed when the server starts (the handle is bound to the tenant), never chosen
by the model; a conversation is the only scope a tool call may name. Every `LaserError`
comes back as an MCP tool error with its message, so the model can read what was wrong;
the server goes on.

Needs the optional extra: ``pip install 'laser-memory[mcp]'`` (the official ``mcp`` SDK,
2.x).

>>> server = memory_server(laser.memory("notes", tenant="acme"))   # doctest: +SKIP
>>> await server.run_stdio_async()                                  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from . import missing_extra

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra(__name__, "mcp", exc) from exc

from ..access import is_loopback
from ..errors import ConfigError, InvalidInput, LaserError, shown
from ..ids import MemoryId
from ..items import MemoryItem, NamedItem
from ..memory import MemoryHandle
from ..named import dump_json
from ..recall import MAX_LIMIT
from ..rerank import RerankedMemory, is_memory_handle

__all__ = ["memory_server"]

_INSTRUCTIONS = (
    "Long-term memory. Call recall with the user's question before answering to find what "
    "was remembered about it; call remember for facts worth keeping (one fact per call). "
    "When a fact changed, remember the new one with supersedes set to the old item's id. "
    "Give improve a positive weight for memories that helped and a negative one for "
    "misleading ones; forget removes an item."
)


def _named(item: NamedItem) -> dict[str, Any]:
    """A named item as the tools give it: its value as JSON, or its text when it holds no
    JSON (set through the Python API), and its version."""
    try:
        value: Any = item.json()
    except LaserError:
        value = item.text
    return {"key": item.key, "value": value, "version": item.version}


def _item(item: MemoryItem) -> dict[str, Any]:
    return {
        "id": str(item.id),
        "kind": item.kind.value,
        "text": item.text,
        "conversation": item.conversation,
        "weight": item.weight,
        "score": item.score,
        "appended_at_ms": item.append_time_ms,
    }


def _tool_errors(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A LaserError becomes an MCP tool error the model reads; anything else is a crash
    the SDK reports as one."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except LaserError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    return wrapper


def memory_server(
    memory: MemoryHandle | RerankedMemory, *, name: str = "laser-memory"
) -> MCPServer:
    """An MCP server whose tools read and write ``memory`` (bind it to a tenant with
    ``laser.memory(ns, tenant=...)``: tool calls cannot name one). Raises `ConfigError`
    for anything but a memory handle, or a name that is no text."""
    # Checked now: taken, a namespace's name or the connection failed every tool call as
    # a crash the model could not read, and a name that is no str ended the session.
    if not is_memory_handle(memory):
        raise ConfigError(
            f"memory_server serves a memory handle (laser.memory(ns, tenant=...)), got "
            f"{shown(memory)}"
        )
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"an MCP server's name is a non-empty str, got {shown(name)}")
    server = MCPServer(name=name, instructions=_INSTRUCTIONS)

    @server.tool(
        description="Remember one fact, preference or event so later conversations can "
        "recall it. Returns the new item's id. Set supersedes to an item id when this "
        "corrects that item; ttl_seconds makes it expire."
    )
    @_tool_errors
    async def remember(
        text: str,
        kind: str = "fact",
        conversation: str | None = None,
        supersedes: str | None = None,
        ttl_seconds: float | None = None,
    ) -> dict[str, Any]:
        mid = await memory.remember(
            text, kind=kind, conversation=conversation, supersedes=supersedes, ttl=ttl_seconds
        )
        return {"id": str(mid)}

    @server.tool(
        description="Find remembered items. With text: the items that best answer it "
        "(by words and meaning); without: the items feedback says helped, then the newest "
        "(strategy recent: the newest only). strategy is auto, recent, keyword, semantic or "
        "hybrid."
    )
    @_tool_errors
    async def recall(
        text: str | None = None,
        conversation: str | None = None,
        strategy: str = "auto",
        limit: int = 10,
    ) -> list[dict[str, Any]]:
        items = await memory.recall(
            text=text, conversation=conversation, strategy=strategy, limit=limit
        )
        return [_item(item) for item in items]

    @server.tool(
        description="A conversation's memory as one prompt block (the items feedback says "
        "helped first, then the newest), cut to token_budget tokens when given."
    )
    @_tool_errors
    async def context(conversation: str | None = None, token_budget: int | None = None) -> str:
        return await memory.context(conversation, token_budget=token_budget)

    @server.tool(
        description="Feedback on an item: a positive weight when it helped, negative when "
        "it misled. Feedback adds up and ranks items in recall."
    )
    @_tool_errors
    async def improve(id: str, weight: float) -> dict[str, Any]:
        await memory.improve(MemoryId.parse(id), weight)
        return {"id": id, "improved": weight}

    @server.tool(description="Forget an item by id: it leaves recall; its history stays.")
    @_tool_errors
    async def forget(id: str) -> dict[str, Any]:
        await memory.forget(MemoryId.parse(id))
        return {"id": id, "forgotten": True}

    @server.tool(description="A named item's current value (JSON or text), or null.")
    @_tool_errors
    async def fetch(key: str) -> dict[str, Any] | None:
        item = await memory.fetch(key)
        if item is None:
            return None
        return _named(item)

    @server.tool(
        description="List the named items whose key starts with prefix (every key without "
        "one), by key, with their values and versions: the first limit (20 unless given)."
    )
    @_tool_errors
    async def named(prefix: str = "", limit: int = 20) -> list[dict[str, Any]]:
        if limit > MAX_LIMIT:  # a model asking for a million keys gets the reason
            raise InvalidInput(f"limit is at most {MAX_LIMIT}, got {limit}")
        return [_named(item) for item in await memory.named(prefix, limit=limit)]

    @server.tool(
        description="Set a named item (a profile, settings) to a JSON value: an object, a "
        "list, a string, a number, true, false or null. fetch returns it as set."
    )
    @_tool_errors
    async def set(key: str, value: Any) -> dict[str, Any]:
        # Every value as JSON, a string too: stored as its bare text, the string "12345"
        # or "true" came back from fetch as a number or a bool.
        body = value if isinstance(value, dict | list) else dump_json(value, "the value")
        await memory.set(key, body)
        return {"key": key, "set": True}

    @server.tool(
        description="Update a named item with a JSON merge patch (RFC 7386): fields "
        "overwrite, null removes."
    )
    @_tool_errors
    async def update(key: str, patch: dict[str, Any]) -> dict[str, Any]:
        await memory.update(key, patch)
        return {"key": key, "updated": True}

    @server.tool(
        description="Remove a named item (removing an absent key succeeds). With if_version, "
        "only if the item is still at that version (as fetch gave it): a remove decided on "
        "what was read never undoes a newer set or update."
    )
    @_tool_errors
    async def remove(key: str, if_version: int | None = None) -> dict[str, Any]:
        await memory.remove(key, if_version=if_version)
        return {"key": key, "removed": True}

    return server


#: Seconds a cancelled HTTP server gives its open sessions before it closes them.
_SHUTDOWN_S = 5.0


async def serve_streamable_http(
    server: MCPServer,
    *,
    port: int,
    host: str = "127.0.0.1",
    ready: Callable[[str], object] | None = None,
) -> None:
    """Serve ``server`` over streamable HTTP at ``http://HOST:PORT/mcp`` until cancelled.

    The address is bound before anything starts, so one in use (or not this host's) is a
    `ConfigError` naming it; ``port=0`` takes a free port, and ``ready`` (sync or async)
    gets the URL actually served.

    >>> await serve_streamable_http(server, port=8765, ready=print)   # doctest: +SKIP
    serving MCP on http://127.0.0.1:8765/mcp
    """
    import uvicorn  # the mcp extra's server, imported only to serve HTTP, as the SDK does

    if not isinstance(server, MCPServer):
        raise ConfigError(f"serve_streamable_http serves an MCPServer, got {shown(server)}")
    if type(port) is not int or not 0 <= port <= 65535:  # True was port 1
        raise ConfigError(f"an MCP server's port is an int from 0 to 65535, got {shown(port)}")
    if not isinstance(host, str) or not host:
        raise ConfigError(f"an MCP server's host is a non-empty str, got {shown(host)}")
    if not is_loopback(host):
        # Its tools read and write the handle's tenant, and it asks no caller who it is.
        raise ConfigError(
            f"the MCP server asks no caller who it is: served on {shown(host)}, anyone who "
            "reaches it could read and write this tenant's memory; serve it on 127.0.0.1 "
            "(with an authenticating proxy in front for remote clients)"
        )
    # Bound here, not by uvicorn: a port in use was uvicorn's log line and sys.exit(3),
    # after the app had started, where `serve` says ConfigError and exits 1.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family)
    except (OSError, OverflowError) as exc:  # in use, not this host's, no such port
        raise ConfigError(f"cannot serve MCP on {host}:{port}: {exc}") from None
    with sock:
        bound = sock.getsockname()[1]
        app = server.streamable_http_app(host=host)
        config = uvicorn.Config(
            app,
            log_level=server.settings.log_level.lower(),
            timeout_graceful_shutdown=_SHUTDOWN_S,
        )
        if ready is not None:  # the socket listens: a client may connect from now on
            where = f"[{host}]" if family == socket.AF_INET6 else host
            # Sync or async: an async one was called and never run.
            if inspect.isawaitable(said := ready(f"serving MCP on http://{where}:{bound}/mcp")):
                await said
        http = uvicorn.Server(config)
        serving = asyncio.ensure_future(http.serve(sockets=[sock]))
        try:
            await asyncio.shield(serving)
        except asyncio.CancelledError:
            # Cancelling uvicorn's task tore the app's lifespan down with a traceback in
            # the log; asked to exit, it shuts down as on Ctrl-C (sessions get _SHUTDOWN_S).
            http.should_exit = True
            await asyncio.wait([serving])
            raise
