"""Tenants bound to handles, principals and their grants, and the governor: a refused
call reads nothing and writes nothing. Over both logs."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer, make_mocked_request
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import laser_memory as lm
from folders.http import ServerConfig, make_app
from folders.http_auth import (
    TokenAuth,
    Unauthorized,
    anonymous,
    hash_token,
    is_loopback,
    load_principals,
    new_token,
)
from folders.service import ViewFolder
from folders.view import MemoryView
from laser_memory.access import Principal, ProposedWrite
from laser_memory.cli import main


async def _ends(laser: lm.Laser) -> dict[int, int]:
    try:
        return await laser.log.end_offsets(laser.memory_topic_name)
    except lm.UnknownTopic:
        return {}


async def test_a_bound_handle_acts_in_its_tenant_and_refuses_another(laser: lm.Laser):
    acme = laser.memory("notes", tenant="acme")
    mid = await acme.remember("acme runs node-7", conversation="c1")
    await laser.memory("notes").remember("the default tenant's fact", conversation="c1")
    # What a bound handle wrote is in its tenant, seen by any handle naming that tenant.
    unbound = laser.memory("notes")
    assert [i.text for i in await unbound.recall(tenant="acme")] == ["acme runs node-7"]
    assert [i.text for i in await acme.recall()] == ["acme runs node-7"]
    assert [i.text for i in await acme.recall(tenant="acme")] == ["acme runs node-7"]
    await acme.set("profile", {"tier": "gold"})
    assert (await acme.fetch("profile")).json() == {"tier": "gold"}
    assert await unbound.fetch("profile") is None
    # A tenant no record can hold is refused when the handle is made, not at its first call.
    for bad in ("a\x00b", 5, "x" * 300):
        with pytest.raises(lm.ConfigError, match="tenant"):
            laser.memory("notes", tenant=bad)

    before = await _ends(laser)
    for call in (
        acme.recall(tenant="globex"),
        acme.remember("x", tenant="globex"),
        acme.remember_many([{"body": "y", "tenant": "globex"}]),
        acme.forget(mid, tenant="globex"),
        acme.improve(mid, 1.0, tenant="globex"),
        acme.fetch("profile", tenant=""),
        acme.history(mid, tenant="globex"),
        acme.set("profile", "z", tenant="globex"),
        acme.purge(0, tenant="globex"),
        acme.consolidate(0, tenant="globex"),
    ):
        with pytest.raises(lm.AccessDenied, match="bound to tenant 'acme'"):
            await call
    assert await _ends(laser) == before  # nothing written
    # Derived handles keep the binding.
    with pytest.raises(lm.AccessDenied):
        await acme.scoped("c1").recall(tenant="globex")
    with pytest.raises(lm.AccessDenied):
        await acme.with_lineage(producer="p").remember("w", tenant="globex")
    snapshot = await acme.as_of(mid)
    assert [i.text for i in await snapshot.recall()] == ["acme runs node-7"]
    with pytest.raises(lm.AccessDenied):
        await snapshot.recall(tenant="")
    # The named items then: none yet at the remember; the profile after the set, acme's only.
    await laser.memory("notes").set("profile", {"tier": "default"})
    assert snapshot.named() == []
    now = await acme.as_of(await _ends(laser))
    assert [(i.key, i.json()) for i in now.named("pro")] == [("profile", {"tier": "gold"})]
    assert now.named(limit=0) == []
    with pytest.raises(lm.AccessDenied):
        now.named(tenant="")
    for bad in ({"prefix": 5}, {"limit": -1}, {"limit": True}):
        with pytest.raises(lm.InvalidInput):
            now.named(**bad)


async def test_the_auditors_functions_refuse_what_they_cannot_read(laser: lm.Laser):
    # replay, snapshot and the history functions are public (an auditor's own scripts
    # call them): names of the wrong type failed with raw AttributeErrors, a moment that
    # was no int with a raw TypeError (NaN let every record through), an item's id
    # given printed found no history, and a range with nothing in it answered nothing.
    from folders.replay import item_history, named_history, replay, snapshot

    memory = laser.memory("notes", tenant="acme")
    mid = await memory.remember("acme's fact")
    await memory.set("profile", {"owner": "acme"})
    log, topic = laser.log, laser.memory_topic_name
    for call, error in (
        (lambda: replay(log, topic, namespace=5), lm.InvalidName),
        (lambda: replay(log, topic, namespace="\ud800"), lm.InvalidName),
        (lambda: replay(log, topic, tenant=b"acme"), lm.InvalidName),
        (lambda: replay(log, topic, since_ms="2026"), lm.InvalidInput),
        (lambda: replay(log, topic, since_ms=float("nan")), lm.InvalidInput),
        (lambda: replay(log, topic, until_ms=True), lm.InvalidInput),
        (lambda: replay(log, topic, until_ms=-1), lm.InvalidInput),
        (lambda: replay(log, topic, until_ms=1 << 63), lm.InvalidInput),  # past any time
        (lambda: replay(log, topic, since_ms=1 << 63), lm.InvalidInput),
        (lambda: replay(log, topic, since_ms=10, until_ms=9), lm.InvalidInput),
        (lambda: replay(log, topic, until=5), lm.InvalidInput),
        (lambda: snapshot(log, topic, 5, 0), lm.InvalidName),
        (lambda: snapshot(log, topic, memory.namespace, 0, tenant=5), lm.InvalidName),
    ):
        with pytest.raises(error):
            await call()
    records = await replay(log, topic, namespace=memory.namespace, tenant="acme", since_ms=0)
    assert len(records) == 2
    # An item's id as bytes, a MemoryId or printed: the same history.
    for form in (mid.bytes, mid, str(mid)):
        [entry] = item_history(records, form, tenant="acme")
        assert entry.body == b"acme's fact"
    for call, error in (
        (lambda: item_history(records, 5, tenant="acme"), lm.InvalidId),
        (lambda: item_history(records, mid, tenant=None), lm.InvalidName),
        (lambda: item_history(5, mid), lm.InvalidInput),
        (lambda: named_history(records, 5, tenant="acme"), lm.InvalidName),
        (lambda: named_history(records, "profile", tenant=None), lm.InvalidName),
        (lambda: named_history([object()], "profile"), lm.InvalidInput),
    ):
        with pytest.raises(error):
            call()
    assert len(named_history(records, "profile", tenant="acme")) == 1


async def test_histories_over_an_operators_replay_keep_one_tenant(laser: lm.Laser):
    # An auditor's replay of every tenant (tenant=None) fed to the public history
    # functions: each keeps the tenant it is asked for, though the records of the other
    # share the item's id and the named item's key.
    from folders.replay import item_history, named_history, replay

    acme, globex = laser.memory("notes", tenant="acme"), laser.memory("notes", tenant="globex")
    mid = await acme.remember("acme's fact")
    await globex.append(mid, "globex's fact with acme's id", kind="fact")
    await acme.set("profile", {"owner": "acme"})
    await globex.set("profile", {"owner": "globex"})
    # A record no reader can decode: the operator's replay lists it, with no record.
    from laser_memory.log.port import OutgoingRecord
    from laser_memory.records import HEADER_NAMESPACE

    header = ((HEADER_NAMESPACE, acme.namespace.encode()),)
    await laser.log.append(acme.topic, OutgoingRecord(b"\xc1 no msgpack", key=b"x", headers=header))
    everyone = await replay(laser.log, laser.memory_topic_name, namespace=acme.namespace)
    assert [r.error is not None for r in everyone].count(True) == 1
    assert {r.record.scope.tenant for r in everyone if r.record} == {"acme", "globex"}
    assert [e.body for e in item_history(everyone, mid.bytes, tenant="acme")] == [b"acme's fact"]
    assert [e.body for e in named_history(everyone, "profile", tenant="globex")] == [
        b'{"owner":"globex"}'
    ]


@pytest.mark.parametrize(
    ("argument", "error", "says"),
    [
        ({"principal": "alice"}, lm.ConfigError, "principal is a Principal, got str"),
        ({"principal": {"name": "p", "grants": ["kv:read:*"]}}, lm.ConfigError, "Principal"),
        ({"governor": 5}, lm.ConfigError, "a governor is a callable"),
        ({"embedder": "minilm"}, lm.InvalidInput, "an embedder has an embed_many"),
        ({"tenant": 5}, lm.ConfigError, "tenant must be a string"),
    ],
)
async def test_a_handle_refuses_arguments_of_the_wrong_kind_when_made(
    laser: lm.Laser, argument, error, says
):
    """As `connect` does: refused when the handle is made, not at its first call (and a
    principal's name given where the principal goes grants nothing)."""
    before = await _ends(laser)
    with pytest.raises(error, match=says):
        laser.memory("notes", **argument)
    assert await _ends(laser) == before


async def test_grants_are_checked_before_anything_is_read_or_written(laser: lm.Laser):
    writer = laser.memory("notes")
    mid = await writer.remember("acme's secret", tenant="acme", conversation="c1")
    namespace, topic = writer.namespace, writer.topic
    reader = laser.memory(
        "notes", principal=Principal("reader", tenant="acme", grants={f"kv:read:{namespace}"})
    )
    assert reader.tenant == "acme"
    assert [i.id for i in await reader.recall()] == [mid]
    assert [h.op for h in await reader.history(mid)] == ["remember"]
    before = await _ends(laser)
    for call in (
        reader.remember("x"),
        reader.remember_many(["x"]),
        reader.improve(mid, 1.0),
        reader.forget(mid),
        reader.set("k", "v"),
        reader.update("k", {"a": 1}),
        reader.remove("k"),
        reader.purge(0),
        reader.consolidate(0),
        reader.append(lm.MemoryId.new(), "x", kind="fact"),
        reader.forget_expired(),
        reader.reembed(lm.WordHashEmbedder()),
    ):
        with pytest.raises(lm.AccessDenied, match=f"publish:{topic}"):
            await call
    assert await _ends(laser) == before

    publisher = laser.memory(
        "notes", principal=Principal("agent", tenant="acme", grants={f"publish:{topic}"})
    )
    await publisher.remember("acme's second fact")
    await publisher.update("profile", {"tier": "gold"})  # its own check reads nothing back
    for call in (
        publisher.recall(),
        publisher.recall(conversation="c1"),  # a conversation narrows, never grants
        publisher.fetch("profile"),
        publisher.history(mid),
        publisher.as_of(mid),
        publisher.context("c1"),
        publisher.purge(0),
        publisher.forget_expired(),
        publisher.consolidate(0),
    ):
        with pytest.raises(lm.AccessDenied, match=f"kv:read:{namespace}"):
            await call

    everything = Principal("ops", tenant="acme", grants={"kv:read:stream:*", "publish:*"})
    ops = laser.memory("notes", principal=everything)
    assert {i.text for i in await ops.recall()} == {"acme's secret", "acme's second fact"}
    # Another namespace is outside a grant for one.
    elsewhere = laser.memory("other", principal=reader.principal)
    with pytest.raises(lm.AccessDenied):
        await elsewhere.recall()


async def test_a_write_without_the_publish_grant_is_refused_before_its_input_is_used(
    laser: lm.Laser,
):
    """The grant is the first thing a write checks: bad input is refused for the grant
    (the one thing to fix), and no body reaches the embedder, which may be paid by the
    call, for a write that could never land."""
    mid = await laser.memory("notes").remember("acme's fact", tenant="acme")
    embedded: list[str] = []

    class Counting(lm.WordHashEmbedder):
        def embed_many(self, texts):
            embedded.extend(texts)
            return super().embed_many(texts)

    reader = laser.memory(
        "notes",
        embedder=Counting(),
        principal=Principal("reader", tenant="acme", grants={"kv:read:*"}),
    )
    before = await _ends(laser)
    for call in (
        reader.remember_many(["fine", {"body": "also fine", "kind": "summary"}]),
        reader.remember_many("not a list"),
        reader.append(lm.MemoryId.new(), "fine", kind="fact"),
        reader.append("not an id", "fine", kind="fact"),
        reader.improve(mid, float("nan")),
        reader.forget("not an id"),
        reader.forget(mid),
        reader.set("bad\x00key", "v"),
        reader.update("bad\x00key", {"a": 1}),
        reader.update("profile", {"a": 1}),
        reader.remove("bad\x00key"),
        reader.remove("profile", if_version=0),
        reader.reembed("not an embedder"),
        reader.reembed(Counting(), batch_size=0),
    ):
        with pytest.raises(lm.AccessDenied, match=f"publish:{laser.memory_topic_name}"):
            await call
    # A re-embedding reads every item first: the read grant too, before anything else.
    publisher = laser.memory(
        "notes",
        principal=Principal("agent", tenant="acme", grants={"publish:*"}),
    )
    for call in (publisher.reembed("not an embedder"), publisher.reembed(Counting())):
        with pytest.raises(lm.AccessDenied, match="kv:read:"):
            await call
    assert embedded == []
    assert await _ends(laser) == before


async def test_a_principal_without_the_read_grant_reads_nothing_through_a_view(
    laser: lm.Laser, tmp_path: Path
):
    """Reads from the managed view check the grant as folded ones do: the view itself
    knows no principal."""
    writer = laser.memory("notes")
    mid = await writer.remember("acme's secret", tenant="acme", conversation="c1")
    receipt = await writer.set("profile", {"tier": "gold"}, tenant="acme")
    await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
        until_caught_up=True
    )
    async with lm.connect(laser.log.url, stream=laser.stream, view=tmp_path / "view") as viewed:
        allowed = viewed.memory("notes", tenant="acme")
        assert [i.id for i in await allowed.recall()] == [mid]
        assert (await allowed.fetch("profile")).json() == {"tier": "gold"}
        publisher = viewed.memory(
            "notes",
            principal=Principal("agent", tenant="acme", grants={f"publish:{writer.topic}"}),
        )
        for call in (
            publisher.recall(),
            publisher.recall(text="secret", strategy="keyword"),
            publisher.fetch("profile"),
            publisher.fetch("profile", version=1),
            publisher.fetch("profile", after=receipt),
            publisher.fetch_folded("profile"),
            publisher.named(),
            publisher.named(folded=True),
            publisher.history(mid),
            publisher.history("profile"),
            publisher.as_of(mid),
            publisher.context("c1"),
            publisher.prepare_search(),
        ):
            with pytest.raises(lm.AccessDenied, match=f"kv:read:{writer.namespace}"):
                await call
        viewed.managed_view().close()


