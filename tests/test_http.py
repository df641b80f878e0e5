"""The HTTP server as a hostile client would try it: bad parameters are 400s, heavy
reads never hold other requests, and a flood of half-open connections neither exhausts
the server nor keeps a normal client out."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import ClientSession, ClientTimeout

import laser_memory as lm
from folders.http import ConnectionGuard, ServerConfig, make_app, serve_view
from folders.http_auth import anonymous
from folders.service import ViewFolder
from folders.view import MemoryView


@pytest.fixture(scope="module")
def big_view(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A view of 20,000 items that all share the word 'common'."""
    root = tmp_path_factory.mktemp("http")

    async def build() -> None:
        async with lm.connect(f"local://{root / 'log'}", stream="s") as laser:
            memory = laser.memory("notes")
            for start in range(0, 20_000, 5_000):
                await memory.remember_many(
                    [f"common fact number {i}" for i in range(start, start + 5_000)]
                )
            await memory.set("profile", {"a": 1})
            await ViewFolder(laser.log, laser.memory_topic_name, root / "view").run(
                until_caught_up=True
            )

    asyncio.run(build())
    return root / "view"


@contextlib.asynccontextmanager
async def serving(view_path: Path, config: ServerConfig) -> AsyncIterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ready = asyncio.Event()

    async def listening(_line: str) -> None:  # async: awaited (one was never run)
        ready.set()

    with MemoryView.open(view_path, create=False) as view:
        task = asyncio.create_task(
            serve_view(view, "127.0.0.1", port, config=config, ready=listening)
        )
        await asyncio.wait_for(ready.wait(), 10)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"max_concurrent_reads": 0}, "max_concurrent_reads is a positive int"),
        ({"max_concurrent_reads": None}, "max_concurrent_reads"),
        ({"max_connections": -1}, "max_connections"),
        ({"header_timeout_s": 0}, "header_timeout_s is a number of seconds above 0"),
        ({"keepalive_timeout_s": float("nan")}, "keepalive_timeout_s"),
        ({"embedder": "word-hash"}, "ServerConfig.embedder: an embedder has an embed_many"),
        ({"max_request_line_bytes": 0}, "max_request_line_bytes is a positive int"),
    ],
)
def test_server_settings_are_checked_when_made(settings, says):
    """Each was taken: no read allowed at a time hung every request, a None or a
    negative one was a raw error at the first."""
    with pytest.raises(lm.ConfigError, match=says):
        ServerConfig(**settings)


def test_an_app_is_made_of_a_view_an_auth_and_a_config(tmp_path: Path):
    """Each was taken as it came, and every request then failed as the server's fault
    (a 500 from a raw AttributeError)."""
    with MemoryView.open(tmp_path / "view") as view:
        for arguments, says in (
            ((str(tmp_path / "view"),), "make_app serves a MemoryView"),
            ((view, "token"), "auth is a callable"),
            ((view, anonymous, {"max_connections": 5}), "config is a ServerConfig"),
        ):
            with pytest.raises(lm.ConfigError, match=says):
                make_app(*arguments)
        make_app(view, anonymous, ServerConfig(max_connections=5))


def test_server_defaults_are_the_documented_ones():
    """The README promises four reads at a time, 512 open connections and 5 s for a
    request's headers."""
    config = ServerConfig()
    assert (config.max_concurrent_reads, config.max_connections) == (4, 512)
    assert config.header_timeout_s == 5.0 and config.embedder is None
    with pytest.raises(AttributeError):  # checked when made, so never changed after
        config.max_connections = 0  # type: ignore[misc]


