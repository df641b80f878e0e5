"""The MCP server as an MCP client uses it, with the official SDK's own client: a session
lists the tools, calls each, and sees a LaserError as a tool error with its message,
never a crashed server. The tenant is the server's, whatever a call says. Over both logs,
in process, and once over stdio through `laser-memory mcp`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra")  # dev installs it; CI fails without dev

from mcp import Client, StdioServerParameters

import laser_memory as lm
from laser_memory.integrations.mcp import memory_server, serve_streamable_http

TOOLS = {
    *("remember", "recall", "context", "improve", "forget"),
    *("fetch", "named", "set", "update", "remove"),
}


def data(result):
    assert not result.is_error, result.content
    content = result.structured_content
    return content.get("result", content) if isinstance(content, dict) else content


async def test_every_tool_through_an_mcp_session(laser: lm.Laser):
    server = memory_server(laser.memory("notes", tenant="acme"))
    async with Client(server) as client:
        listed = (await client.list_tools()).tools
        assert {t.name for t in listed} == TOOLS
        for tool in listed:
            assert len(tool.description) > 30, tool.name
            assert "tenant" not in tool.input_schema.get("properties", {}), tool.name
        assert "text" in next(t for t in listed if t.name == "recall").input_schema["properties"]

        first = data(await client.call_tool("remember", {"text": "node-7 sits in eu-west"}))
        data(
            await client.call_tool(
                "remember", {"text": "the reporter prefers email", "conversation": "t-1"}
            )
        )
        found = data(await client.call_tool("recall", {"text": "where is node-7", "limit": 5}))
        assert found[0]["text"] == "node-7 sits in eu-west" and found[0]["id"] == first["id"]
        data(await client.call_tool("improve", {"id": first["id"], "weight": 2.0}))
        [best] = data(await client.call_tool("recall", {"strategy": "auto", "limit": 1}))
        assert best["weight"] == 2.0
        block = data(await client.call_tool("context", {"conversation": "t-1"}))
        assert "prefers email" in block
        correction = data(
            await client.call_tool(
                "remember", {"text": "node-7 moved to us-east", "supersedes": first["id"]}
            )
        )
        texts = [i["text"] for i in data(await client.call_tool("recall", {"limit": 10}))]
        assert "node-7 sits in eu-west" not in texts and "node-7 moved to us-east" in texts
        forgot = data(await client.call_tool("forget", {"id": correction["id"]}))
        assert forgot == {"id": correction["id"], "forgotten": True}
        texts = [i["text"] for i in data(await client.call_tool("recall", {"limit": 10}))]
        assert texts == ["the reporter prefers email"]

        done = data(
            await client.call_tool("set", {"key": "profile", "value": {"channel": "email"}})
        )
        assert done == {"key": "profile", "set": True}
        done = data(await client.call_tool("update", {"key": "profile", "patch": {"tier": "gold"}}))
        assert done == {"key": "profile", "updated": True}
        fetched = data(await client.call_tool("fetch", {"key": "profile"}))
        assert fetched == {
            "key": "profile",
            "value": {"channel": "email", "tier": "gold"},
            "version": 2,
        }
        data(await client.call_tool("set", {"key": "motto", "value": "ship it {"}))
        fetched = data(await client.call_tool("fetch", {"key": "motto"}))
        assert fetched == {"key": "motto", "value": "ship it {", "version": 1}
        # A body that is no JSON (set through the Python API) comes back as its text.
        await laser.memory("notes", tenant="acme").set("plain", "ship it {")
        fetched = data(await client.call_tool("fetch", {"key": "plain"}))
        assert fetched == {"key": "plain", "value": "ship it {", "version": 1}
        assert data(await client.call_tool("fetch", {"key": "absent"})) is None
        listed = data(await client.call_tool("named", {"prefix": "pro"}))
        assert listed == [
            {"key": "profile", "value": {"channel": "email", "tier": "gold"}, "version": 2}
        ]
        keys = [i["key"] for i in data(await client.call_tool("named", {"limit": 2}))]
        assert keys == sorted(keys) and len(keys) == 2
        result = await client.call_tool("named", {"limit": 1001})
        assert result.is_error and "limit is at most 1000" in result.content[0].text
        # A remove for a version the item has moved past changes nothing; at its version,
        # it removes; an absent key succeeds.
        removed = {"key": "profile", "removed": True}
        assert (
            data(await client.call_tool("remove", {"key": "profile", "if_version": 1})) == removed
        )
        assert data(await client.call_tool("fetch", {"key": "profile"}))["version"] == 2
        data(await client.call_tool("remove", {"key": "profile", "if_version": 2}))
        assert data(await client.call_tool("fetch", {"key": "profile"})) is None
        assert data(await client.call_tool("remove", {"key": "absent"})) == {
            "key": "absent",
            "removed": True,
        }
        # Every JSON value comes back as set: a string that reads as a JSON number or bool
        # stays a string (stored as its bare text, "12345" came back a number and "true" a
        # bool). (The SDK itself hands the tool a string holding a JSON object, list or
        # null as that value.)
        for number, value in enumerate(
            ["12345", "true", "-0.5e3", "", 12345, 2.5, True, False, None, [1, "x"], {}]
        ):
            data(await client.call_tool("set", {"key": f"v{number}", "value": value}))
            fetched = data(await client.call_tool("fetch", {"key": f"v{number}"}))
            assert fetched["value"] == value and type(fetched["value"]) is type(value), value

        # Bad input is a tool error with the LaserError's message; the server goes on.
        for name, arguments, message in (
            ("remember", {"text": ""}, "EmptyBody"),
            ("remember", {"text": "x", "kind": "gossip"}, "UnknownKind"),
            ("recall", {"strategy": "graph"}, "InvalidInput"),
            ("improve", {"id": "not-an-id", "weight": 1.0}, "InvalidId"),
            ("improve", {"id": first["id"], "weight": 1e12}, "InvalidWeight"),
            ("remember", {"text": "x", "ttl_seconds": -1}, "InvalidInput"),
        ):
            result = await client.call_tool(name, arguments)
            assert result.is_error, (name, arguments)
            assert message in result.content[0].text, result.content[0].text
        assert data(await client.call_tool("recall", {"limit": 1}))

        # The model cannot pick a tenant: everything landed in the server's.
        await client.call_tool("remember", {"text": "globex secret?", "tenant": "globex"})
    everywhere = laser.memory("notes")
    assert await everywhere.recall(tenant="globex") == []
    assert await everywhere.recall(tenant="") == []
    assert len(await everywhere.recall(tenant="acme", include_superseded=True)) >= 2


async def test_the_cli_serves_mcp_over_stdio(tmp_path):
    log = f"local://{tmp_path / 'log'}"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "laser_memory.cli", "mcp", "--url", log, "--tenant", "acme"],
        env={**os.environ},
    )
    async with Client(params) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        data(await client.call_tool("remember", {"text": "remembered over stdio"}))
        [item] = data(await client.call_tool("recall", {}))
        assert item["text"] == "remembered over stdio"
    async with lm.connect(log, create=False) as laser:
        [item] = await laser.memory("notes").recall(tenant="acme", folded=True)
        assert item.text == "remembered over stdio"


async def test_the_cli_serves_mcp_over_http_on_the_port_it_prints(tmp_path):
    log = f"local://{tmp_path / 'log'}"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "laser_memory.cli", "mcp", "--url", log, "--tenant", "acme",
        "--http-port", "0", stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        line = (await asyncio.wait_for(process.stderr.readline(), 60)).decode()
        url = re.fullmatch(r"serving MCP on (http://127\.0\.0\.1:\d+/mcp)\n", line)
        assert url, line
        async with Client(url[1]) as client:
            data(await client.call_tool("remember", {"text": "remembered over http"}))
            [item] = data(await client.call_tool("recall", {}))
            assert item["text"] == "remembered over http"
    finally:
        process.terminate()
        _, said = await process.communicate()
    # A service manager's stop is a clean exit, as `serve`'s (it was status 143: uvicorn
    # raised the signal again once it had shut down).
    assert process.returncode == 0 and b"stopped by SIGTERM" in said, said[-2000:]
    async with lm.connect(log, create=False) as laser:
        [item] = await laser.memory("notes").recall(tenant="acme", folded=True)
        assert item.text == "remembered over http"


_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
async def test_the_stdio_mcp_server_stops_at_once_on_a_signal(tmp_path, stop):
    """Its client, a service manager or Ctrl-C stops it while stdin is still open: it
    stops then. Ctrl-C at a terminal did nothing: asyncio's handler cancelled the server,
    which then waited for the SDK's thread reading stdin until the client closed it
    (modelcontextprotocol/python-sdk#3551); a stop by SIGTERM that waited so would hang."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "laser_memory.cli", "mcp", "--url", f"local://{tmp_path}",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    # Serving once it answers: an initialize request, answered on stdout.
    process.stdin.write(json.dumps(_INITIALIZE).encode() + b"\n")
    await process.stdin.drain()
    assert b'"id":1' in await asyncio.wait_for(process.stdout.readline(), 60)
    process.send_signal(stop)
    assert await asyncio.wait_for(process.wait(), 30) == -stop


async def test_recall_over_mcp_returns_ten_items_unless_told(laser: lm.Laser):
    memory = laser.memory("notes")
    await memory.remember_many([f"fact {n}" for n in range(12)])
    async with Client(memory_server(memory)) as client:
        assert len(data(await client.call_tool("recall", {}))) == 10
        assert len(data(await client.call_tool("recall", {"limit": 12}))) == 12


async def test_an_http_server_in_process_serves_until_cancelled(laser: lm.Laser, capfd):
    memory = laser.memory("notes", tenant="acme")
    server = memory_server(memory)
    for bad in (
        {"port": "80"}, {"port": True}, {"port": 65536}, {"port": -1}, {"port": 0, "host": ""}
    ):  # fmt: skip
        with pytest.raises(lm.ConfigError, match=r"an MCP server's (port|host)"):
            await serve_streamable_http(server, **bad)
    for host in ("0.0.0.0", "::", "10.0.0.1", "my-host"):  # it asks no caller who it is
        with pytest.raises(lm.ConfigError, match="anyone who reaches it could read and write"):
            await serve_streamable_http(server, port=0, host=host)
    with pytest.raises(lm.ConfigError, match="serves an MCPServer"):
        await serve_streamable_http(memory, port=0)
    said: asyncio.Queue[str] = asyncio.Queue()
    # An async `ready` (`Queue.put`) is awaited: one was called and never run.
    serving = asyncio.create_task(serve_streamable_http(server, port=0, ready=said.put))
    url = (await asyncio.wait_for(said.get(), 30)).removeprefix("serving MCP on ")
    async with Client(url) as client:
        data(await client.call_tool("remember", {"text": "over http in process"}))
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(serving, 30)
    assert "Traceback" not in capfd.readouterr().err  # stopped as on Ctrl-C, not torn down
    # And stopped by the time the cancelled call returns: no server left shutting down.
    assert not [t for t in asyncio.all_tasks() if "Server.serve" in repr(t.get_coro())]
    assert [i.text for i in await memory.recall(folded=True)] == ["over http in process"]


def test_the_cli_says_when_its_http_port_is_in_use(tmp_path):
    # Was uvicorn's log line and exit code 3 after the app had started.
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "laser_memory.cli", "mcp", "--url",
             f"local://{tmp_path / 'log'}", "--http-port", str(port)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"ConfigError: cannot serve MCP on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


#: Arguments a model (or a client) can send that no tool's schema expects.
HOSTILE = [None, 0, -1, 2**63, 1.5, True, "", "a\x00b", "x" * 300, "x" * 1_100_000, "\ud800",
           [], {}, {"a": 1}, "not-an-id", "\u202e"]  # fmt: skip
CALLS = {
    "remember": {"text": "t", "kind": "fact", "conversation": "c", "ttl_seconds": 60},
    "recall": {"text": "t", "conversation": "c", "strategy": "auto", "limit": 10},
    "context": {"conversation": "c", "token_budget": 100},
    "improve": {"id": None, "weight": 1.0},
    "forget": {"id": None},
    "fetch": {"key": "k"},
    "set": {"key": "k", "value": "v"},
    "update": {"key": "k", "patch": {"a": 1}},
    "remove": {"key": "k", "if_version": 1},
    "named": {"prefix": "k", "limit": 5},
}


async def test_every_tool_takes_hostile_arguments_as_tool_errors(laser: lm.Laser, tmp_path):
    # Each argument of each tool set, one at a time, to each hostile value: the call
    # succeeds or is a tool error (the schema's, or a LaserError's by name), the server
    # goes on, everything written folds, and nothing leaves the server's tenant.
    from folders.service import ViewFolder
    from folders.view import MemoryView

    server = memory_server(laser.memory("notes", tenant="acme"))
    async with Client(server) as client:
        seed = data(await client.call_tool("remember", {"text": "seed"}))["id"]
        for tool, base in CALLS.items():
            base = {name: seed if value is None else value for name, value in base.items()}
            for name in base:
                for value in HOSTILE:
                    result = await client.call_tool(tool, {**base, name: value})
                    if not result.is_error:
                        continue
                    text = result.content[0].text
                    error = re.match(r"Error executing tool \w+: (\w+):", text)
                    assert (
                        (
                            error is not None
                            and issubclass(getattr(lm, error.group(1)), lm.LaserError)
                        )
                        or "rejected arguments" in text
                        or "validation error" in text
                    ), (tool, name, value, text[:300])
        assert data(await client.call_tool("recall", {"limit": 1}))
    await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
        until_caught_up=True
    )
    with MemoryView.open(tmp_path / "view") as view:
        assert view.stats().set_aside == 0
    assert await laser.memory("notes").recall(tenant="") == []