async def test_a_principal_binds_its_tenant_and_the_connection_default(any_log_url, stream_name):
    bot = Principal("bot", tenant="acme", grants={"kv:read:*", "publish:*"})
    async with lm.connect(any_log_url, stream=stream_name, principal=bot) as laser:
        await laser.bootstrap()
        memory = laser.memory("notes")
        assert memory.principal == bot and memory.tenant == "acme"
        await memory.remember("acme fact")
        with pytest.raises(lm.AccessDenied, match=r"tenant .acme."):
            laser.memory("notes", tenant="globex")
        assert laser.memory("notes", tenant="acme").tenant == "acme"
        mine = laser.memory("notes", principal=Principal("none", tenant="acme"))
        with pytest.raises(lm.AccessDenied):
            await mine.recall()
        assert [i.text for i in await memory.recall()] == ["acme fact"]
        # The connection is bound to acme: no handle of it acts for another tenant.
        with pytest.raises(lm.AccessDenied):
            laser.memory("notes", principal=Principal("x", grants={"kv:read:*"}))


async def test_a_connection_bound_to_a_tenant_binds_every_handle(any_log_url, stream_name):
    async with lm.connect(any_log_url, stream=stream_name, tenant="acme") as laser:
        await laser.bootstrap()
        memory = laser.memory("notes")
        assert memory.tenant == laser.memory_on_topic(laser.memory_topic_name).tenant == "acme"
        await memory.remember("acme fact")
        with pytest.raises(lm.AccessDenied):
            laser.memory("notes", tenant="globex")
        with pytest.raises(lm.AccessDenied):
            await memory.recall(tenant="")
        assert [i.text for i in await laser.memory("notes", tenant="acme").recall()] == [
            "acme fact"
        ]
    with pytest.raises(lm.AccessDenied, match="acts for tenant 'acme'"):
        lm.connect(any_log_url, tenant="globex", principal=Principal("p", tenant="acme"))


