"""Property test: folded recall agrees with the plain reference model on random
operation sequences, over both logs.

Each example writes a random sequence of remember (with and without dedup),
improve and forget (scoped to conversations or not, across two tenants) and
named-item set / merge-patch / remove from two writers on two connections. A
handle that recalls along the way (incremental fold) and a fresh handle at the
end (whole fold) must both match the model for every query shape.
"""

from __future__ import annotations

import contextlib
import tempfile
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import laser_memory as lm
from folders.service import ViewFolder
from laser_memory.records import decode_record, header_value
from log_conformance import read_all
from reference_model import Write, fetch, recall

WORDS = ["alpha", "beta", "gamma", "delta"]
CONVERSATIONS = [None, "c1", "c2"]
TENANTS = ["", "t1"]
WEIGHTS = [-2.0, -0.5, 0.5, 1.0, 3.0]  # exact in binary, so sums do not depend on order
KEYS = ["k1", "k2"]

remember_op = st.tuples(
    st.just("remember"),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=2).map(" ".join),
    st.sampled_from(CONVERSATIONS),
    st.sampled_from(TENANTS),
    st.sampled_from([None, "u1"]),
    st.sampled_from(["fact", "message"]),
    st.booleans(),
)
# "same" targets the conversation or tenant the item was remembered with, so scoped
# forgets and feedback hit their item often enough to matter.
target_conversation = st.sampled_from([None, None, "c1", "c2", "same", "same"])
target_tenant = st.sampled_from(["", "t1", "same", "same", "same", "same"])
forget_op = st.tuples(st.just("forget"), st.integers(0, 30), target_conversation, target_tenant)
improve_op = st.tuples(
    st.just("improve"),
    st.integers(0, 30),
    st.sampled_from(WEIGHTS),
    target_conversation,
    target_tenant,
)
json_value = st.one_of(st.integers(0, 3), st.sampled_from(["x", "y"]), st.none())
named_op = st.tuples(
    st.sampled_from(["set", "update", "remove"]),
    st.sampled_from(KEYS),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), json_value, max_size=3),
    st.sampled_from(TENANTS),
    st.integers(0, 1),
)
again_op = st.tuples(st.just("again"), st.integers(0, 30))
recall_op = st.tuples(st.just("recall"))
operations = st.lists(
    st.one_of(
        remember_op, remember_op, forget_op, forget_op, improve_op, named_op, again_op, recall_op
    ),
    min_size=2,
    max_size=30,
)

QUERIES = [
    {"tenant": tenant, "conversation": conversation, "strategy": strategy}
    for tenant in TENANTS
    for conversation in CONVERSATIONS
    for strategy in ("auto", "recent")
] + [
    {"tenant": "", "user": "u1", "strategy": "auto"},
    {"tenant": "t1", "kind": "message", "strategy": "recent"},
    {"tenant": "", "conversation": "c1", "user": "u1", "strategy": "recent"},
    {"tenant": "", "user": "u1", "kind": "fact", "strategy": "auto"},
]


def _check(items: list[lm.MemoryItem], expected, query) -> None:
    got = [(i.id.bytes, i.body, i.conversation, i.weight) for i in items]
    want = [(m.id, m.body, m.conversation, m.weight) for m in expected]
    assert got == want, query


async def _model_writes(laser: lm.Laser, namespace: str) -> list[Write]:
    writes = []
    topic = laser.memory_topic_name
    for record in await read_all(laser.log, topic):
        if header_value(record.headers, "lm-ns") == namespace.encode():
            writes.append(
                Write(
                    decode_record(record.value, record.headers),
                    record.append_time_ms,
                    record.partition,
                    record.offset,
                )
            )
    return writes


async def _compare(laser: lm.Laser, memory: lm.MemoryHandle) -> None:
    writes = await _model_writes(laser, memory.namespace)
    for query in QUERIES:
        kind = query.get("kind")
        expected = recall(
            writes,
            tenant=query["tenant"],
            conversation=query.get("conversation"),
            user=query.get("user"),
            kind=lm.memory_kind_code(kind) if kind else None,
            strategy=query["strategy"],
        )
        items = await memory.recall(limit=1000, **query)
        _check(items, expected, query)
    for tenant in TENANTS:
        for key in KEYS:
            want = fetch(writes, key, tenant=tenant)
            got = await memory.fetch_folded(key, tenant=tenant)
            assert (None if got is None else (got.json(), got.version)) == want, (key, tenant)


