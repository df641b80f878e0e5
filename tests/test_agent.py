"""Agents on the sessions topic: an agent handles the messages sent to it, remembers its
turns through a MemoryHandler, stamps linked memory with its session, records what it
retrieved (the items' histories show it), and consolidates on a timer. Over both logs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import numpy as np
import pytest

import laser_memory as lm
from laser_memory.agent import AgentTopic, SessionRecord, decode_session, encode_session


async def until(check, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out waiting")
        await asyncio.sleep(0.02)


async def test_a_message_to_an_agent_on_a_fresh_embedded_log_makes_its_topic(tmp_path):
    """The library works on a fresh machine: on the embedded log the sessions topic is
    made by the first message, as a memory topic by the first remember (no test sent a
    message before `bootstrap`)."""
    async with lm.connect(f"local://{tmp_path}", stream="s") as laser:
        sent = await laser.send_to_agent("triage", "hello", conversation="t-1")
        info = await laser.log.describe_topic(sent.topic)
        assert (sent.topic, info.partitions) == ("s.agent.sessions", 4)
        [[record]] = [batch async for batch in laser.log.read(sent.topic)]
        assert (record.partition, record.offset) == (sent.partition, sent.offset)


async def test_drain_says_when_the_messages_were_not_handled_in_time(tmp_path):
    """A handler still busy when the time is up: `WaitTimeout` saying how far the agent
    got (no test let the time run out), and a later drain sees the work done."""
    async with lm.connect(f"local://{tmp_path}", stream="s") as laser:
        await laser.bootstrap(partitions=1)
        release = asyncio.Event()

        async def slow(message: lm.AgentMessage) -> None:
            await release.wait()

        agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, slow)
        try:
            await agent.ready()
            await laser.send_to_agent("triage", "first")
            await laser.send_to_agent("triage", "second")
            with pytest.raises(lm.WaitTimeout, match=r"'triage' .* within 0.2s \(0 handled"):
                await agent.drain(timeout=0.2)
            release.set()
            await agent.drain(timeout=20)
            assert agent.handled == 2
        finally:
            await agent.stop()


async def test_an_agent_handles_remembers_links_and_records_retrievals(laser: lm.Laser):
    memory = laser.memory("triage")
    await memory.remember("node-7 logins fail after the key rotation", conversation="kb")
    answers: list[str] = []

    async def answer(message: lm.AgentMessage) -> None:
        if message.text == "boom":
            raise RuntimeError("the model is down")
        found = await memory.recall(text=message.text, strategy="keyword", limit=3)
        assert await message.session.record_retrieval(message.text, found) == len(found) == 1
        await message.session.linked_memory().remember(
            f"answered {message.conversation}", conversation=message.conversation
        )
        answers.append(message.text)

    handler = lm.MemoryHandler(answer, memory).auto_remember("message")
    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, handler)
    try:
        assert await agent.ready() is agent
        sent = await laser.send_to_agent("triage", "node-7 logins fail", conversation="t-42")
        await laser.send_to_agent("billing", "not for triage", conversation="t-43")
        await laser.send_to_agent("triage", "boom", conversation="t-44")
        await agent.drain(timeout=20)
        assert agent.handled + len(agent.failures) == 2
        assert answers == ["node-7 logins fail"]
        assert [str(e) for e in agent.failures] == ["the model is down"]
        # The turn was remembered (the failed one was not), and the linked memory names
        # the agent and the session record.
        turns = await memory.recall(conversation="t-42", strategy="recent")
        by_text = {i.text: i for i in turns}
        assert set(by_text) == {"node-7 logins fail", "answered t-42"}
        linked = by_text["answered t-42"]
        assert linked.producer == lm.Producer(name="triage")
        # The origin names the session record in full: stream, topic, generation too.
        assert (linked.origin.stream, linked.origin.generation) == (
            laser.stream or "",
            sent.generation,
        )
        assert sent.generation  # a topic's generation is never empty on either log
        assert (linked.origin.topic, linked.origin.partition, linked.origin.offset) == (
            sent.topic,
            sent.partition,
            sent.offset,
        )
        assert await memory.recall(conversation="t-44") == []
        # The knowledge-base item's history shows the answer it went into.
        [kb] = await memory.recall(conversation="kb")
        history = await memory.history(kb.id)
        assert [(h.op, h.body) for h in history] == [
            ("remember", b"node-7 logins fail after the key rotation"),
            ("retrieved", b"node-7 logins fail"),
        ]
        assert (await memory.recall(conversation="kb"))[0].weight == 0.0  # nothing else moved
    finally:
        await agent.stop()
        await agent.stop()  # safe twice


async def test_a_session_acting_on_another_record_stamps_it_as_origin(laser: lm.Laser):
    """`acting_on` a recalled item, a receipt or an `Origin`: what the linked memory
    remembers then names that record, not the message; anything else is refused."""
    memory = laser.memory("triage")
    kb = await memory.remember("node-7 logins fail after the key rotation", conversation="kb")
    other = await memory.remember("rotate keys on Mondays", conversation="kb")
    refused: list[type] = []
    generated: list[int] = []

    async def answer(message: lm.AgentMessage) -> None:
        [item] = await memory.recall(conversation="kb", text="node-7", strategy="keyword")
        session = message.session
        await session.acting_on(item).linked_memory().remember("from the item", conversation="a")
        await (
            session.acting_on(other.receipt)
            .linked_memory()
            .remember("from the receipt", conversation="a")
        )
        given = lm.Origin(topic=kb.receipt.topic, partition=kb.receipt.partition, offset=7)
        await session.acting_on(given).linked_memory().remember("given", conversation="a")
        for bad in ("a string", kb, None):
            try:
                session.acting_on(bad)
            except lm.InvalidInput:
                refused.append(type(bad))
        # No list of recalled items (one item alone, a number: a raw TypeError before).
        for items in ("a string", "", b"", [5], [kb], [item, None], item, 5):
            try:
                await session.record_retrieval("q", items)
            except lm.InvalidInput as exc:
                refused.append(str(exc))
        # A query that is no text was written, and set aside by every fold; one that is no
        # Unicode failed as a record that "cannot be encoded".
        for query in (5, "\ud800"):
            try:
                await session.record_retrieval(query, [item])
            except lm.InvalidInput as exc:
                refused.append(str(exc))
        # A generator is taken whole: checking it spent it, and 0 was written.
        generated.append(await session.record_retrieval("from a generator", (i for i in [item])))

    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, lm.MemoryHandler(answer, memory))
    try:
        await laser.send_to_agent("triage", "what about node-7?", conversation="t-1")
        await agent.drain(timeout=20)
        assert agent.failures == [] and agent.handled == 1
    finally:
        await agent.stop()
    assert refused == [str, lm.MemoryId, type(None)] + [
        "items are the MemoryItems a recall returned"
    ] * 8 + ["query is a string, got int", "query '\\ud800' is not valid Unicode text"]
    assert generated == [1]
    history = await memory.history(kb)
    assert [(e.op, e.body) for e in history if e.op == "retrieved"] == [
        ("retrieved", b"from a generator")
    ]
    by_text = {i.text: i.origin for i in await memory.recall(conversation="a")}
    where = {text: (o.topic, o.partition, o.offset) for text, o in by_text.items()}
    assert where == {
        "from the item": (kb.receipt.topic, kb.receipt.partition, kb.receipt.offset),
        "from the receipt": (other.receipt.topic, other.receipt.partition, other.receipt.offset),
        "given": (kb.receipt.topic, kb.receipt.partition, 7),
    }
    assert by_text["from the item"].generation != ""  # an item's source names its topic's
    # A receipt names its stream (the connection's) and its topic's generation too.
    from_receipt = by_text["from the receipt"]
    assert (from_receipt.stream, from_receipt.generation) == (
        laser.stream or "",
        other.receipt.generation,
    )


async def test_a_retrieval_recorded_through_a_handle_that_may_not_write_is_refused(
    laser: lm.Laser,
):
    """`record_retrieval` through a handle whose principal may read but not publish
    raises AccessDenied, with items or without, and writes nothing."""
    memory = laser.memory("triage")
    await memory.remember("node-7 logins fail after the key rotation", conversation="kb")
    reader = laser.memory(
        "triage", principal=lm.Principal("reader", grants={f"kv:read:{memory.namespace}"})
    )
    outcomes: list[str] = []

    async def answer(message: lm.AgentMessage) -> None:
        found = await reader.recall(text=message.text, strategy="keyword")
        assert len(found) == 1
        for items in (found, []):
            try:
                await message.session.record_retrieval(message.text, items, memory=reader)
            except lm.AccessDenied as exc:
                outcomes.append(str(exc))

    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, lm.MemoryHandler(answer, memory))
    try:
        ends = await laser.log.end_offsets(memory.topic)
        await laser.send_to_agent("triage", "node-7 logins", conversation="t-1")
        await agent.drain(timeout=20)
        assert agent.failures == [] and agent.handled == 1
    finally:
        await agent.stop()
    assert len(outcomes) == 2 and all(f"publish:{memory.topic}" in o for o in outcomes)
    assert await laser.log.end_offsets(memory.topic) == ends
    [kb] = await memory.recall(conversation="kb")
    assert [h.op for h in await memory.history(kb.id)] == ["remember"]


async def test_an_agent_remembers_and_links_each_message_in_the_messages_tenant(
    laser: lm.Laser,
):
    """A message sent for tenant acme was remembered in the handle's tenant: the default
    tenant's readers saw it on an unbound handle, another tenant's on a bound one. Now it
    is remembered, and its linked memory written, in the message's tenant; a handle bound
    to another tenant refuses both (kept in failures); a connection bound to a tenant
    sends its messages in it, and its agents are handed that tenant's messages only."""
    for bound in (None, "globex"):
        memory = laser.memory(f"triage-{bound}", tenant=bound)
        linked: list[str] = []

        async def answer(message: lm.AgentMessage, memory=memory, linked=linked) -> None:
            try:
                await message.session.linked_memory(memory).remember(f"linked {message.text}")
            except lm.AccessDenied:
                linked.append(f"refused {message.tenant!r}")

        handler = lm.MemoryHandler(answer, memory).auto_remember("message")
        agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, handler)
        try:
            await laser.send_to_agent("triage", "acme secret", conversation="c", tenant="acme")
            await laser.send_to_agent("triage", "default", conversation="c")
            await agent.drain(timeout=20)
        finally:
            await agent.stop()
        reader = laser.memory(memory.namespace)
        seen = {
            t: sorted(i.text for i in await reader.recall(tenant=t)) for t in ("", "acme", "globex")
        }
        if bound is None:
            assert seen == {
                "": ["default", "linked default"],
                "acme": ["acme secret", "linked acme secret"],
                "globex": [],
            }
            assert linked == [] and handler.failures == []
        else:
            assert seen == {"": [], "acme": [], "globex": []}
            assert linked == ["refused 'acme'", "refused ''"]
            assert [type(e) for e in handler.failures] == [lm.AccessDenied] * 2
    acme = lm.Laser(laser.log, stream=laser.stream, tenant="acme")
    got: list[str] = []

    async def note(message: lm.AgentMessage) -> None:
        got.append(message.tenant)

    agent = await acme.spawn_agent("noter", AgentTopic.SESSIONS, note)
    try:
        await acme.send_to_agent("noter", "from acme")
        with pytest.raises(lm.AccessDenied, match="bound to tenant 'acme'"):
            await acme.send_to_agent("noter", "for globex", tenant="globex")
        # An agent of a connection bound to acme never sees another tenant's message.
        await laser.send_to_agent("noter", "globex secret", tenant="globex")
        await laser.send_to_agent("noter", "acme again", tenant="acme")
        await agent.drain(timeout=20)
    finally:
        await agent.stop()
    assert got == ["acme", "acme"]
    # A connection's principal needs the sessions topic's publish grant to send.
    topic = f"{laser.stream}.agent.sessions" if laser.stream else "agent.sessions"
    reader = lm.Laser(
        laser.log, stream=laser.stream, principal=lm.Principal("r", grants={"kv:read:*"})
    )
    ends = await laser.log.end_offsets(topic)
    with pytest.raises(lm.AccessDenied, match=f"publish:{topic}"):
        await reader.send_to_agent("noter", "not allowed")
    assert await laser.log.end_offsets(topic) == ends
    sender = lm.Principal("s", grants={f"publish:{topic}"})
    await lm.Laser(laser.log, stream=laser.stream, principal=sender).send_to_agent("noter", "ok")