async def test_a_long_question_reaches_the_recall_and_context_routes(big_view: Path):
    """A recall's or a context block's text is a query parameter: aiohttp read request
    lines of 8,190 bytes at most, about 2,700 characters of a question in a script of
    three-byte letters, and answered a longer one with a plain-text 400 of its own."""
    question = "common fact " + "事" * 6_000  # 18 KB of UTF-8, 54 KB percent-encoded
    async with serving(big_view, ServerConfig()) as base, ClientSession(base) as http:
        for path in ("/v1/recall", "/v1/context"):
            params = {"namespace": "stream:s/notes", "text": question, "limit": "3"}
            async with http.get(path, params=params) as response:
                assert response.status == 200, await response.text()
                answer = await response.json()
            assert "common fact" in (
                answer["block"] if path == "/v1/context" else answer[0]["body"]
            )
    # Past the configured line, aiohttp's own refusal, before any route.
    async with serving(big_view, ServerConfig(max_request_line_bytes=1024)) as base:
        async with (
            ClientSession(base) as http,
            http.get(
                "/v1/recall", params={"namespace": "stream:s/notes", "text": "x" * 2000}
            ) as response,
        ):
            assert response.status == 400


async def test_bad_parameters_are_400s_never_500s(big_view: Path):
    async with serving(big_view, ServerConfig()) as base, ClientSession(base) as http:
        for path, params in [
            ("/v1/recall", {"namespace": "stream:s/notes", "limit": str(10**12)}),
            ("/v1/recall", {"namespace": "stream:s/notes", "limit": "-1"}),
            ("/v1/recall", {"namespace": "stream:s/notes", "tenant": "a\x01b"}),
            ("/v1/fetch", {"namespace": "stream:s/notes", "key": "profile", "version": "-1"}),
            ("/v1/fetch", {"namespace": "stream:s/notes", "key": "profile", "version": str(2**64)}),
            ("/v1/fetch", {"namespace": "stream:s/notes", "key": "profile", "version": "1e3"}),
            ("/v1/history", {"namespace": "stream:s/notes", "id": "not-an-id"}),
            ("/v1/named", {"namespace": "stream:s/notes", "limit": "-1"}),
        ]:
            async with http.get(path, params=params) as response:
                assert response.status == 400, (path, params, await response.text())
                assert (await response.json())["error"]


async def test_the_routers_refusals_are_json_as_every_error(big_view: Path):
    """An unknown path or method got aiohttp's "404: Not Found" text, which a client
    reading the server's errors as JSON failed to parse."""
    async with serving(big_view, ServerConfig()) as base, ClientSession(base) as http:
        for path in ("/nope", "/v1/recall/", "/v2/recall"):
            async with http.get(path) as response:
                assert response.status == 404
                error = await response.json()
                assert error["error"] == "NotFound"
                assert path in error["message"]
                assert "/v1/recall" in error["message"] and "/v1/health" in error["message"]
        async with http.post("/v1/recall", params={"namespace": "stream:s/notes"}) as response:
            assert response.status == 405 and response.headers["Allow"] == "GET,HEAD"
            assert await response.json() == {
                "error": "MethodNotAllowed",
                "message": "'/v1/recall' takes GET, HEAD, not POST",
            }
        # An absent named item is still the route's own 404.
        params = {"namespace": "stream:s/notes", "key": "absent"}
        async with http.get("/v1/fetch", params=params) as response:
            assert response.status == 404
            assert await response.json() == {
                "error": "NotFound",
                "message": "no named item 'absent'",
            }