async def test_the_record_writer_checks_the_publish_grant_itself(laser: lm.Laser):
    # Every handle checks the grant before it makes a record; the writer checks it again
    # as it sends, so a path through it that forgot the check would still write nothing.
    from laser_memory.records import Remember
    from laser_memory.writes import RecordWriter

    await laser.memory("notes").remember("baseline")
    before = await _ends(laser)
    record = Remember(ns="stream:x/notes", id=bytes(16), kind=1, body=b"not allowed")
    for principal in (
        Principal("reader", grants={"kv:read:*"}),
        Principal("elsewhere", grants={"publish:other.*"}),
    ):
        writer = RecordWriter(
            laser, namespace="notes", topic=laser.memory_topic_name, principal=principal,
            governor=None,
        )  # fmt: skip
        with pytest.raises(lm.AccessDenied, match="may not write to topic"):
            await writer.write([record])
    assert await _ends(laser) == before


def test_principals_and_grants_are_checked_when_made():
    with pytest.raises(lm.ConfigError, match="unknown grant 'kv:write:notes'"):
        Principal("p", grants={"kv:write:notes"})
    with pytest.raises(lm.ConfigError, match="only end a grant"):
        Principal("p", grants={"kv:read:a*b"})
    with pytest.raises(lm.ConfigError, match="name"):
        Principal("")
    with pytest.raises(lm.ConfigError, match="grants is a set"):
        Principal("p", grants="kv:read:*")  # a string is no set of grants
    with pytest.raises(lm.ConfigError, match="grants is a set"):
        Principal("p", grants=5)
    with pytest.raises(lm.ConfigError, match="name is a non-empty string"):
        Principal(5)
    for empty in ("kv:read:", "publish:"):  # a family with no name after it
        with pytest.raises(lm.ConfigError, match="unknown grant"):
            Principal("p", grants={empty})
    with pytest.raises(lm.ConfigError):
        Principal("p", tenant="a\x00b")
    with pytest.raises(lm.ConfigError, match="a grant is a string, got int"):
        Principal("p", grants=[5])  # was a raw AttributeError if this check went
    p = Principal("p", grants=["kv:read:team-*", "publish:t", "view:stats"])
    assert p.may_read("team-a") and not p.may_read("team") and not p.may_read("other")
    assert p.may_publish("t") and not p.may_publish("t2") and p.may_see_stats()
    # Checked once, when made: a principal cannot be given other grants or a tenant later.
    with pytest.raises(AttributeError):
        p.grants = frozenset({"kv:read:*"})  # type: ignore[misc]
    with pytest.raises(AttributeError):
        p.tenant = "globex"  # type: ignore[misc]