async def test_an_agent_consolidates_on_a_timer(laser: lm.Laser):
    memory = laser.memory("triage")
    for n in range(5):
        await memory.remember(f"turn {n}", kind="message", agent="triage")
    scopes = []

    class Compact:
        async def consolidate(self, scope):
            scopes.append(scope)
            if len(scopes) == 2:
                raise RuntimeError("a failed pass does not stop later ones")
            return await memory.consolidate(2, agent="triage")

    async with await laser.spawn_agent(
        "triage",
        AgentTopic.SESSIONS,
        lambda message: None,
        consolidate_every_ms=50,
        consolidator=Compact(),
    ) as agent:
        assert agent.consolidation.every == 0.05  # milliseconds, as seconds
        await until(lambda: agent.consolidation.passes >= 2)
    passes = len(scopes)
    assert scopes[0] == {"agent": "triage"}
    assert len(agent.consolidation.failures) == 1
    assert agent.consolidation.reports[0] == lm.ConsolidationReport(pruned=3)
    assert len(await memory.recall(agent="triage")) == 2
    await asyncio.sleep(0.2)
    assert len(scopes) == passes  # stopped with the agent


async def test_a_session_of_an_agent_without_memory_says_so(laser: lm.Laser):
    said: list[str] = []

    async def handler(message: lm.AgentMessage) -> None:
        # Each was a raw AttributeError on None if its check went.
        try:
            message.session.linked_memory()
        except lm.ConfigError as exc:
            said.append(str(exc))
        try:
            await message.session.record_retrieval("q", [])
        except lm.ConfigError as exc:
            said.append(str(exc))

    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, handler)
    try:
        await laser.send_to_agent("triage", "hello")
        await agent.drain(timeout=20)
        assert agent.failures == [] and agent.handled == 1
    finally:
        await agent.stop()
    assert said == [
        "this agent has no memory: pass one to linked_memory(memory)",
        "this agent has no memory: pass one to record_retrieval",
    ]