async def test_counts_are_ascii_digits_within_their_range(big_view: Path):
    """int() read "1_0" as 10, " 5 " and "+5" as 5, and Arabic-Indic digits as theirs:
    each was answered as that number. The message names the range the server takes."""
    ns = ("namespace", "stream:s/notes")
    async with serving(big_view, ServerConfig()) as base, ClientSession(base) as http:
        for path, params, says in [
            ("/v1/recall", [ns, ("limit", "1_0")], "limit must be a whole number from 0 to 1000"),
            ("/v1/recall", [ns, ("limit", " 5")], "got ' 5'"),
            ("/v1/recall", [ns, ("limit", "1001")], "from 0 to 1000, got '1001'"),
            ("/v1/named", [ns, ("limit", "+5")], "from 0 to 1000, got '+5'"),
            ("/v1/named", [ns, ("limit", "\u0665")], "limit must be a whole number"),
            ("/v1/fetch", [ns, ("key", "profile"), ("version", "0")], "from 1 to "),
            ("/v1/fetch", [ns, ("key", "profile"), ("version", "+1")], "version must be"),
        ]:
            async with http.get(path, params=params) as response:
                assert response.status == 400, (path, params, await response.text())
                assert says in (await response.json())["message"], (params, says)
        for path, params in [
            ("/v1/recall", [ns, ("limit", "0005")]),
            ("/v1/fetch", [ns, ("key", "profile"), ("version", "1")]),
        ]:
            async with http.get(path, params=params) as response:
                assert response.status == 200, (path, params, await response.text())
        async with http.get("/v1/recall", params=[ns, ("limit", "0005")]) as response:
            assert len(await response.json()) == 5


async def test_a_recall_without_a_limit_gives_50_items_every_way(big_view: Path):
    """The default limit is the same 50 over HTTP, from the managed view and from the
    fold in process: the newest 50, alike."""
    async with serving(big_view, ServerConfig()) as base, ClientSession(base) as http:
        async with http.get("/v1/recall", params={"namespace": "stream:s/notes"}) as response:
            served = [item["id"] for item in await response.json()]
    url = f"local://{big_view.parent / 'log'}"
    async with lm.connect(url, stream="s", view=big_view, create=False) as laser:
        memory = laser.memory("notes")
        managed = [str(i.id) for i in await memory.recall()]
        folded = [str(i.id) for i in await memory.recall(folded=True)]
    assert len(served) == 50 and served == managed == folded


async def test_a_query_that_is_no_utf8_once_percent_decoded_is_a_400(big_view: Path):
    """Read with replacement, ``key=%FF`` and ``key=%FE`` both fetched the key U+FFFD
    (and ``namespace=%FF`` recalled the namespace of that name): a 200 for bytes the
    caller never meant. UTF-8 percent-encoded is taken as it always was."""
    from yarl import URL

    ns = "stream:s/notes"
    async with serving(big_view, ServerConfig()) as base, ClientSession() as http:
        for query in (
            f"namespace={ns}&key=%FF",
            f"namespace={ns}&key=profile&tenant=%FE",
            "namespace=%FF",
            f"namespace={ns}&text=%ED%A0%80",  # an encoded surrogate
            f"namespace={ns}&%FF=1",
        ):
            path = "/v1/fetch" if "key=" in query else "/v1/recall"
            async with http.get(URL(f"{base}{path}?{query}", encoded=True)) as response:
                assert response.status == 400, (query, await response.text())
                assert "not UTF-8" in (await response.json())["message"]
        for query in (f"namespace={ns}&text=caf%C3%A9", f"namespace={ns}&text=common+fact"):
            async with http.get(URL(f"{base}/v1/recall?{query}", encoded=True)) as response:
                assert response.status == 200, (query, await response.text())
        found = f"{base}/v1/recall?namespace={ns}&text=common+fact&limit=1&strategy=keyword"
        async with http.get(URL(found, encoded=True)) as response:
            assert [i["body"][:11] for i in await response.json()] == ["common fact"]