async def test_the_governor_sees_every_write_and_a_refusal_writes_nothing(laser: lm.Laser):
    seen: list[ProposedWrite] = []

    def policy(proposal: ProposedWrite) -> bool:
        seen.append(proposal)
        return b"password" not in (proposal.body or b"")

    memory = laser.memory("notes", tenant="acme", governor=policy)
    mid = await memory.remember("the runbook is on the wiki", conversation="c1")
    assert (seen[0].op, seen[0].body, seen[0].tenant) == (
        "remember",
        b"the runbook is on the wiki",
        "acme",
    )
    assert seen[0].namespace == memory.namespace and b"runbook" in seen[0].record
    await memory.improve(mid, 2.0)
    await memory.forget(mid)
    await memory.set("k", {"a": 1})
    assert [p.op for p in seen[1:]] == ["feedback", "forget", "named.set"]
    assert seen[2].body is None and seen[2].record  # a forget: the encoded record

    before = await _ends(laser)
    with pytest.raises(lm.PolicyDenied, match="entry 1: the governor refused a remember"):
        await memory.remember_many(["fine", "the password is hunter2", "also fine"])
    with pytest.raises(lm.PolicyDenied, match=r"^entry 1: the governor refused"):
        await memory.remember_many(["fine", "the password is hunter2"])
    with pytest.raises(lm.PolicyDenied):
        await memory.update("k", {"password": "x"})
    assert await _ends(laser) == before

    async def slow_no(proposal):
        await asyncio.sleep(0)
        return False

    def broken(proposal):
        raise RuntimeError("policy store down")

    def meddling(proposal):
        proposal.body = b"something else"  # a governor decides; it cannot rewrite
        return True

    # One record: its refusal names no entry (a batch's names the entry, above).
    for governor, match in (
        (slow_no, "^the governor refused a remember"),
        (broken, "^the governor failed deciding.*policy store down"),
        (lambda p: "yes", "^the governor answered 'yes'"),
        (meddling, "failed deciding on a remember record.*AttributeError"),
    ):
        with pytest.raises(lm.PolicyDenied, match=match):
            await laser.memory("notes", governor=governor).remember("x")
    assert await _ends(laser) == before
    with pytest.raises(lm.ConfigError):
        laser.memory("notes", governor="allow")


# -- over HTTP ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _served(laser: lm.Laser, view: Path, auth) -> AsyncIterator[ClientSession]:
    await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)
    with MemoryView.open(view, create=False) as opened:
        server = TestServer(make_app(opened, auth), host="127.0.0.1")
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                yield http
        finally:
            await server.close()


def _auth_file(tmp_path: Path, principals: dict[str, Principal]) -> Path:
    """An auth file as an operator writes it from `laser-memory token` output."""
    lines = []
    for token, p in principals.items():
        lines += [
            "[[principal]]",
            f"name = {json.dumps(p.name)}",
            f"tenant = {json.dumps(p.tenant)}",
            f"grants = {json.dumps(sorted(p.grants))}",
            f'token_sha256 = "{hash_token(token)}"',
        ]
    path = tmp_path / "auth.toml"
    path.write_text("\n".join(lines))
    return path