def test_an_unknown_agent_topic_says_which_there_are():
    with pytest.raises(lm.InvalidInput, match=r"unknown agent topic 'agent\.inbox'; use one of"):
        AgentTopic("agent.inbox")


async def test_agent_configuration_is_checked(laser: lm.Laser):
    class Compact:
        async def consolidate(self, scope):
            return None

    for kwargs, match in (
        ({"consolidate_every": 60.0}, "needs both"),
        ({"consolidator": Compact()}, "needs both"),
        ({"consolidate_every": 0, "consolidator": Compact()}, "positive"),
        ({"consolidate_every": -1.0, "consolidator": Compact()}, "positive"),
        ({"consolidate_every_ms": 0, "consolidator": Compact()}, "positive"),
        ({"consolidate_every_ms": 1.5, "consolidator": Compact()}, "whole number of milli"),
        ({"consolidate_every_ms": True, "consolidator": Compact()}, "whole number of milli"),
        # Past float's range: a raw OverflowError before.
        ({"consolidate_every": 10**400, "consolidator": Compact()}, "finite"),
        ({"consolidate_every": float("inf"), "consolidator": Compact()}, "finite"),
        (
            {"consolidate_every": 1.0, "consolidate_every_ms": 1000, "consolidator": Compact()},
            "not both",
        ),
    ):
        with pytest.raises(lm.ConfigError, match=match):
            await laser.spawn_agent("triage", AgentTopic.SESSIONS, print, **kwargs)
    with pytest.raises(lm.ConfigError):
        await laser.spawn_agent("triage", AgentTopic.SESSIONS, "not callable")
    # Compared with the topic, an array raised numpy's truth-value ValueError.
    with pytest.raises(lm.ConfigError, match=r"AgentTopic\.SESSIONS"):
        await laser.spawn_agent("triage", np.array(["sessions", "x"]), print)
    with pytest.raises(lm.InvalidName):
        await laser.spawn_agent("", AgentTopic.SESSIONS, print)
    with pytest.raises(lm.InvalidInput):
        await laser.send_to_agent("triage", "")
    # A message no agent could be named by, or in no conversation a name can be, is
    # refused before it reaches the sessions topic (an int was written, and every
    # agent's decoder then set it aside; an empty id was a message for no one).
    for agent_id, conversation in ((5, None), ("", None), ("tri\x00age", None), ("triage", 5)):
        with pytest.raises(lm.InvalidName):
            await laser.send_to_agent(agent_id, "hello", conversation=conversation)
    try:
        ends = await laser.log.end_offsets(f"{laser.stream}.{AgentTopic.SESSIONS}")
    except lm.UnknownTopic:
        ends = {}
    assert not any(ends.values())
    # A memory of another kind failed every message whose session linked it, once the
    # agent ran; an agent made by hand on no connection was a raw AttributeError, and
    # one on no topic failed only when started.
    with pytest.raises(lm.ConfigError, match="memory handle"):
        await laser.spawn_agent("triage", AgentTopic.SESSIONS, print, memory="notes")
    # A reranked handle is a handle: taken, as before.
    reranked = laser.memory("notes").reranker(lambda query, texts: [0.0] * len(texts))
    assert lm.Agent(laser, "triage", print, topic="t", memory=reranked).memory is reranked
    with pytest.raises(lm.ConfigError, match="runs on a connection"):
        lm.Agent(laser.log, "triage", print, topic="t")
    for topic in (5, "bad topic!"):
        with pytest.raises(lm.InvalidName):
            lm.Agent(laser, "triage", print, topic=topic)


