"""memory_with(namespace, "vector"): scratch memory for the life of a connection, in a
private log of its own, never on the shared one."""

from __future__ import annotations

import asyncio
import os
import tempfile

import numpy as np
import pytest

import laser_memory as lm
from laser_memory.embedding import WordHashEmbedder


async def test_vector_backend_lives_and_dies_with_its_connection(laser: lm.Laser):
    scratch = await laser.memory_with("runbooks", "vector", embedder=WordHashEmbedder())
    pool = await scratch.remember("node-7 sits in the eu-west pool", conversation="c1")
    keys = await scratch.remember("node-9 rotates keys monthly", conversation="c1")
    [best, *_] = await scratch.recall(text="which pool is node-7 in", strategy="semantic")
    assert best.id == pool and best.embedder == "test/word-hash"
    # Without text: newest first, then feedback-ranked once any item has feedback.
    assert [i.id for i in await scratch.recall()] == [keys, pool]
    await scratch.improve(pool, 1.0)
    assert [i.id for i in await scratch.recall()] == [pool, keys]
    await scratch.forget(keys)
    assert [i.id for i in await scratch.recall()] == [pool]
    # Keyword recall never calls the embedder.
    calls = []

    class Counting(WordHashEmbedder):
        def embed_many(self, texts):
            calls.append(list(texts))
            return super().embed_many(texts)

    counted = await laser.memory_with("other", "vector", embedder=Counting())
    await counted.remember("rotate the signing keys")
    calls.clear()
    assert len(await counted.recall(text="signing", strategy="keyword")) == 1
    assert calls == []
    # Nothing reached the connection's own log.
    assert await laser.memory("runbooks").recall(folded=True) == []
    folder = laser._private[0][1]
    assert await asyncio.to_thread(os.path.isdir, folder)
    await laser.stop()
    assert not await asyncio.to_thread(os.path.exists, folder)


async def test_vector_backend_needs_an_embedder(laser: lm.Laser):
    with pytest.raises(lm.InvalidInput, match="needs an embedder"):
        await laser.memory_with("runbooks", "vector")
    with pytest.raises(lm.InvalidInput, match="unknown memory backend"):
        await laser.memory_with("runbooks", "graph")
    # Compared with "log" it raised numpy's own ValueError (an array has no one truth).
    for bad in (np.array(["log", "vector"]), None, 5):
        with pytest.raises(lm.InvalidInput, match="'log' or 'vector'"):
            await laser.memory_with("runbooks", bad)
    assert (await laser.memory_with("runbooks")).namespace == laser.memory("runbooks").namespace


async def test_a_vector_backend_refused_makes_no_private_log(tmp_path, monkeypatch):
    # An embedder that is none was found only after the private log was made and
    # started, which then lived, unused, as long as the connection.
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    async with lm.connect(f"local://{tmp_path / 'log'}") as laser:
        for bad in (object(), "minilm"):
            with pytest.raises(lm.InvalidInput, match="embedder"):
                await laser.memory_with("runbooks", "vector", embedder=bad)
        assert os.listdir(tmp_path / "temp") == []


async def test_vector_backend_keeps_the_connections_tenant_principal_and_governor(tmp_path):
    """The scratch memory of a connection bound to acme took writes and reads of any
    tenant; a principal's missing grants and the governor's refusals were never asked.
    (Its log is private whatever the connection's: one embedded log serves here.)"""
    asked: list[str] = []

    def governor(write: lm.ProposedWrite) -> bool:
        asked.append(write.op)
        return b"secret" not in (write.body or b"")

    url = f"local://{tmp_path / 'log'}"
    async with lm.connect(url, tenant="acme", governor=governor) as acme:
        scratch = await acme.memory_with("scratch", "vector", embedder=WordHashEmbedder())
        assert scratch.tenant == "acme"
        kept = await scratch.remember("acme runs node-7")
        with pytest.raises(lm.AccessDenied, match="bound to tenant 'acme'"):
            await scratch.remember("globex runs node-9", tenant="globex")
        with pytest.raises(lm.AccessDenied, match="bound to tenant 'acme'"):
            await scratch.recall(tenant="globex")
        with pytest.raises(lm.PolicyDenied):
            await scratch.remember("the secret is 42")
        assert asked == ["remember", "remember"]
        assert [(i.id, i.scope.tenant) for i in await scratch.recall()] == [(kept, "acme")]
    reader = lm.Principal("reader", tenant="acme", grants={"kv:read:*"})
    async with lm.connect(url, principal=reader) as readonly:
        scratch = await readonly.memory_with("scratch", "vector", embedder=WordHashEmbedder())
        with pytest.raises(lm.AccessDenied, match="publish:"):
            await scratch.remember("acme runs node-7")
        assert await scratch.recall() == []


async def test_vector_backend_of_a_stopped_connection_is_refused(tmp_path, monkeypatch):
    # It opened a private log and made a folder that nothing would stop or delete: the
    # connection's stop, which does both, had run.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    laser = lm.connect(f"local://{tmp_path / 'log'}")
    async with laser:
        pass
    with pytest.raises(lm.LogClosed, match="was stopped"):
        await laser.memory_with("scratch", "vector", embedder=WordHashEmbedder())
    assert laser._private == []
    assert [p.name for p in tmp_path.iterdir()] == ["log"]


async def test_vector_backend_whose_log_cannot_open_leaves_nothing(laser, tmp_path, monkeypatch):
    # The private log's folder is removed and the failure raised as itself.
    from laser_memory.log.local import LocalLog

    async def cannot_open(self) -> None:
        raise lm.LogUnavailable("cannot open the local log: the disk is full")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    monkeypatch.setattr(LocalLog, "_open", cannot_open)
    with pytest.raises(lm.LogUnavailable, match="the disk is full"):
        await laser.memory_with("scratch", "vector", embedder=WordHashEmbedder())
    assert laser._private == []
    assert list((tmp_path / "scratch").iterdir()) == []