async def test_http_takes_the_tenant_and_grants_from_the_token_only(
    laser: lm.Laser, tmp_path: Path
):
    memory = laser.memory("notes")
    ns = memory.namespace
    mid = await memory.remember("acme's secret", tenant="acme")
    await memory.remember("globex's secret", tenant="globex")
    await memory.set("profile", {"tier": "gold"}, tenant="acme")
    acme, ops = "acme-token", "ops-token"
    auth = TokenAuth.from_file(
        _auth_file(
            tmp_path,
            {
                acme: Principal("acme-bot", tenant="acme", grants={f"kv:read:{ns}"}),
                ops: Principal("ops", tenant="", grants={"view:stats"}),
            },
        )
    )
    async with _served(laser, tmp_path / "view", auth) as http:
        bearer = {"Authorization": f"Bearer {acme}"}
        async with http.get("/v1/recall", params={"namespace": ns}, headers=bearer) as r:
            assert r.status == 200
            assert [i["body"] for i in await r.json()] == ["acme's secret"]
        for params in ({"namespace": ns}, {"namespace": ns, "tenant": "acme"}):
            # No token, a bad token, another scheme: 401, whatever the parameters say.
            for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": acme}):
                async with http.get("/v1/recall", params=params, headers=headers) as r:
                    assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
        for path, params in (
            ("/v1/recall", {"namespace": ns, "tenant": "globex"}),
            ("/v1/recall", {"namespace": ns, "tenant": ""}),
            ("/v1/fetch", {"namespace": ns, "key": "profile", "tenant": "globex"}),
            ("/v1/named", {"namespace": ns, "tenant": "globex"}),
            ("/v1/history", {"namespace": ns, "id": str(mid), "tenant": "globex"}),
            ("/v1/stats", {}),
        ):
            async with http.get(path, params=params, headers=bearer) as r:
                assert r.status == 403, (path, params)
        # Outside the grants, an existing and a missing namespace look the same.
        answers = []
        for namespace in ("stream:x/never-written", f"{ns}-2"):
            async with http.get(
                "/v1/fetch", params={"namespace": namespace, "key": "profile"}, headers=bearer
            ) as r:
                answers.append((r.status, (await r.json())["error"]))
        ops_bearer = {"Authorization": f"Bearer {ops}"}
        async with http.get(
            "/v1/fetch", params={"namespace": ns, "key": "profile"}, headers=ops_bearer
        ) as r:
            answers.append((r.status, (await r.json())["error"]))
        assert answers == [(403, "AccessDenied")] * 3
        async with http.get(
            "/v1/fetch", params={"namespace": ns, "key": "profile"}, headers=bearer
        ) as r:
            assert (await r.json())["version"] == 1
        # The listing is the token's tenant's only (globex has no named item to leak,
        # acme's profile is listed); another namespace is outside the grants.
        async with http.get("/v1/named", params={"namespace": ns}, headers=bearer) as r:
            assert [i["key"] for i in await r.json()] == ["profile"]
        async with http.get("/v1/named", params={"namespace": f"{ns}-2"}, headers=bearer) as r:
            assert r.status == 403
        async with http.get("/v1/stats", headers=ops_bearer) as r:
            assert r.status == 200 and (await r.json())["items"] == 2


async def test_the_context_route_is_the_handles_block_in_the_tokens_tenant(
    laser: lm.Laser, tmp_path: Path
):
    """A reader on another host builds its prompt from the view as `context()` does: the
    same block, for the token's tenant only, within its grants."""
    memory = laser.memory("notes")
    ns = memory.namespace
    for body in ("acme's first", "acme's second", "acme's third"):
        await memory.remember(body, tenant="acme", conversation="c1")
    await memory.remember("acme's other conversation", tenant="acme", conversation="c2")
    await memory.remember("globex's secret", tenant="globex", conversation="c1")
    acme, other = "acme-token", "other-token"
    auth = TokenAuth(
        {
            hash_token(acme): Principal("acme-bot", tenant="acme", grants={f"kv:read:{ns}"}),
            hash_token(other): Principal("x", tenant="acme", grants={"kv:read:stream:x/*"}),
        }
    )
    async with _served(laser, tmp_path / "view", auth) as http:
        bearer = {"Authorization": f"Bearer {acme}"}

        async def block(**params: str) -> str:
            async with http.get(
                "/v1/context", params={"namespace": ns, **params}, headers=bearer
            ) as r:
                assert r.status == 200, await r.text()
                return (await r.json())["block"]

        # The handle folds the log itself: the view's block is the one it makes.
        handle = laser.memory("notes", tenant="acme")
        for conversation, budget in (("c1", None), ("c1", 6), (None, None), ("c2", 0)):
            params = {} if conversation is None else {"conversation": conversation}
            if budget is not None:
                params["token_budget"] = str(budget)
            want = await handle.context(conversation, token_budget=budget)
            assert await block(**params) == want, params
        assert "globex" not in await block(conversation="c1")
        assert await block(conversation="c1", limit="0") == ""
        # By default 50 items, as context() takes.
        await memory.remember_many(
            [{"body": f"note {i}", "tenant": "acme", "conversation": "c3"} for i in range(60)]
        )
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
            until_caught_up=True
        )
        many = await block(conversation="c3")
        assert len(many.splitlines()) == 50 and many == await handle.context("c3")
        assert (await block(conversation="c1", limit="1")).splitlines() == ["- [fact] acme's third"]
        # With text, the block of what a recall by it gives, as recall(block=True) makes it.
        for query in ({"text": "acme's second"}, {"text": "first", "strategy": "keyword"}):
            want = await handle.recall(**query, block=True, token_budget=6)
            assert await block(**query, token_budget="6") == want, query
            assert want.startswith("- [fact] acme's"), want
        for params, status in (
            ({"tenant": "globex"}, 403),
            ({"token_budget": "-1"}, 400),
            ({"token_budget": "1e3"}, 400),
            ({"strategy": "graph"}, 400),
            ({"block": "true"}, 400),  # the route is the block: no such parameter
        ):
            async with http.get(
                "/v1/context", params={"namespace": ns, **params}, headers=bearer
            ) as r:
                assert r.status == status, (params, await r.text())
        async with http.get(
            "/v1/context", params={"namespace": ns, "tenant": "globex"}, headers=bearer
        ) as r:
            # Said as the client knows it: its token, not a handle it never made.
            assert (await r.json())["message"].startswith(
                "this token acts for tenant 'acme'; it cannot read tenant 'globex'"
            )
        async with http.get(
            "/v1/context", params={"namespace": ns}, headers={"Authorization": f"Bearer {other}"}
        ) as r:
            assert r.status == 403
        async with http.get("/v1/context", params={"namespace": ns}) as r:
            assert r.status == 401