async def _compare_managed(laser: lm.Laser, namespace: str, view_path: str, ids) -> None:
    """The managed view, caught up, must answer exactly as a whole fold does."""
    await ViewFolder(laser.log, laser.memory_topic_name, view_path).run(until_caught_up=True)
    # The same log connection, reading the view too (a new connection costs more than
    # an example on Kafka).
    reader = lm.Laser(laser.log, stream=laser.stream, view=view_path)
    try:
        folded = reader.memory(namespace)
        for query in QUERIES:
            for text in (None, "alpha gamma"):
                managed = await folded.recall(limit=1000, text=text, folded=False, **query)
                assert managed == await folded.recall(limit=1000, text=text, folded=True, **query)
            small = await folded.recall(limit=2, folded=False, **query)
            assert small == await folded.recall(limit=2, folded=True, **query), query
        for tenant in TENANTS:
            for key in KEYS:
                assert await folded.fetch(key, tenant=tenant) == await folded.fetch(
                    key, tenant=tenant, folded=True
                )
                history = await folded.history(key, tenant=tenant)
                assert history == await folded.history(key, tenant=tenant, folded=True)
                for entry in history:
                    versioned = await folded.fetch(key, tenant=tenant, version=entry.version)
                    snapshot = await folded.as_of({entry.partition: entry.offset + 1})
                    assert versioned == snapshot.fetch(key, tenant=tenant)
        for mid, _, tenant in ids:
            assert await folded.history(mid, tenant=tenant) == await folded.history(
                mid, tenant=tenant, folded=True
            )
    finally:
        reader.managed_view().close()


async def _run(laser: lm.Laser, second: lm.Laser, ops, view_path: str) -> None:
    namespace = f"prop-{uuid.uuid4().hex[:8]}"
    memory = laser.memory(namespace)
    other_writer = second.memory(namespace)
    remembered: list[tuple[lm.MemoryId, str | None, str]] = []
    arguments: list[dict] = []

    def target(index: int, conversation, tenant):
        if not remembered:
            return lm.MemoryId.new(), None if conversation == "same" else conversation, ""
        mid, its_conversation, its_tenant = remembered[index % len(remembered)]
        return (
            mid,
            its_conversation if conversation == "same" else conversation,
            its_tenant if tenant == "same" else tenant,
        )

    for op in ops:
        match op:
            case ("remember", body, conversation, tenant, user, kind, dedup):
                args = {"conversation": conversation, "tenant": tenant, "user": user, "kind": kind}
                mid = await memory.remember(body, dedup=dedup, **args)
                remembered.append((mid, conversation, tenant))
                arguments.append({"body": body, **args})
            case ("again", index) if remembered:
                # The same item once more (typed append with its id): it comes back if
                # it was forgotten, and the latest remember is the one recall shows.
                mid = remembered[index % len(remembered)][0]
                args = dict(arguments[index % len(arguments)])
                await memory.append(mid, args.pop("body"), **args)
            case ("forget", index, conversation, tenant):
                mid, conversation, tenant = target(index, conversation, tenant)
                await memory.forget(mid, conversation=conversation, tenant=tenant)
            case ("improve", index, weight, conversation, tenant):
                mid, conversation, tenant = target(index, conversation, tenant)
                await memory.improve(mid, weight, conversation=conversation, tenant=tenant)
            case ("set", key, body, tenant, writer):
                await (memory, other_writer)[writer].set(key, body, tenant=tenant)
            case ("update", key, patch, tenant, writer):
                await (memory, other_writer)[writer].update(key, patch, tenant=tenant)
            case ("remove", key, _, tenant, writer):
                await (memory, other_writer)[writer].remove(key, tenant=tenant)
            case ("recall",):
                await memory.recall(conversation="c1")
                await memory.recall()
                # The view folds incrementally too: catch it up part way.
                await ViewFolder(laser.log, laser.memory_topic_name, view_path).run(
                    until_caught_up=True
                )
    await _compare(laser, memory)
    await _compare(laser, laser.memory(namespace))
    await _compare_managed(laser, namespace, view_path, remembered)


# Examples cost a few milliseconds on the embedded log and far more on Kafka, where each
# write is a broker round trip; the Kafka run takes fewer of them.
_SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}


@pytest.fixture
async def local_pair(tmp_path, stream_name):
    async with open_pair(f"local://{tmp_path / 'log'}", stream_name) as pair:
        yield pair


@pytest.fixture
async def kafka_pair(kafka_bootstrap, stream_name):
    async with open_pair(f"kafka://{kafka_bootstrap}", stream_name) as pair:
        yield pair


@contextlib.asynccontextmanager
async def open_pair(url: str, stream: str):
    """Two connections to one log: two writers."""
    async with lm.connect(url, stream=stream) as first, lm.connect(url, stream=stream) as second:
        await first.bootstrap(partitions=4)
        yield first, second


@settings(max_examples=100, **_SETTINGS)
@given(ops=operations)
async def test_folded_and_managed_recall_match_reference_model_local(local_pair, ops):
    with tempfile.TemporaryDirectory() as view_path:
        await _run(*local_pair, ops, view_path)


@pytest.mark.kafka
@settings(max_examples=25, **_SETTINGS)
@given(ops=operations)
async def test_folded_and_managed_recall_match_reference_model_kafka(kafka_pair, ops):
    with tempfile.TemporaryDirectory() as view_path:
        await _run(*kafka_pair, ops, view_path)