async def test_an_agent_on_a_stream_not_bootstrapped(any_log_url: str, stream_name: str):
    # The embedded log makes the sessions topic on first use, as it does the memory
    # topic; on Kafka topics come from bootstrap, and the error says so.
    async with lm.connect(any_log_url, stream=stream_name) as laser:
        if any_log_url.startswith("kafka://"):
            with pytest.raises(lm.UnknownTopic, match=r"run laser\.bootstrap\(\)"):
                await laser.spawn_agent("triage", AgentTopic.SESSIONS, print)
            return
        agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, print)
        try:
            info = await laser.log.describe_topic(f"{stream_name}.agent.sessions")
            assert info.partitions == laser.config.default_partitions
        finally:
            await agent.stop()


async def test_an_agent_started_again_after_stop_listens_anew(laser: lm.Laser):
    """`start` after `stop` did nothing at all: the agent stayed deaf without a word."""
    got: list[bytes] = []
    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, lambda m: got.append(m.payload))
    try:
        await laser.send_to_agent("triage", "first")
        await agent.drain()
        await agent.stop()
        await laser.send_to_agent("triage", "while stopped")
        with pytest.raises(TimeoutError):  # a stopped agent is not ready
            await asyncio.wait_for(agent.ready(), 0.2)
        await agent.start()
        assert await agent.ready() is agent
        await laser.send_to_agent("triage", "after the restart")
        await agent.drain()
        assert got == [b"first", b"after the restart"]  # it listens from the end again
        await agent.stop()
        # `async with` starts it again, and stops it.
        async with agent:
            assert await asyncio.wait_for(agent.ready(), 10) is agent
            await laser.send_to_agent("triage", "in the block")
            await agent.drain()
        assert got[-1] == b"in the block"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(agent.ready(), 0.2)
    finally:
        await agent.stop()