async def test_parameters_a_handle_would_refuse_are_400s(big_view: Path):
    """Each was answered 200: a misspelt filter was ignored, so the answer was wider
    than asked; of a parameter given twice one was picked; a name or key a handle
    refuses was looked up and found empty; history took an id and a key at once."""
    notes = ("namespace", "stream:s/notes")
    async with serving(big_view, ServerConfig()) as base, ClientSession(base) as http:
        for path, params, says in [
            ("/v1/recall", [notes, ("agnet", "planner")], "unknown query parameter(s) 'agnet'"),
            ("/v1/stats", [("verbose", "1")], "/v1/stats takes no parameters"),
            ("/v1/recall", [notes, ("tenant", ""), ("tenant", "b")], "'tenant' is given more"),
            ("/v1/recall", [notes, notes], "'namespace' is given more than once"),
            ("/v1/recall", [("namespace", "a\x00b")], "namespace 'a\\x00b' contains a control"),
            ("/v1/named", [("namespace", "x" * 300)], "namespace is 300 bytes long"),
            ("/v1/fetch", [notes, ("key", "pro\x01")], "named item key 'pro\\x01' contains"),
            ("/v1/history", [notes, ("key", "\x7f")], "named item key"),
            # An empty kind filtered nothing, where an empty agent or conversation is refused.
            ("/v1/recall", [notes, ("kind", "")], "unknown memory kind ''"),
            ("/v1/recall", [notes, ("agent", "")], "agent must not be empty"),
            (
                "/v1/history",
                [notes, ("key", "profile"), ("id", str(lm.MemoryId.new()))],
                "an item's id or a named item's key, not both",
            ),
        ]:
            async with http.get(path, params=params) as response:
                body = await response.json()
                assert response.status == 400, (path, params, body)
                assert says in body["message"], (says, body)
        # What each route does take still answers.
        recall = [notes, ("agent", "planner"), ("include_superseded", "true"), ("limit", "5")]
        async with http.get("/v1/recall", params=recall) as response:
            assert response.status == 200 and await response.json() == []
        async with http.get("/v1/recall", params=[notes, ("kind", "fact"), ("limit", "2")]) as r:
            assert r.status == 200 and [i["kind"] for i in await r.json()] == ["fact", "fact"]
        async with http.get("/v1/recall", params=[notes, ("kind", "summary")]) as r:
            assert r.status == 200 and await r.json() == []
        for path in ("/v1/recall", "/v1/named"):  # a limit of 0 is a limit, not bad input
            async with http.get(path, params=[notes, ("limit", "0")]) as r:
                assert r.status == 200 and await r.json() == [], path
        async with http.get("/v1/recall", params=[notes, ("limit", "5")]) as response:
            assert response.status == 200 and len(await response.json()) == 5
        fetch = [notes, ("key", "profile"), ("tenant", ""), ("version", "1")]
        async with http.get("/v1/fetch", params=fetch) as response:
            assert response.status == 200 and (await response.json())["body"] == '{"a":1}'
        async with http.get("/v1/history", params=[notes, ("key", "profile")]) as response:
            assert response.status == 200 and len(await response.json()) == 1
        params = {"namespace": "stream:s/notes", "limit": "1000", "text": "common"}
        async with http.get("/v1/recall", params=params) as response:
            assert response.status == 200 and len(await response.json()) == 1000
        params = {"namespace": "stream:s/notes", "prefix": "pro"}
        async with http.get("/v1/named", params=params) as response:
            assert await response.json() == [{"key": "profile", "body": '{"a":1}', "version": 1}]


async def test_heavy_recalls_never_hold_other_requests(big_view: Path):
    config = ServerConfig(max_concurrent_reads=2)
    async with serving(big_view, config) as base, ClientSession(base) as http:
        finished: list[str] = []

        async def recall(n: int) -> None:
            # Heavy: a thousand items ranked and sent. With ten, twelve recalls over the
            # index an earlier test's server saved beside the view took 30 ms in all, and
            # under load they could all end before stats (sent at 50 ms) did.
            params = {"namespace": "stream:s/notes", "text": "common fact", "limit": "1000"}
            async with http.get("/v1/recall", params=params) as response:
                assert response.status == 200
                await response.read()
            finished.append(f"recall {n}")

        async def stats() -> None:
            await asyncio.sleep(0.05)  # after every recall was sent
            async with http.get("/v1/stats") as response:
                assert response.status == 200
                assert (await response.json())["items"] == 20_000
            finished.append("stats")

        await asyncio.gather(*(recall(n) for n in range(12)), stats())
        # Twelve recalls through two read slots: stats answered while they queued, not
        # in the queue behind them (it then finished among the last three).
        assert finished.index("stats") < 6, finished