async def test_a_server_is_made_over_a_memory_handle_only(laser: lm.Laser):
    """A namespace's name or the connection was taken, and every tool call then failed
    as a crash the model could not read; a name that is no str ended the session."""
    for memory, name in (
        ("notes", "laser-memory"),
        (laser, "laser-memory"),
        (None, "laser-memory"),
        (laser.memory("notes", tenant="acme"), 5),
        (laser.memory("notes", tenant="acme"), " "),
    ):
        with pytest.raises(lm.ConfigError, match=r"memory handle|non-empty str"):
            memory_server(memory, name=name)  # type: ignore[arg-type]

    # A reranked handle serves as the handle does, with its recalls reranked.
    def longest_first(query: str, texts: list[str]) -> list[float]:
        return [float(len(text)) for text in texts]

    handle = laser.memory("notes", tenant="acme")
    server = memory_server(lm.RerankedMemory(handle, longest_first), name="reranked")
    async with Client(server) as client:
        for text in ("keys on the hook", "the keys are in the blue bowl by the door"):
            data(await client.call_tool("remember", {"text": text}))
        found = data(await client.call_tool("recall", {"text": "keys", "limit": 2}))
        assert [item["text"] for item in found] == [
            "the keys are in the blue bowl by the door",
            "keys on the hook",
        ]
    assert len(await laser.memory("notes").recall(tenant="acme", folded=True)) == 2


_README = Path(__file__).resolve().parent.parent / "README.md"


async def test_the_docs_name_every_tool(laser: lm.Laser):
    """The module's docstring, the command's help and the README's MCP section name the
    server's tools: a tool added (remove, named) must not be one a reader never hears of."""
    import laser_memory.integrations.mcp as module
    from laser_memory.cli import main

    async with Client(memory_server(laser.memory("notes"))) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
    assert tools == TOOLS
    doc = module.__doc__ or ""
    said = doc[doc.index("Tools:") : doc.index("for named items")]
    assert set(re.findall(r"``(\w+)``", said)) == tools
    help_text = " ".join((main.commands["mcp"].help or "").split())
    assert all(re.search(rf"\b{tool}\b", help_text) for tool in tools), help_text
    readme = _README.read_text(encoding="utf-8")
    section = readme[readme.index("## An MCP server") : readme.index("## Pointing it at Kafka")]
    assert all(f"`{tool}`" in section for tool in tools)