async def test_the_health_route_needs_no_token_and_says_nothing_of_any_tenant(
    laser: lm.Laser, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """A load balancer's probe holds no token: with `--auth` every route was a 401 to it.
    The health route answers without one, and nothing in its answer comes from a tenant's
    data; a view that cannot be read is a 503 whose body does not name its path."""
    memory = laser.memory("notes")
    await memory.remember("acme's secret", tenant="acme")
    auth = TokenAuth({hash_token("ops"): Principal("ops", tenant="", grants={"view:stats"})})
    view = tmp_path / "view"
    await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)
    opened = MemoryView.open(view, create=False)
    # Every probe reads the view (by default an answer stands a second).
    config = ServerConfig(health_check_every_s=0)
    server = TestServer(make_app(opened, auth, config), host="127.0.0.1")
    await server.start_server()
    try:
        async with ClientSession(base_url=str(server.make_url(""))) as http:
            for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Bearer ops"}):
                async with http.get("/v1/health", headers=headers) as r:
                    assert r.status == 200 and await r.json() == {"status": "ok"}
            async with http.head("/v1/health") as r:
                assert r.status == 200
            # Every other route still asks for the token.
            async with http.get("/v1/stats") as r:
                assert r.status == 401
            async with http.get("/v1/health", params={"tenant": "acme"}) as r:
                assert r.status == 400 and (await r.json())["error"] == "InvalidInput"
            opened.close()
            with caplog.at_level("ERROR", logger="aiohttp.server"):
                async with http.get("/v1/health") as r:
                    assert r.status == 503
                    answer = await r.json()
        assert answer["error"] == "LogClosed" and str(view) not in answer["message"]
        assert any(str(view) in record.getMessage() for record in caplog.records)
    finally:
        await server.close()
        opened.close()