async def test_drain_waits_only_for_what_an_agent_listens_to(laser: lm.Laser):
    """Messages sent before an agent started are not its to handle: a drain right after
    it starts returns at once, not after waiting for them until its timeout."""
    for n in range(8):
        await laser.send_to_agent("triage", f"before {n}", conversation=f"c-{n}")
    got: list[bytes] = []
    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, lambda m: got.append(m.payload))
    try:
        await agent.ready()
        await agent.drain(timeout=5)
        await laser.send_to_agent("triage", "after", conversation="c-0")
        await agent.drain(timeout=20)
        assert got == [b"after"]
    finally:
        await agent.stop()


async def test_drain_returns_once_every_message_sent_is_handled(laser: lm.Laser):
    """Of a conversation's messages (one partition) handled slowly, drain returns after the
    last, not after the one before it: each handled message moves its partition's
    position one past its own offset."""
    got: list[bytes] = []

    async def slow(message: lm.AgentMessage) -> None:
        await asyncio.sleep(0.05)
        got.append(message.payload)

    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, slow)
    try:
        for n in range(3):
            await laser.send_to_agent("triage", f"m{n}", conversation="c-1")
        await agent.drain(timeout=20)
        assert got == [b"m0", b"m1", b"m2"]
    finally:
        await agent.stop()


