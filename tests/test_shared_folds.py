"""With `MemoryConfig.shared_folds`, handles a connection makes on one namespace and tenant
share one fold: a handle made per request reads only the records new since the last one
read, never another tenant's. Without it, each handle folds the log on its own."""

from __future__ import annotations

import gc

import pytest
from counting_log import CountingLog

import laser_memory as lm
from laser_memory.memory import MemoryConfig


async def _request(laser: lm.Laser, tenant: str) -> list[str]:
    """What a server does for one request: a handle, one folded recall, then it is gone."""
    memory = laser.memory("notes", tenant=tenant)
    return sorted(i.text for i in await memory.recall(folded=True, limit=1000))


async def test_a_handle_per_request_reads_only_what_is_new(tmp_path):
    log = CountingLog(tmp_path / "log")
    async with lm.Laser(log, stream="s", config=MemoryConfig(shared_folds=8)) as laser:
        await laser.bootstrap(partitions=4)
        for tenant in ("acme", "globex"):
            writer = laser.memory("notes", tenant=tenant)
            await writer.remember_many([f"{tenant} fact {i}" for i in range(200)])
        del writer
        gc.collect()
        log.handed_out = 0
        first = await _request(laser, "acme")
        assert len(first) == 200 and all(t.startswith("acme") for t in first)
        whole = log.handed_out  # one read of the topic
        assert whole >= 400
        gc.collect()  # the request's handle is gone; its fold is kept
        log.handed_out = 0
        assert await _request(laser, "acme") == first
        assert log.handed_out == 0
        await laser.memory("notes", tenant="acme").remember("acme fact new")
        log.handed_out = 0
        assert len(await _request(laser, "acme")) == 201
        assert log.handed_out == 1  # the new record alone
        # Another tenant's requests fold their own records, never acme's.
        globex = await _request(laser, "globex")
        assert len(globex) == 200 and all(t.startswith("globex") for t in globex)


async def test_folds_are_kept_as_configured_and_shared_while_handles_live(tmp_path):
    log = CountingLog(tmp_path / "log")
    config = MemoryConfig(shared_folds=1)
    async with lm.Laser(log, stream="s", config=config) as laser:
        for tenant in ("acme", "globex", "initech"):
            await laser.memory("notes", tenant=tenant).remember(f"{tenant}'s fact")
        gc.collect()
        for tenant in ("acme", "globex"):
            await _request(laser, tenant)
        gc.collect()
        # One fold kept: globex's, the last handed out; acme's is read again.
        log.handed_out = 0
        await _request(laser, "globex")
        assert log.handed_out == 0
        await _request(laser, "acme")
        assert log.handed_out == 3
    log = CountingLog(tmp_path / "log1")
    async with lm.Laser(log, stream="s", config=MemoryConfig(shared_folds=2)) as laser:
        for tenant in ("acme", "globex", "initech"):
            await laser.memory("notes", tenant=tenant).remember(f"{tenant}'s fact")
        for tenant in ("acme", "globex", "acme", "initech"):
            await _request(laser, tenant)
        gc.collect()
        # The two used last are kept: acme (used again) and initech, not globex.
        log.handed_out = 0
        for tenant in ("acme", "initech"):
            await _request(laser, tenant)
        assert log.handed_out == 0
    log = CountingLog(tmp_path / "log2")
    async with lm.Laser(log, stream="s", config=MemoryConfig(shared_folds=1)) as laser:
        await laser.memory("notes").remember("a fact")
        held = laser.memory("notes")
        await held.recall(folded=True)
        for tenant in ("acme", "globex"):  # the one kept fold is another's now
            await _request(laser, tenant)
        log.handed_out = 0
        # While a handle lives, a new one shares its fold, kept or not.
        await _request_unbound(laser)
        assert log.handed_out == 0
    log = CountingLog(tmp_path / "log3")
    async with lm.Laser(log, stream="s") as laser:  # the default: nothing shared
        await laser.memory("notes").remember("a fact")
        held = laser.memory("notes")
        await held.recall(folded=True)
        log.handed_out = 0
        await _request_unbound(laser)
        assert log.handed_out == 1  # a fold of its own: the whole topic, read again


async def _request_unbound(laser: lm.Laser) -> None:
    await laser.memory("notes").recall(folded=True)


@pytest.mark.parametrize("kept", [-1, True, "8", 1.5, None])
def test_shared_folds_is_a_count_from_zero(kept):
    with pytest.raises(lm.ConfigError, match="shared_folds"):
        MemoryConfig(shared_folds=kept)


async def test_a_shared_fold_answers_as_a_fresh_one(laser: lm.Laser):
    # Both logs: writes through one handle, recalls through others made after on a
    # connection sharing its folds, each checked against a fold of the topic afresh.
    config = MemoryConfig(shared_folds=8)
    async with lm.connect(laser.log.url, stream=laser.stream, config=config) as sharing:
        for step in range(5):
            writer = sharing.memory("notes", tenant="acme")
            mid = await writer.remember(f"step {step}", conversation=f"c{step % 2}")
            if step % 2:
                await writer.improve(mid, 2.0)
            if step == 3:
                await writer.forget(mid)
            shared = await sharing.memory("notes", tenant="acme").recall(folded=True)
            alone = await laser.memory("notes", tenant="acme").recall(folded=True)
            assert [(i.id, i.score) for i in shared] == [(i.id, i.score) for i in alone]
