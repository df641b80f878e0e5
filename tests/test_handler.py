"""MemoryHandler remembers each message its handler finishes, never one it failed on,
and a failed memory write never fails the message. Over both logs."""

from __future__ import annotations

import msgspec
import pytest

import laser_memory as lm


class Ticket(msgspec.Struct):
    payload: str
    conversation: str | None = None
    agent: str | None = None


async def test_a_finished_message_is_remembered_under_its_conversation_and_agent(
    laser: lm.Laser,
):
    memory = laser.memory("triage")
    handled = []

    async def answer(message: Ticket) -> str:
        handled.append(message.payload)
        return f"on it: {message.payload}"

    handler = lm.MemoryHandler(answer, memory).auto_remember("message")
    assert await handler(Ticket("login fails on node-7", "t-1", "triage")) == (
        "on it: login fails on node-7"
    )
    [item] = await memory.recall(folded=True)
    assert (item.text, item.kind, item.conversation, item.scope.agent) == (
        "login fails on node-7",
        lm.MemoryKind.MESSAGE,
        "t-1",
        "triage",
    )
    # Off until a kind is chosen; a sync handler works too.
    quiet = lm.MemoryHandler(lambda message: "seen", memory)
    assert await quiet(Ticket("not remembered")) == "seen"
    assert len(await memory.recall(folded=True)) == 1


async def test_a_failed_handler_remembers_nothing_and_a_failed_write_fails_nothing(
    laser: lm.Laser, caplog: pytest.LogCaptureFixture
):
    memory = laser.memory("triage")

    def broken(message: Ticket) -> None:
        raise RuntimeError("the model timed out")

    with pytest.raises(RuntimeError, match="timed out"):
        await lm.MemoryHandler(broken, memory).auto_remember()(Ticket("lost", "t-1"))
    assert await memory.recall(folded=True) == []
    handler = lm.MemoryHandler(lambda message: "done", memory).auto_remember("fact")
    with caplog.at_level("WARNING", logger="laser_memory.handler"):
        assert await handler(Ticket("")) == "done"  # an empty payload cannot be remembered
    assert [type(f) for f in handler.failures] == [lm.EmptyBody]
    # Kept and logged: an operator watching the logs sees it too.
    assert [r.getMessage() for r in caplog.records] == [
        f"a handled message could not be remembered: {handler.failures[0]}"
    ]
    assert await memory.recall(folded=True) == []


def test_an_unknown_kind_is_refused_at_once(tmp_path):
    memory = lm.connect(f"local://{tmp_path}").memory("triage")
    with pytest.raises(lm.UnknownKind):
        lm.MemoryHandler(lambda message: None, memory).auto_remember("gossip")


def test_a_handler_or_memory_of_the_wrong_kind_is_a_config_error(tmp_path):
    # A handler that was no callable was a raw TypeError; a memory that was no handle
    # was taken, and failed only at the first message.
    memory = lm.connect(f"local://{tmp_path}").memory("triage")
    with pytest.raises(lm.ConfigError, match="wraps a callable handler"):
        lm.MemoryHandler("answer", memory)  # type: ignore[arg-type]
    with pytest.raises(lm.ConfigError, match="remembers into a memory handle"):
        lm.MemoryHandler(lambda message: None, "triage")  # type: ignore[arg-type]


def test_remembering_into_a_handle_that_may_not_write_is_refused_at_once(tmp_path):
    """A handler remembering into a handle whose principal may not publish would fail
    every message's write into `failures`: it is refused when made."""
    laser = lm.connect(f"local://{tmp_path}")
    memory = laser.memory("triage")
    reader = laser.memory("triage", principal=lm.Principal("r", grants={"kv:read:triage"}))
    handler = lm.MemoryHandler(lambda message: None, reader)  # remembering nothing: fine
    with pytest.raises(lm.AccessDenied, match=f"cannot remember.*'publish:{memory.topic}'"):
        handler.auto_remember("message")
    with pytest.raises(lm.AccessDenied, match="cannot remember into this handle"):
        lm.MemoryHandler(lambda message: None, reader, kind="fact")
    writer = lm.Principal("w", grants={f"publish:{memory.topic}"})
    lm.MemoryHandler(lambda m: None, laser.memory("triage", principal=writer), kind="fact")