async def test_two_starts_at_once_make_one_listener_and_a_stop_meanwhile_wins(laser: lm.Laser):
    """`start` looks up the topic's end before it listens: a second `start` made while
    the first looked, or a `stop`, must not leave two listeners or a stopped agent
    listening. (Only Kafka's lookup lets other calls in meanwhile: there each of the two
    checks after it is needed.)"""
    got: list[bytes] = []
    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, lambda m: got.append(m.payload))
    try:
        await agent.stop()
        await asyncio.gather(agent.start(), agent.start())
        await laser.send_to_agent("triage", "once")
        await agent.drain()
        assert got == [b"once"]  # handled by one listener, not two
        await agent.stop()
        starting = asyncio.create_task(agent.start())
        await asyncio.sleep(0)  # it is looking up the topic's end
        await agent.stop()
        await starting
        await laser.send_to_agent("triage", "while stopped")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(agent.ready(), 0.3)
        assert got == [b"once"]
    finally:
        await agent.stop()


async def test_drain_takes_a_number_of_seconds(laser: lm.Laser):
    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, lambda m: None)
    try:
        for timeout in (-1, float("nan"), float("inf"), "5", True, None):
            with pytest.raises(lm.InvalidInput, match="timeout is a number of seconds"):
                await agent.drain(timeout)  # type: ignore[arg-type]
        await agent.drain(0)
    finally:
        await agent.stop()


async def test_a_read_that_fails_is_kept_not_logged(tmp_path):
    """The log failing the agent's read ended its listener with an error asyncio could
    only log (the task group's parent, the task that called start, was long done): the
    agent went deaf and drain waited out its timeout. Now the error is in `failures`."""
    logged: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: logged.append(context))
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        await laser.bootstrap(partitions=2)
        agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, lambda m: None)
        try:
            await laser.log.stop()
            await until(lambda: agent.failures)
            assert isinstance(agent.failures[0], lm.LogClosed)
            with pytest.raises(lm.LogClosed):
                await agent.drain(1)
        finally:
            await agent.stop()
    assert logged == []


async def test_drain_raises_a_failed_read_at_once(tmp_path, monkeypatch):
    """With the log still answering (so drain can ask its ends), a listener whose read
    failed makes drain raise that failure at once instead of waiting out its timeout;
    started again, the agent listens anew and drain no longer raises it."""
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        await laser.bootstrap(partitions=2)

        gone = asyncio.Event()

        async def failing(*args, **kwargs):
            await gone.wait()
            raise lm.LogUnavailable("the broker went away")
            yield  # an async generator, as `read` is

        monkeypatch.setattr(laser.log, "read", failing)
        agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, lambda m: None)
        try:
            await laser.send_to_agent("triage", "never read")
            loop = asyncio.get_running_loop()
            # Waiting when the read fails, and asked after it did: both raise at once.
            waiting = asyncio.create_task(agent.drain(30))
            await asyncio.sleep(0.1)
            started = loop.time()
            gone.set()
            with pytest.raises(lm.LogUnavailable, match="went away"):
                await waiting
            assert loop.time() - started < 10
            with pytest.raises(lm.LogUnavailable, match="went away"):
                await agent.drain(30)
            assert loop.time() - started < 10
            # Started again once the log reads, the agent listens anew: the failure of
            # its last listener is no longer what drain raises.
            monkeypatch.undo()
            await agent.stop()
            await agent.start()
            await laser.send_to_agent("triage", "read now")
            await agent.drain(30)
            assert agent.handled == 1
        finally:
            await agent.stop()