async def test_a_flood_of_health_probes_reads_the_view_once(
    laser: lm.Laser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Anyone may ask the health route: each probe took a worker thread for its read of
    the view, so a flood of them (no token needed) took the threads the recalls read on.
    Probes now share one read while its answer stands."""
    await laser.memory("notes").remember("a fact")
    view = tmp_path / "view"
    await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)
    reads = []
    with MemoryView.open(view, create=False) as opened:
        watermark = opened.watermark

        def counted() -> dict[int, int]:
            reads.append(1)
            time.sleep(0.05)  # a read that takes a while: the probes meet it under way
            return watermark()

        monkeypatch.setattr(opened, "watermark", counted)
        # An answer that stands a minute: the probes all come within it, however slow
        # the machine (by default a second).
        config = ServerConfig(health_check_every_s=60)
        server = TestServer(make_app(opened, anonymous, config), host="127.0.0.1")
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:

                async def probe() -> int:
                    async with http.get("/v1/health") as r:
                        return r.status

                assert await asyncio.gather(*(probe() for _ in range(200))) == [200] * 200
        finally:
            await server.close()
    assert len(reads) == 1


async def test_a_bearer_token_that_is_no_utf8_is_a_401(laser: lm.Laser, tmp_path: Path):
    """Sent as raw bytes on the wire (no client library sends them): a 500 before."""
    ops = Principal("ops", tenant="", grants={"view:stats"})
    await laser.memory("notes").remember("a fact")
    await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
        until_caught_up=True
    )
    with MemoryView.open(tmp_path / "view", create=False) as view:
        server = TestServer(make_app(view, TokenAuth({hash_token("ops"): ops})), host="127.0.0.1")
        await server.start_server()
        try:
            for token, status in ((b"\xff\xfe", b"401"), (b"op\xc3\xa9", b"401"), (b"ops", b"200")):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(
                    b"GET /v1/stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    b"Authorization: Bearer " + token + b"\r\n\r\n"
                )
                assert (await reader.readline()).split()[1] == status, token
                writer.close()
        finally:
            await server.close()


async def test_an_authenticator_of_ones_own_may_be_sync_and_must_give_a_principal(
    laser: lm.Laser, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """`make_app` takes any callable: a sync one failed every request (a 500 from "can't
    be used in 'await' expression"), and one giving no Principal failed deep in a route."""
    ops = Principal("ops", tenant="", grants={"view:stats"})

    def by_header(request):  # sync, as a user's lookup often is
        if request.headers.get("X-Who") != "ops":
            raise Unauthorized("who are you?")
        return ops

    await laser.memory("notes").remember("a fact")
    async with _served(laser, tmp_path / "view", by_header) as http:
        async with http.get("/v1/stats", headers={"X-Who": "ops"}) as response:
            assert response.status == 200 and (await response.json())["items"] == 1
        async with http.get("/v1/stats") as response:
            assert response.status == 401
    async with _served(laser, tmp_path / "view", lambda request: "ops") as http:
        async with http.get("/v1/stats") as response:
            assert response.status == 500
            # JSON, as every error of the server, saying no more than that it failed.
            assert await response.json() == {
                "error": "InternalError",
                "message": "the server failed this request; its log says why",
            }
    assert "returned 'ops'; it returns a Principal" in caplog.text


async def test_a_token_counts_only_as_a_bearer_token_with_its_whole_digest():
    token = "acme-token"
    digest = hash_token(token)
    acme = Principal("acme-bot", tenant="acme", grants={"kv:read:*"})

    def asking(header: str):
        return make_mocked_request("GET", "/v1/recall", headers={"Authorization": header})

    assert await TokenAuth({digest: acme})(asking(f"Bearer {token}")) == acme
    assert await TokenAuth({digest: acme})(asking(f"bearer  {token} ")) == acme
    # Header bytes that are no UTF-8 reach the server as lone surrogates: hashed as the
    # bytes they were (hashing them raised UnicodeEncodeError: the server answered 500).
    assert hash_token("\udcff\udcfe") == hashlib.sha256(b"\xff\xfe").hexdigest()
    # A digest that differs in its first or its last character is another token's.
    flip = {"0": "1"}
    for near in (
        flip.get(digest[0], "0") + digest[1:],
        digest[:-1] + flip.get(digest[-1], "0"),
    ):
        with pytest.raises(Unauthorized):
            await TokenAuth({near: acme})(asking(f"Bearer {token}"))
    # The right token under another scheme, or no token at all, is no bearer token.
    for header in (f"Basic {token}", f"Token {token}", token, "Bearer", "Bearer   "):
        with pytest.raises(Unauthorized):
            await TokenAuth({digest: acme})(asking(header))
    # No token is none, even where a hand-written file holds the digest of no text.
    for header in ("Bearer", "Bearer   "):
        with pytest.raises(Unauthorized, match="send 'Authorization: Bearer <token>'"):
            await TokenAuth({hash_token(""): acme})(asking(header))


@pytest.mark.parametrize(
    ("principals", "says"),
    [
        (5, "TokenAuth takes a dict"),
        ({"acme-token": None}, "64 lower-case hex digits"),  # a token, not its digest
        ({hash_token("t").upper(): None}, "64 lower-case hex digits"),
        ({hash_token("t").encode(): None}, "64 lower-case hex digits"),
        ({hash_token("t")[:63]: None}, "64 lower-case hex digits"),  # no hash is as short
        ({5: None}, "64 lower-case hex digits"),
        ({hash_token("t"): "acme-bot"}, "a token's principal is a Principal"),
    ],
)
def test_token_auth_is_checked_when_made(principals, says):
    # Each was taken: a token given for its digest matched no request (every one a 401
    # with nothing said why); a principal of another kind, or a digest that was bytes,
    # failed every request it reached as the server's fault (a 500).
    with pytest.raises(lm.ConfigError, match=says):
        TokenAuth(principals)
    with pytest.raises(lm.ConfigError, match="a token is a str"):
        hash_token(b"acme-token")


def test_auth_files_are_checked_whole_and_tokens_made_by_the_cli(tmp_path: Path):
    result = CliRunner().invoke(
        main, ["token", "bot", "--tenant", "acme", "--grant", "kv:read:stream:s/*"]
    )
    assert result.exit_code == 0, result.output
    token = result.stderr.split("token (shown once): ")[1].split()[0]
    path = tmp_path / "auth.toml"
    path.write_text(result.stdout)
    [(digest, principal)] = load_principals(path).items()
    assert digest == hash_token(token) and token not in path.read_text()
    assert principal == Principal("bot", tenant="acme", grants={"kv:read:stream:s/*"})
    for text, match in (
        ("", "holds \\[\\[principal\\]\\]"),
        (result.stdout.replace("kv:read", "kv:write"), "principal 1: unknown grant"),
        (result.stdout.replace('tenant = "acme"\n', ""), "missing \\['tenant'\\]"),
        (result.stdout + "\n" + result.stdout.replace('"bot"', '"bot2"'), "same token"),
        (result.stdout.replace(hash_token(token), "abc"), "64 lower-case hex"),
        # Upper case hex no token's hash is: its principal could never sign in.
        (result.stdout.replace(hash_token(token), hash_token(token).upper()), "lower-case hex"),
        (result.stdout.replace(f'"{hash_token(token)}"', "5"), "64 lower-case hex"),
        ("[[principal]\n", "not TOML"),
        # Keys beside the tables, no tables, an empty list, a table that is no table.
        ("verbose = true\n" + result.stdout, "and nothing else"),
        ('principal = "bot"\n', "and nothing else"),
        ("principal = []\n", "and nothing else"),
        ('principal = ["bot"]\n', "principal 1: a \\[\\[principal\\]\\] table, got 'bot'"),
        (result.stdout + 'role = "admin"\n', "principal 1: .*unknown \\['role'\\]"),
        (result.stdout.replace('tenant = "acme"', "tenant = 5"), "tenant is a string"),
        (
            result.stdout.replace('["kv:read:stream:s/*"]', '"kv:read:stream:s/*"'),
            "grants is a list",
        ),
    ):
        path.write_text(text)
        with pytest.raises(lm.ConfigError, match=match):
            load_principals(path)
    # A raw ValueError and TypeError before.
    with pytest.raises(lm.ConfigError, match="cannot read the auth file"):
        load_principals(f"{path}\x00")
    with pytest.raises(lm.ConfigError, match="path is a str or os"):
        load_principals(None)
    # A pipe waited for a writer at start; a device was read until memory ran out.
    pipe = tmp_path / "auth.pipe"
    os.mkfifo(pipe)
    for odd in (pipe, "/dev/zero", tmp_path):
        with pytest.raises(lm.ConfigError, match="not a regular file"):
            load_principals(odd)
    path.write_text(result.stdout)
    os.truncate(path, (16 << 20) + 1)
    with pytest.raises(lm.ConfigError, match="more than an auth file's"):
        load_principals(path)
    # Exactly at the bound is read (a comment pads it), and reading leaves no file open.
    path.write_text(result.stdout + "#" + " " * ((16 << 20) - len(result.stdout) - 1))
    assert path.stat().st_size == 16 << 20
    opened = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        assert list(load_principals(path).values()) == [principal]
    assert len(os.listdir("/proc/self/fd")) == opened
    # Two principals of one name are refused, whatever their tokens.
    other = result.stdout.replace(hash_token(token), hash_token("another token"))
    path.write_text(result.stdout + "\n" + other)
    with pytest.raises(lm.ConfigError, match="principal 2: a second principal named 'bot'"):
        load_principals(path)
    made = {new_token() for _ in range(50)}
    assert len(made) == 50 and all(len(t) == 43 and t.isascii() for t in made)  # 256 bits
    # A link to a good file is followed (mounted secrets are links).
    good, link = tmp_path / "good.toml", tmp_path / "link.toml"
    good.write_text(result.stdout)
    link.symlink_to(good)
    assert list(load_principals(link).values()) == [principal]
    bad = CliRunner().invoke(main, ["token", "bot", "--grant", "everything"])
    assert bad.exit_code != 0 and "unknown grant" in bad.output


def test_serving_beyond_loopback_needs_auth(tmp_path: Path):
    result = CliRunner().invoke(main, ["serve", "--view", str(tmp_path / "v"), "--host", "0.0.0.0"])
    assert result.exit_code != 0 and "without --auth" in result.output
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1")
    assert is_loopback("127.0.0.2")
    # A host name other than localhost may resolve to any address: not loopback.
    for name in ("example.com", "localhost.example.com", "my-host", ""):
        assert not is_loopback(name), name
    result = CliRunner().invoke(main, ["serve", "--view", str(tmp_path / "v"), "--host", "my-host"])
    assert result.exit_code != 0 and "without --auth" in result.output


# -- no read crosses a tenant or a grant, whatever the history ------------------------

TENANTS = ("", "acme", "globex")
WORDS = ("alpha", "beta", "gamma")

histories = st.lists(
    st.tuples(
        st.sampled_from(range(len(TENANTS))),
        st.sampled_from((0, 1)),  # namespace
        st.sampled_from((None, "c1", "c2")),  # conversation
        st.sampled_from(WORDS),
        st.booleans(),  # forgotten later
    ),
    min_size=1,
    max_size=14,
)
principals = st.lists(
    st.tuples(
        st.sampled_from(range(len(TENANTS))),
        st.sets(st.sampled_from(("kv:read:NS0", "kv:read:NS1", "kv:read:stream:*"))),
    ),
    min_size=1,
    max_size=3,
)
reads = st.lists(
    st.tuples(
        st.sampled_from((0, 1)),  # namespace
        st.sampled_from((None, "c1")),  # conversation
        st.sampled_from((None, *WORDS)),  # text
        st.sampled_from((None, *range(len(TENANTS)))),  # tenant the caller names
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories, who=principals, asked=reads)
async def test_no_read_crosses_a_tenant_or_a_grant(laser, history, who, asked):
    run = uuid.uuid4().hex[:8]
    names = (f"p{run}-0", f"p{run}-1")
    handles = [laser.memory(name) for name in names]
    owner: dict[lm.MemoryId, tuple[str, int]] = {}
    for number, (tenant, ns, conversation, word, forgotten) in enumerate(history):
        memory = handles[ns]
        mid = await memory.remember(
            f"{word} fact {number}", tenant=TENANTS[tenant], conversation=conversation
        )
        owner[mid] = (TENANTS[tenant], ns)
        if forgotten:
            await memory.forget(mid, tenant=TENANTS[tenant])
    made = {
        f"token-{n}": Principal(
            f"p{n}",
            tenant=TENANTS[tenant],
            grants={
                g.replace("NS0", handles[0].namespace).replace("NS1", handles[1].namespace)
                for g in grants
            },
        )
        for n, (tenant, grants) in enumerate(who)
    }
    view = Path(tempfile.mkdtemp())
    reader = lm.Laser(laser.log, stream=laser.stream, view=view)
    try:
        async with _served(
            laser, view, TokenAuth({hash_token(t): p for t, p in made.items()})
        ) as http:
            for token, principal in made.items():
                for ns, conversation, text, named in asked:
                    namespace = handles[ns].namespace
                    query = {"conversation": conversation, "text": text, "limit": 1000}
                    if named is not None:
                        query["tenant"] = TENANTS[named]
                    allowed = principal.may_read(namespace) and (
                        named is None or TENANTS[named] == principal.tenant
                    )
                    truth = [
                        i.id
                        for i in await handles[ns].recall(
                            **{**query, "tenant": principal.tenant}, folded=True
                        )
                    ]
                    assert all(owner[i] == (principal.tenant, ns) for i in truth)
                    for source in (laser, reader):
                        bound = source.memory(names[ns], principal=principal)
                        if not allowed:
                            with pytest.raises(lm.AccessDenied):
                                await bound.recall(**query)
                            continue
                        got = [i.id for i in await bound.recall(**query)]
                        assert got == truth, (source, query)
                    params = {"namespace": namespace, "limit": "1000"}
                    params.update(
                        {k: v for k, v in query.items() if k != "limit" and v is not None}
                    )
                    async with http.get(
                        "/v1/recall", params=params, headers={"Authorization": f"Bearer {token}"}
                    ) as r:
                        if not allowed:
                            assert r.status == 403
                            continue
                        assert r.status == 200
                        got = [lm.MemoryId.parse(i["id"]) for i in await r.json()]
                        assert got == truth, params
                    # The context block: the token's tenant's items only, as a folded
                    # handle of that tenant makes it.
                    params = {"namespace": namespace, "limit": "1000"}
                    if conversation is not None:
                        params["conversation"] = conversation
                    if named is not None:
                        params["tenant"] = TENANTS[named]
                    async with http.get(
                        "/v1/context", params=params, headers={"Authorization": f"Bearer {token}"}
                    ) as r:
                        assert r.status == (200 if allowed else 403), params
                        if allowed:
                            want = await handles[ns].context(
                                conversation, tenant=principal.tenant, limit=1000
                            )
                            assert (await r.json())["block"] == want, params
    finally:
        if reader._view is not None:
            reader.managed_view().close()
        shutil.rmtree(view, ignore_errors=True)