async def test_a_flood_of_half_open_connections_keeps_a_normal_client_answered(
    big_view: Path,
):
    config = ServerConfig(max_connections=40, header_timeout_s=1.0)
    async with serving(big_view, config) as base:
        host, port = base.removeprefix("http://").split(":")
        flood: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        try:
            for _ in range(300):  # far more than the server keeps
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(b"GET /v1/stats HTTP/1.1\r\nHost: x\r\n")  # never finished
                flood.append((reader, writer))
            timeout = ClientTimeout(total=10)
            async with ClientSession(base, timeout=timeout) as http:
                for _ in range(3):
                    async with http.get("/v1/stats") as response:
                        assert response.status == 200
            # The server closed the flood's connections: the oldest when full, the rest
            # once they had not finished their headers in time.
            await asyncio.sleep(config.header_timeout_s * 2.5)
            closed = 0
            for reader, _ in flood:
                with contextlib.suppress(ConnectionError):
                    data = await asyncio.wait_for(reader.read(), 5)
                    closed += data == b""
            assert closed == len(flood)
        finally:
            for _, writer in flood:
                writer.close()


def test_the_guard_drops_the_oldest_connection_still_waiting_for_headers():
    class Inner(asyncio.Protocol):
        def connection_made(self, transport):
            pass

    class Transport:
        aborted = False

        def abort(self):
            self.aborted = True

    guard = ConnectionGuard(Inner, ServerConfig(max_connections=2))
    first, second, third = guard(), guard(), guard()
    transports = [Transport(), Transport(), Transport()]
    first.connection_made(transports[0])
    second.connection_made(transports[1])
    first.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # first is being served
    third.connection_made(transports[2])
    assert [t.aborted for t in transports] == [False, True, False]
    assert guard.open_connections == 2
    # A connection that closes leaves its slot (else closed ones filled every slot).
    first.connection_lost(None)
    third.connection_lost(None)
    assert guard.open_connections == 0
    fourth, fifth = guard(), guard()
    fourth.connection_made(Transport())
    fifth.connection_made(Transport())
    assert guard.open_connections == 2 and guard.dropped == 1
    # Every slot serving a request: the newcomer is the one turned away.
    for conn in (fourth, fifth):
        conn.data_received(b"GET / HTTP/1.1\r\n\r\n")
    sixth, turned_away = guard(), Transport()
    sixth.connection_made(turned_away)
    assert turned_away.aborted and guard.dropped == 2 and guard.open_connections == 2


async def test_the_reaper_closes_only_connections_without_headers_past_their_time():
    class Transport:
        aborted = False

        def abort(self):
            self.aborted = True

    guard = ConnectionGuard(asyncio.Protocol, ServerConfig(header_timeout_s=10.0))
    made = {}
    for name, age, headers in (("stale", 60.0, False), ("fresh", 0.1, False),
                               ("served", 60.0, True)):  # fmt: skip
        conn, transport = guard(), Transport()
        conn.connection_made(transport)
        conn.opened = time.monotonic() - age
        if headers:
            conn.data_received(b"GET / HTTP/1.1\r\n\r\n")
        made[name] = transport
    reaper = asyncio.create_task(guard.reap())
    try:
        for _ in range(300):  # the reaper looks every second
            if made["stale"].aborted:
                break
            await asyncio.sleep(0.01)
    finally:
        reaper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reaper
    assert {name: t.aborted for name, t in made.items()} == {
        "stale": True, "fresh": False, "served": False,
    }  # fmt: skip
    assert guard.open_connections == 2 and guard.dropped == 1