async def test_bytes_on_the_sessions_topic_that_are_no_message_are_kept_and_passed(
    laser: lm.Laser,
):
    from laser_memory.log import OutgoingRecord

    got: list[bytes] = []
    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, lambda m: got.append(m.payload))
    try:
        topic = f"{laser.stream}.agent.sessions" if laser.stream else "agent.sessions"
        await laser.log.append_batch(topic, [OutgoingRecord(b"\xc1 not msgpack", key=b"a/x")])
        await laser.send_to_agent("triage", "after it")
        await agent.drain(timeout=20)
        assert got == [b"after it"]
        assert [type(e) for e in agent.failures] == [lm.RecordDecodeError]
    finally:
        await agent.stop()


async def test_an_agent_whose_handler_always_fails_keeps_its_latest_failures(laser: lm.Laser):
    """An agent keeps the latest `KEPT` failures and counts them all: each kept error holds
    its traceback and, through its frames, the message; all of them grew without end."""
    from laser_memory.latest import KEPT

    def refuse(message: lm.AgentMessage) -> None:
        raise RuntimeError(message.text)

    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, refuse)
    try:
        await agent.ready()
        count = KEPT + 30
        for n in range(count):
            await laser.send_to_agent("triage", f"message {n}", conversation="c")
        await agent.drain(timeout=20)
        assert agent.handled == 0 and agent.failures.total == count
        assert [str(e) for e in agent.failures] == [f"message {n}" for n in range(30, count)]
    finally:
        await agent.stop()


SESSIONS_V1 = Path(__file__).parent / "fixtures" / "sessions-v1"


@pytest.mark.parametrize(
    ("name", "record"),
    [
        (
            "session-message",
            SessionRecord(
                agent="triage", payload=b"my login fails", conversation="t-42", tenant="acme"
            ),
        ),
        ("session-message-minimal", SessionRecord(agent="triage", payload=b"hello")),
    ],
)
def test_session_messages_of_version_1_keep_decoding_and_encode_the_same(name, record):
    """Session messages sit on a topic as memory records do: the bytes written when the
    tenant field was the newest keep decoding, and today's encoder writes the same."""
    raw = (SESSIONS_V1 / f"{name}.bin").read_bytes()
    assert decode_session(raw) == record
    assert encode_session(record).value == raw
    fields = msgspec.msgpack.decode(raw)
    assert (fields["op"], fields["v"]) == ("session.message", 1)


def test_an_agent_never_stopped_warns(tmp_path):
    """As a log never stopped does: its listener was cancelled with the loop, unseen."""
    import gc

    async def leak() -> None:
        async with lm.connect(f"local://{tmp_path}", stream="s") as laser:
            agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, lambda m: None)
            await agent.ready()

    with pytest.warns(ResourceWarning, match="agent 'triage' was never stopped; await agent.stop"):
        asyncio.run(leak())
        gc.collect()


async def test_stop_returns_once_the_message_being_handled_is_cancelled(laser: lm.Laser):
    """Nothing of the agent runs after `stop` returns: a handler mid-message has been
    cancelled and has finished its cleanup by then."""
    started = asyncio.Event()
    ended: list[str] = []

    async def slow(message: lm.AgentMessage) -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append(message.text)

    agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, slow)
    try:
        await agent.ready()
        await laser.send_to_agent("triage", "long")
        await asyncio.wait_for(started.wait(), 20)
        await agent.stop()
        assert ended == ["long"] and agent.handled == 0
    finally:
        await agent.stop()