def test_the_guard_passes_every_event_on_to_the_servers_protocol():
    """aiohttp's protocol must hear of a lost connection (to end its handler), of the end
    of the client's data and of flow control (to stop filling a slow client's buffer)."""
    heard: list[tuple] = []

    class Inner(asyncio.Protocol):
        def connection_made(self, transport):
            heard.append(("made",))

        def data_received(self, data):
            heard.append(("data", data))

        def eof_received(self):
            heard.append(("eof",))
            return True

        def connection_lost(self, exc):
            heard.append(("lost", exc))

        def pause_writing(self):
            heard.append(("pause",))

        def resume_writing(self):
            heard.append(("resume",))

    class Transport:
        def abort(self):
            pass

    guard = ConnectionGuard(Inner, ServerConfig())
    conn = guard()
    conn.connection_made(Transport())
    conn.data_received(b"GET / HTTP/1.1\r\n\r\n")
    conn.pause_writing()
    conn.resume_writing()
    assert conn.eof_received() is True
    error = ConnectionResetError("gone")
    conn.connection_lost(error)
    assert heard == [
        ("made",), ("data", b"GET / HTTP/1.1\r\n\r\n"), ("pause",), ("resume",), ("eof",),
        ("lost", error),
    ]  # fmt: skip
    assert guard.open_connections == 0


async def test_a_serving_view_throttles_repeated_errors_and_stops_when_done(big_view: Path):
    """The once-a-second filter is on the loggers that repeat at every accept while the
    view is served, and off after."""
    import logging

    names = ("asyncio", "aiohttp.server", "aiohttp.access")
    before = {name: list(logging.getLogger(name).filters) for name in names}
    async with serving(big_view, ServerConfig()):
        for name in names:
            added = [f for f in logging.getLogger(name).filters if f not in before[name]]
            assert [type(f).__name__ for f in added] == ["_RepeatFilter"], name
    assert {name: list(logging.getLogger(name).filters) for name in names} == before


async def test_a_view_is_served_beyond_loopback_only_with_authentication(big_view: Path):
    """`serve_view` itself refuses a host other hosts reach when no authenticator is
    given (the CLI checks too, but the library is what an embedding program calls)."""
    from folders.http_auth import TokenAuth

    with MemoryView.open(big_view, create=False) as view:
        with pytest.raises(lm.ConfigError, match="without authentication"):
            await asyncio.wait_for(serve_view(view, "0.0.0.0", 0), 10)  # not served forever
        for host, auth in (("0.0.0.0", TokenAuth({})), ("127.0.0.1", None)):
            said: list[str] = []
            ready = asyncio.Event()

            def note(line: str, said=said, ready=ready) -> None:
                said.append(line)
                ready.set()

            task = asyncio.create_task(serve_view(view, host, 0, auth=auth, ready=note))
            try:
                await asyncio.wait_for(ready.wait(), 10)
                await asyncio.sleep(0)
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            # It says where it serves, and without auth that every local caller reads all.
            assert said[0].startswith(f"serving {view.path} on http://{host}:")
            assert len(said) == (1 if auth else 2), said
            assert auth or "no --auth" in said[1]


def test_an_error_repeated_at_every_accept_is_logged_once_a_second():
    import logging

    from folders.http import _RepeatFilter

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("laser-test-repeat")
    logger.propagate = False
    logger.addHandler(Keep())
    repeat = _RepeatFilter(interval_s=60.0)
    logger.addFilter(repeat)
    for _ in range(10_000):
        logger.error("socket.accept() out of system resource: Too many open files")
    logger.error("another error")
    assert records == [
        "socket.accept() out of system resource: Too many open files",
        "another error",
    ]
    # Once the interval has passed, the next one says how many were held back.
    repeat._interval_s = 0.0
    logger.error("socket.accept() out of system resource: Too many open files")
    assert records[-1] == (
        "socket.accept() out of system resource: Too many open files (and 9999 more like it)"
    )


async def test_recall_by_meaning_over_http(tmp_path: Path):
    async with lm.connect(
        f"local://{tmp_path / 'log'}", stream="s", embedder=lm.WordHashEmbedder()
    ) as laser:
        memory = laser.memory("notes")
        keys = await memory.remember("rotate signing keys every month", agent="ops")
        await memory.remember("the cafeteria serves lunch at noon", agent="ops")
        await memory.remember("the menu changes on monday", agent="cook")
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
            until_caught_up=True
        )
        query = {"namespace": memory.namespace, "text": "when do keys rotate"}
        # With an owner filter a hybrid recall is ranked from a scan of the view, which
        # compares the vectors of the server's embedder only.
        for strategy, agent in itertools.product(("semantic", "hybrid"), (None, "ops")):
            want = await memory.recall(
                strategy=strategy, text=query["text"], agent=agent, folded=True
            )
            params = {**query, "strategy": strategy, **({"agent": agent} if agent else {})}
            config = ServerConfig(embedder=lm.WordHashEmbedder())
            async with serving(tmp_path / "view", config) as base, ClientSession(base) as http:
                async with http.get("/v1/recall", params=params) as got:
                    assert got.status == 200
                    body = await got.json()
            assert [item["id"] for item in body] == [str(i.id) for i in want]
            assert body[0]["id"] == str(keys)
            assert [s["strategy"] for s in body[0]["signals"]] == (
                ["semantic"] if strategy == "semantic" else ["hybrid", "keyword", "semantic"]
            ), body[0]["signals"]

        # A view read that fails for a reason of the server's own (here its embedder) is
        # a 503 naming it, never a bare 500.
        class Broken(lm.WordHashEmbedder):
            def embed_many(self, texts):
                raise RuntimeError("the model is down")

        async with serving(tmp_path / "view", ServerConfig(embedder=Broken())) as base:
            async with ClientSession(base) as http, http.get("/v1/recall", params=query) as got:
                assert got.status == 503
                assert (await got.json())["error"] == "EmbeddingFailed"
        # Without an embedder the server ranks semantic recalls by keyword.
        async with serving(tmp_path / "view", ServerConfig()) as base, ClientSession(base) as http:
            async with http.get("/v1/recall", params={**query, "strategy": "semantic"}) as got:
                body = await got.json()
        assert body[0]["signals"][0]["strategy"] == "keyword"


async def test_what_each_route_reads_of_its_parameters(tmp_path: Path):
    """Each part of a route's reading of its query that no test held: a recall by
    recency with text ranks no vectors (it listed only the items of the server's
    embedder), blank text or none embeds nothing, an item expiring in ten minutes is
    served (the clock of the filter is the server's, in milliseconds), a recall by
    meaning compares the server's model's vectors only, a prefix narrows the named
    items, and a missing namespace or key is named."""
    url = f"local://{tmp_path / 'log'}"
    async with lm.connect(url, stream="s", embedder=lm.WordHashEmbedder()) as laser:
        embedded = laser.memory("notes")
        rotate = await embedded.remember("rotate signing keys every month")
        planner = await embedded.remember("the planner keeps spare keys", agent="planner")
        for key in ("profile", "plan", "settings"):
            await embedded.set(key, key.upper())

    class Narrower(lm.WordHashEmbedder):
        label, dimensions = "test/narrower", 32

    async with lm.connect(url, stream="s", embedder=Narrower()) as laser:
        # Vectors of two models, of two lengths, in the namespace.
        await laser.memory("notes").remember("keys keys keys, of another model")
    async with lm.connect(url, stream="s") as laser:
        plain = laser.memory("notes")
        await plain.remember("the cafeteria serves lunch at noon")
        await plain.remember("the visitor badge for the keys room", ttl=600.0)
        newest = [str(item.id) for item in await plain.recall(strategy="recent", folded=True)]
        assert len(newest) == 5
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
            until_caught_up=True
        )
    embedded_texts: list[str] = []

    class Counting(lm.WordHashEmbedder):
        def embed_many(self, texts):
            embedded_texts.extend(texts)
            return super().embed_many(texts)

    notes = ("namespace", "stream:s/notes")
    config = ServerConfig(embedder=Counting())
    async with serving(tmp_path / "view", config) as base, ClientSession(base) as http:

        async def ids(*params: tuple[str, str]) -> list[str]:
            async with http.get("/v1/recall", params=[notes, *params]) as response:
                assert response.status == 200, (params, await response.text())
                return [item["id"] for item in await response.json()]

        # Neither a recency recall nor blank text is ranked by meaning: the model (which
        # may be paid by the call) is not asked.
        assert await ids(("strategy", "recent"), ("text", "keys")) == newest
        assert await ids(("strategy", "recent")) == newest
        assert await ids(("text", "  ")) == await ids() == newest
        assert embedded_texts == []
        # The items with the server's model's vectors, by meaning; the other model's
        # vectors are not compared (nor refused for their length).
        params = [notes, ("strategy", "semantic"), ("text", "keys")]
        async with http.get("/v1/recall", params=params) as response:
            by_meaning = await response.json()
        assert [item["id"] for item in by_meaning] == [str(planner), str(rotate)]
        assert {item["signals"][0]["strategy"] for item in by_meaning} == {"semantic"}
        assert embedded_texts == ["keys"]

        async def keys(*params: tuple[str, str]) -> list[str]:
            async with http.get("/v1/named", params=[notes, *params]) as response:
                return [item["key"] for item in await response.json()]

        assert await keys(("prefix", "p")) == ["plan", "profile"]
        assert await keys(("prefix", "pro")) == ["profile"]
        assert await keys() == ["plan", "profile", "settings"]

        for path, params, says in [
            ("/v1/recall", [], "query parameter 'namespace' is required"),
            ("/v1/recall", [("namespace", "")], "query parameter 'namespace' is required"),
            ("/v1/fetch", [notes], "query parameter 'key' is required"),
            ("/v1/history", [notes], "query parameter 'key' is required"),
        ]:
            async with http.get(path, params=params) as response:
                assert response.status == 400, (path, params)
                assert (await response.json())["message"] == says


async def test_a_body_that_is_no_utf8_is_served_exactly_beside_its_text(tmp_path: Path):
    """Bytes a caller remembered came back from every route with their undecodable bytes
    replaced: `body_base64` gives them exactly, and text stays text alone."""
    blob = b"\x89PNG\r\n\x1a\n\xff"
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        memory = laser.memory("notes")
        mid = await memory.remember(blob)
        await memory.remember("plain text")
        await memory.set("blob", blob)
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
            until_caught_up=True
        )
    namespace = {"namespace": "stream:s/notes"}
    async with serving(tmp_path / "view", ServerConfig()) as base, ClientSession(base) as http:
        async with http.get("/v1/recall", params={**namespace, "strategy": "recent"}) as got:
            text, binary = await got.json()
        assert text["body"] == "plain text" and "body_base64" not in text
        assert base64.b64decode(binary["body_base64"]) == blob
        assert binary["body"] == blob.decode("utf-8", "replace")
        for path, params in (
            ("/v1/fetch", {"key": "blob"}),
            ("/v1/named", {}),
            ("/v1/history", {"id": str(mid)}),
        ):
            async with http.get(path, params={**namespace, **params}) as got:
                served = await got.json()
            entry = served if isinstance(served, dict) else served[0]
            assert base64.b64decode(entry["body_base64"]) == blob, (path, served)


def test_the_modules_docstring_names_every_route():
    """The module's own list of routes (what `help(folders.http)` shows) is the router's."""
    import re

    import folders.http as http

    named = set(re.findall(r"``GET (/v1/\w+)", http.__doc__ or ""))
    assert named == set(http._PARAMETERS)
