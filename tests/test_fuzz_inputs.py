"""Fuzz: random hostile inputs through the handle, the CLI and HTTP.

Every call either succeeds or raises a `LaserError` (HTTP: a 4xx) having written
nothing, and every record the API accepted folds, in process and into a view, without
being set aside."""

from __future__ import annotations

import asyncio
import itertools
import json
import tempfile
import uuid
from pathlib import Path

import msgspec
import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import laser_memory as lm
from folders.http import make_app
from folders.service import ViewFolder
from folders.view import MemoryView
from hostile_text import LyingText
from laser_memory.cli import main

# Text as hostile callers send it: lone surrogates, controls, NULs, very long runs.
text = st.one_of(
    st.text(st.characters(codec=None, exclude_categories=()), max_size=40),
    st.sampled_from(["", "\x00", "\ud800", "a\nb", "x" * 300, "{" * 200, "[" * 150 + "]" * 150]),
)
number = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.just(True),
    # Where encodings end: int64 and uint64 (a value the encoder takes and the fold
    # refuses is the bug to find).
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1]),
)
json_like = st.recursive(
    st.one_of(st.none(), st.booleans(), number, text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=12,
)
anything = st.one_of(text, number, json_like, st.binary(max_size=40), st.none())
maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731

remember = st.fixed_dictionaries(
    {"body": st.one_of(text, st.binary(max_size=40), number)},
    optional={
        "kind": st.one_of(text, st.sampled_from(["fact", "message", "summary"])),
        "conversation": maybe(text),
        "agent": maybe(text),
        "tenant": st.one_of(text, st.just("")),
        "origin": maybe(
            st.one_of(
                anything,
                st.fixed_dictionaries({"topic": text, "partition": number, "offset": number}),
            )
        ),
        "producer": maybe(
            st.one_of(
                text,
                st.tuples(text, anything),
                st.fixed_dictionaries({"name": text, "version": anything}),
            )
        ),
        "embedding": maybe(
            st.one_of(
                st.lists(number, max_size=4),
                # The most numbers the fold takes, and one more.
                st.sampled_from([[0.5] * 65536, [0.5] * 65537]),
            )
        ),
        "dedup": st.one_of(st.booleans(), anything),
        "durable": st.one_of(st.booleans(), anything),
    },
)
call = st.one_of(
    st.tuples(st.just("remember"), remember),
    st.tuples(
        st.just("improve"),
        st.fixed_dictionaries({"weight": number, "tenant": st.one_of(text, st.just(""))}),
    ),
    st.tuples(st.just("forget"), st.fixed_dictionaries({"conversation": maybe(text)})),
    st.tuples(st.just("set"), st.fixed_dictionaries({"key": text, "body": json_like})),
    st.tuples(
        st.just("update"), st.fixed_dictionaries({"key": text, "patch": st.one_of(json_like, text)})
    ),
    st.tuples(
        st.just("remove"), st.fixed_dictionaries({"key": text}, optional={"if_version": number})
    ),
    st.tuples(
        st.just("recall"),
        st.fixed_dictionaries(
            {},
            optional={
                "text": maybe(anything),
                "limit": number,
                "strategy": text,
                "kind": maybe(text),
                "tenant": text,
                "exact": anything,
                "exclude": st.one_of(anything, st.lists(text, max_size=2)),
                "block": st.one_of(st.booleans(), anything),
                "token_budget": maybe(st.one_of(number, st.just(5))),
                "min_similarity": maybe(st.one_of(number, st.just(0.5))),
            },
        ),
    ),
    st.tuples(st.just("as_of"), st.fixed_dictionaries({"at": anything})),
    st.tuples(
        st.just("purge"),
        st.fixed_dictionaries(
            {"older_than": st.one_of(anything, st.just(0.0))},
            optional={"limit": st.one_of(number, st.just(1)), "tenant": text},
        ),
    ),
    st.tuples(
        st.just("consolidate"),
        st.fixed_dictionaries(
            {"max_items": st.one_of(number, st.just(1))},
            optional={
                "conversation": maybe(text),
                "tenant": text,
                "prune_summarized": anything,
                "summarizer": st.sampled_from([None, "x", lambda bodies: b"digest"]),
            },
        ),
    ),
    st.tuples(st.just("fetch"), st.fixed_dictionaries({"key": text}, optional={"version": number})),
    st.tuples(
        st.just("prepare_search"),
        st.fixed_dictionaries(
            {},
            optional={
                "conversation": maybe(text),
                "tenant": st.one_of(text, anything),
                "include_superseded": anything,
            },
        ),
    ),
)


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


async def _apply(memory: lm.MemoryHandle, known: list[lm.MemoryId], name: str, args: dict):
    target = known[-1] if known else lm.MemoryId.new()
    if name == "remember":
        entry = dict(args)
        known.append(await memory.remember(entry.pop("body"), **entry))
    elif name == "improve":
        await memory.improve(target, args["weight"], tenant=args["tenant"])
    elif name == "forget":
        await memory.forget(target, conversation=args["conversation"])
    elif name == "set":
        await memory.set(args["key"], args["body"])
    elif name == "update":
        await memory.update(args["key"], args["patch"])
    elif name == "remove":
        await memory.remove(args["key"], if_version=args.get("if_version"))
    elif name == "recall":
        await memory.recall(**args)
    elif name == "as_of":
        await memory.as_of(args["at"])
    elif name == "purge":
        rest = dict(args)
        await memory.purge(rest.pop("older_than"), **rest)
    elif name == "consolidate":
        rest = dict(args)
        await memory.consolidate(rest.pop("max_items"), **rest)
    elif name == "prepare_search":
        await memory.prepare_search(**args)  # no view here: NoView, once the input passes
    else:
        await memory.fetch(args["key"], version=args.get("version"), folded=True)


async def _fuzz_handle(url: str, calls: list) -> None:
    stream = f"s{uuid.uuid4().hex[:10]}"
    async with lm.connect(url, stream=stream) as laser:
        await laser.bootstrap(partitions=3)
        memory = laser.memory("notes")
        topic = memory.topic
        known: list[lm.MemoryId] = []
        for name, args in calls:
            before = await laser.log.end_offsets(topic)
            try:
                await _apply(memory, known, name, args)
            except lm.LaserError:
                assert await laser.log.end_offsets(topic) == before, (name, args)
        # Every accepted record folds: in a fresh process-local fold and into a view.
        fresh = laser.memory("notes")
        await fresh.recall(limit=1000, folded=True)
        assert fresh.set_aside == []
        with tempfile.TemporaryDirectory() as view:
            await ViewFolder(laser.log, topic, view).run(until_caught_up=True)
            with MemoryView.open(view) as opened:
                assert opened.stats().set_aside == 0


@_settings(120)
@given(calls=st.lists(call, min_size=1, max_size=8))
def test_hostile_calls_through_the_handle_local(calls, tmp_path_factory):
    url = f"local://{tmp_path_factory.mktemp('fuzz')}"
    asyncio.run(_fuzz_handle(url, calls))


@pytest.mark.kafka
@_settings(15)
@given(calls=st.lists(call, min_size=1, max_size=6))
def test_hostile_calls_through_the_handle_kafka(calls, kafka_bootstrap):
    asyncio.run(_fuzz_handle(f"kafka://{kafka_bootstrap}", calls))


cli_word = st.one_of(
    text.filter(lambda s: "\x00" not in s),
    st.sampled_from(
        [
            *("--limit", "-1", "--tenant", "--kind", "--version", "0", "1e400", "NaN", "--json"),
            *("--block", "--token-budget", "--as-of", "--view", "-", "--expired", "--older-than"),
            *("--conversation", "--text", "--strategy", "--if-version", "--partitions"),
            # On a fresh log there is no topic: a replay --follow ends with that, at once.
            *("--follow", "--since", "--until", "--all-tenants", "--all-namespaces"),
        ]
    ),
)


@_settings(60)
@given(
    command=st.sampled_from(
        [
            "remember",
            "recall",
            "improve",
            "forget",
            "set",
            "update",
            "remove",
            "fetch",
            "audit",
            "replay",
            "index",
            "stats",
            "named",
            "purge",
            "bootstrap",
        ]
    ),
    words=st.lists(cli_word, max_size=4),
)
def test_hostile_command_lines_end_in_a_message(command, words, tmp_path_factory):
    url = f"local://{tmp_path_factory.mktemp('cli')}"
    result = CliRunner().invoke(main, [command, *words, "--url", url])
    assert result.exit_code in (0, 1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        command,
        words,
        repr(result.exception),
    )


@pytest.fixture(scope="module")
def served_view(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("served")

    async def build() -> None:
        async with lm.connect(f"local://{root / 'log'}", stream="s") as laser:
            memory = laser.memory("notes")
            await memory.remember_many(["alpha fact", "beta fact"])
            await memory.set("k", {"a": 1})
            await ViewFolder(laser.log, laser.memory_topic_name, root / "view").run(
                until_caught_up=True
            )

    asyncio.run(build())
    return root / "view"


query_value = st.one_of(
    text, st.sampled_from(["stream:s/notes", "k", "-1", str(2**64), "1e3", "0"])
)


@_settings(80)
@given(
    path=st.sampled_from(
        [
            *("/v1/recall", "/v1/fetch", "/v1/history", "/v1/stats"),
            *("/v1/named", "/v1/context", "/v1/health"),
        ]
    ),
    params=st.dictionaries(
        st.sampled_from(
            [
                "namespace",
                "key",
                "id",
                "version",
                "limit",
                "text",
                "strategy",
                "tenant",
                "kind",
                "agent",
                "conversation",
                "token_budget",
                "prefix",
                "include_superseded",
            ]
        ),
        query_value,
        max_size=5,
    ),
)
def test_hostile_queries_get_4xx_never_5xx(path, params, served_view):
    async def go() -> None:
        with MemoryView.open(served_view, create=False) as view:
            server = TestServer(make_app(view), host="127.0.0.1")
            await server.start_server()
            try:
                async with ClientSession(str(server.make_url(""))) as http:
                    clean = {
                        k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
                        for k, v in params.items()
                    }
                    async with http.get(path, params=clean) as response:
                        assert response.status < 500, (path, params, await response.text())
                        await response.json()  # always valid, strict JSON
            finally:
                await server.close()

    asyncio.run(go())


# A batch's entries as callers send them: the shape the batch makes quickly (a text
# body with only its kind and owner) next to everything that must go the long way.
# The fields of an owner, in the order of `RememberBuilder._scope_of`.
_OWNER_ORDER = ("conversation", "tenant", "agent", "user", "application")
_OWNER_FIELDS = st.sampled_from(_OWNER_ORDER)
owner_value = st.one_of(
    st.sampled_from([None, "t1", "a"]), text, number, st.lists(text, max_size=1)
)
_KINDS = st.sampled_from(["fact", "Fact", "message", lm.MemoryKind.FACT, 1, b"fact"])
batch_entry = st.one_of(
    text,
    st.sampled_from(["fact one", "note"]),
    st.binary(max_size=20),
    number,
    st.fixed_dictionaries(
        {"body": st.one_of(text, st.sampled_from(["fact one", "x" * 21]), st.binary(max_size=8))},
        optional={
            "kind": st.one_of(_KINDS, text),
            "conversation": owner_value,
            "tenant": st.one_of(st.sampled_from(["", "t1"]), owner_value),
            "agent": owner_value,
            "user": owner_value,
            "application": owner_value,
            "durable": st.booleans(),
            "colour": text,
        },
    ),
    st.fixed_dictionaries({}, optional={"kind": text, "conversation": text}),
    # Good entries, with owners of two names in up to two of the five fields: entries
    # whose owners share a value in different fields.
    # (Sometimes with an option a batch must not make quickly.)
    st.builds(
        lambda fields, values, kind, extra: {
            "body": "fact",
            **dict(zip(fields, values, strict=False)),
            **kind,
            **extra,
        },
        st.lists(_OWNER_FIELDS, max_size=2, unique=True),
        st.lists(st.sampled_from(["t1", "a"]), min_size=2, max_size=2),
        st.one_of(st.just({}), st.builds(lambda kind: {"kind": kind}, _KINDS)),
        st.sampled_from([{}, {}, {"durable": True}, {"dedup": True}, {"colour": "red"}]),
    ),
)


def _made(make):
    try:
        return make()
    except lm.LaserError as exc:
        return type(exc), str(exc)


@_settings(300)
@given(entries=st.lists(batch_entry, max_size=8), bound=st.sampled_from([None, "t1"]))
@example(
    entries=[
        {"body": "x", "tenant": "t1", "agent": "a"},
        {"body": "y", "tenant": "a", "agent": "t1"},
    ],
    bound=None,
)
def test_a_batch_makes_the_records_its_entries_make_one_at_a_time(entries, bound, tmp_path_factory):
    # `remember_many` makes most entries without `RememberBuilder.record`: it must make
    # the same records, refuse the same entries with the same errors, and name the
    # first bad entry; whatever the builder's scope cache already holds.
    config = lm.MemoryConfig(max_body_bytes=20)

    async def go() -> None:
        path = tmp_path_factory.mktemp("batch")
        async with lm.connect(f"local://{path}", config=config) as laser:
            memory = laser.memory("notes", tenant=bound)
            builder = memory._remembers
            ids = [bytes([n]) * 16 for n in range(len(entries))]
            one_by_one = [
                _made(lambda e=entry, i=new_id: builder.record(e, new_id=i))
                for entry, new_id in zip(entries, ids, strict=True)
            ]
            for cached in (False, True):
                builder._scopes.clear()
                if cached:
                    # The builder's cache holds a scope for every order of each entry's
                    # owner: one looked up by fields in another order finds a wrong one.
                    for entry in entries:
                        owner = (
                            tuple(map(entry.get, _OWNER_ORDER)) if isinstance(entry, dict) else ()
                        )
                        if owner and all(isinstance(value, str | None) for value in owner):
                            for decoy in set(itertools.permutations(owner)):
                                _made(lambda d=decoy: builder._scope_of(d))
                batched = _made(lambda: builder.batch(entries, ids))
                bad = [n for n, made in enumerate(one_by_one) if isinstance(made, tuple)]
                if bad:
                    # Bad input names its entry; a refusal of the call itself (a tenant
                    # the handle may not act in) is the call's.
                    kind, message = one_by_one[bad[0]]
                    if issubclass(kind, lm.InvalidInput):
                        message = f"entry {bad[0]}: {message}"
                    assert batched == (kind, message)
                else:
                    assert batched == one_by_one

    asyncio.run(go())


class _RaisingText(str):
    """Text whose own methods all raise: what it holds is all a write may use."""

    def _raise(self, *args, **kwargs):
        raise ZeroDivisionError("a hostile method")

    __hash__ = __eq__ = __ne__ = encode = lower = strip = __len__ = _raise  # type: ignore[assignment]


class _RaisingHash:
    def __hash__(self):
        raise ValueError("a hostile hash")


@pytest.mark.parametrize("hostile", [_RaisingText, _RaisingHash], ids=["str", "object"])
@pytest.mark.parametrize(
    "field", ["body", "kind", "conversation", "tenant", "agent", "user", "application"]
)
def test_values_whose_own_methods_raise_get_a_laser_error_or_their_text(hostile, field, tmp_path):
    # A str subclass is taken as the text it holds, whatever its own hash, equality or
    # encode do; anything else is refused with a LaserError. Never a raw exception.
    plain = {"body": "a fact", "kind": "fact", "tenant": "", "conversation": "c1"}.get(field, "a1")
    value = hostile(plain) if hostile is _RaisingText else hostile()

    async def go() -> None:
        async with lm.connect(f"local://{tmp_path}") as laser:
            memory = laser.memory("notes")
            await memory.remember("warm", conversation="c1", agent="a1")  # scopes cached
            arguments = {"body": "a fact", field: value}
            body = arguments.pop("body")
            for call in (
                lambda: memory.remember(body, **arguments),
                lambda: memory.remember_many([{"body": body, **arguments}]),
            ):
                try:
                    await call()
                except lm.LaserError:
                    assert hostile is _RaisingHash
                else:
                    assert hostile is _RaisingText
            items = await memory.recall(limit=10, tenant="")
            if hostile is _RaisingText:
                assert sorted(item.text for item in items) == ["a fact", "a fact", "warm"]
                for item in (item for item in items if item.text == "a fact"):
                    owner = {
                        "conversation": item.scope.conversation,
                        "agent": item.scope.agent,
                        "user": item.scope.user,
                        "application": item.scope.application,
                        "kind": item.kind,
                    }
                    if field in owner:
                        assert owner[field] == plain
                        assert field == "kind" or type(owner[field]) is str
            else:
                assert [item.text for item in items] == ["warm"]

    asyncio.run(go())


def test_names_and_texts_whose_own_methods_raise_are_taken_as_their_text(tmp_path):
    # Namespaces, keys, conversations of a context, tenants of a handle and query texts
    # given as str subclasses: taken as the text they hold (msgspec encodes no str
    # subclass, so a record holding one could not be written at all).
    async def go() -> None:
        async with lm.connect(f"local://{tmp_path}") as laser:
            notes = laser.memory(_RaisingText("notes"), tenant=_RaisingText("t1"))
            await notes.remember("a fact about ports", conversation=_RaisingText("c1"))
            await laser.context(_RaisingText("c2")).memory("notes").remember("b", tenant="t1")
            await notes.set(_RaisingText("profile"), {"name": "Ada"})
            item = await notes.fetch(_RaisingText("profile"))
            assert item is not None and item.json() == {"name": "Ada"}
            found = await notes.recall(text=_RaisingText("ports"))
            assert [i.text for i in found] == ["a fact about ports"]
            assert found[0].scope == lm.MemoryScope(
                stream=found[0].scope.stream, tenant="t1", conversation="c1"
            )
            assert type(found[0].scope.tenant) is str and type(notes.namespace) is str
            assert sorted(i.text for i in await laser.memory("notes", tenant="t1").recall()) == [
                "a fact about ports",
                "b",
            ]
            # Ids, keys, bodies, lineage and strategies given so.
            R = _RaisingText
            mid = found[0].id
            await notes.improve(R(str(mid)), 2.0, conversation=R("c1"))
            await notes.update(R("profile"), R('{"city": "Paris"}'))
            await notes.set(R("motto"), R("carpe diem"))
            assert [e.version for e in await notes.history(R("profile"))] == [1, 2]
            fixed = await notes.remember(
                "a fact about harbours",
                conversation=R("c1"),
                supersedes=R(str(mid)),
                origin={"topic": R("raw.events"), "stream": R("s"), "partition": 0, "offset": 7},
                producer={"name": R("extractor"), "version": R("2")},
            )
            [latest] = await notes.recall(
                strategy=R("recent"), conversation=R("c1"), exclude=[R(str(mid))], limit=1
            )
            assert latest.id == fixed and latest.producer == lm.Producer(
                name="extractor", version="2"
            )
            assert latest.origin.topic == "raw.events" and type(latest.origin.topic) is str
            assert (await notes.fetch(R("profile"))).json() == {"name": "Ada", "city": "Paris"}
            assert (await notes.fetch("motto")).text == "carpe diem"
            await notes.forget(R(str(fixed)), conversation=R("c1"))
            assert [i.text for i in await notes.recall(conversation="c1")] == []
            await notes.scoped(R("c9")).remember("scoped")
            assert [i.scope.conversation for i in await notes.recall(conversation="c9")] == ["c9"]
            principal = lm.Principal("p", tenant=R("t1"))
            assert type(principal.tenant) is str and principal.tenant == "t1"

    asyncio.run(go())


class _RaisingNumber(float):
    def __float__(self):
        raise ZeroDivisionError("a hostile number")


class _RaisingMapping(dict):
    def get(self, *args):
        raise ZeroDivisionError("a hostile mapping")


def test_what_user_code_returns_runs_no_code_that_escapes(tmp_path):
    # A custom backend's recall and a summarizer return objects whose own methods are
    # the user's code: a payload or summary as text whose encode raises is taken as the
    # text it holds; an item whose score or mapping raises is a BackendFailed naming
    # what was wrong. Never a raw exception.
    class Backend:
        def __init__(self, found):
            self.found = found

        def remember(self, scope, payload):
            return None

        def recall(self, scope, query):
            return self.found

        def improve(self, scope, feedback):
            return None

        def forget(self, scope, id):
            return None

    async def go() -> None:
        async with lm.connect(f"local://{tmp_path}") as laser:
            backend = Backend([{"payload": _RaisingText("held text")}])
            [item] = await laser.memory_custom(backend).recall()
            assert item.body == b"held text"
            foreign = lm.MemoryScope(stream="", tenant=_RaisingText("t1"))
            for found, wrong in (
                ([{"payload": "p", "score": _RaisingNumber(1.0)}], "ZeroDivisionError"),
                ([_RaisingMapping(payload="p")], "ZeroDivisionError"),
                ([{"payload": "p", "kind": _RaisingText("fact")}], "bad item"),
            ):
                backend.found = found
                with pytest.raises(lm.BackendFailed, match=wrong):
                    await laser.memory_custom(backend).recall()
            async with lm.connect(f"local://{tmp_path}") as other:
                [theirs] = await other.memory_custom(Backend([{"payload": "x"}])).recall()
            backend.found = [msgspec.structs.replace(theirs, scope=foreign)]
            with pytest.raises(lm.BackendFailed, match="tenant"):
                await laser.memory_custom(backend).recall()
            memory = laser.memory("notes")
            for n in range(3):
                await memory.remember(f"message {n}", kind="message", conversation="c1")
            report = await memory.consolidate(
                1, conversation="c1", summarizer=lambda bodies: _RaisingText("the summary")
            )
            assert report.summarized == 3
            texts = [i.text for i in await memory.recall(conversation="c1", kind="summary")]
            assert texts == ["the summary"]

    asyncio.run(go())


@settings(max_examples=400, deadline=None)
@given(
    text=st.text(alphabet='[]{}"\\ a,:', max_size=40).map(str.encode),
    limit=st.integers(min_value=0, max_value=6),
)
@example(text=b"[[[]]]", limit=2)  # three openers, deep three
@example(text=b'["[[[["]', limit=2)  # openers in a string count for the bound alone
@example(text=b"[][][]", limit=2)  # more openers than the limit, one level deep
def test_the_quick_depth_bound_says_what_the_measured_depth_says(text, limit):
    # Named bodies and patches are refused past a nesting depth; the check counts the
    # brackets that open first, and measures the depth only when they could go past it.
    from laser_memory.named import json_depth, json_too_deep

    assert json_too_deep(text, limit) == (json_depth(text) > limit)


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def _nesting(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(_nesting, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_nesting, value.values()), default=0)
    return 0


@settings(max_examples=400, deadline=None)
@given(value=_JSON_VALUES, indent=st.sampled_from([None, 2]))
@example(value="[[[", indent=None)  # brackets inside a lone string: a scalar, depth 0
@example(value=["]]", {"}": "[[["}], indent=None)
def test_json_depth_is_how_deeply_the_values_nest(value, indent):
    # What the depth limit and its messages count: a scalar (a lone string too) is 0,
    # each array or object around it one more. A mutant calling a lone string 1 deep
    # passed every test (the bound compared it only with limits of 1 and more).
    from laser_memory.named import json_depth

    assert json_depth(json.dumps(value, indent=indent).encode()) == _nesting(value)


def _json_texts() -> st.SearchStrategy[bytes]:
    """JSON text as writers make it (compact or indented, ASCII-escaped or not, in UTF-8,
    UTF-16 or with a BOM), then cut, grown or with a byte changed."""
    written = st.builds(
        lambda value, indent, ascii_only, encoding: json.dumps(
            value, indent=indent, ensure_ascii=ascii_only
        ).encode(encoding, "surrogatepass"),
        _JSON_VALUES,
        st.sampled_from([None, 0, 2]),
        st.booleans(),
        st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "utf-16"]),
    )
    damaged = st.tuples(written, st.integers(0, 200), st.binary(max_size=3), st.integers(0, 2)).map(
        lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + t[3] :]
    )
    return written | damaged | st.binary(max_size=30)


def _same_json(a: object, b: object) -> bool:
    """Equal as JSON values, with ints and floats told apart (and -0.0 from 0.0)."""
    return type(a) is type(b) and json.dumps(a) == json.dumps(b)


@settings(max_examples=1500, deadline=None)
@given(text=_json_texts())
@example(text=b'["\\ud800", 1e400, -0.0, 17976931348623159e292]')  # json.loads alone reads it
@example(text=b"\xef\xbb\xbf[1]")  # a UTF-8 byte-order mark
@example(text=b'"\xed\xa0\x80"')  # an encoded lone surrogate
@example(text=b"[NaN]")
@example(text=b"[-0.0, 0.1, 5e-324, 9007199254740993, 1.7976931348623157e308]")
@example(text=b"1" * 5000)  # past Python's digits for an int
def test_named_bodies_parse_as_the_standard_library_parses_them(text):
    # Named bodies and patches are parsed by msgspec, then by json.loads where msgspec
    # refuses the text: every text must parse to the value json.loads gives, or fail
    # where it fails (NaN and Infinity refused), as bodies on the log always have.
    from laser_memory.named import _no_constant, load_json

    try:
        wanted = json.loads(text, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        with pytest.raises(lm.InvalidBody):
            load_json(text)
    else:
        assert _same_json(load_json(text), wanted)


@pytest.mark.parametrize("field", ["conversation", "agent", "user", "application"])
def test_text_claiming_to_equal_a_checked_name_is_filed_under_its_own(field, tmp_path):
    # A handle keeps the scopes it has checked; a str subclass's own equality and hash
    # are never asked of them, so text that claims to be "c1" is not filed under "c1",
    # and one holding a NUL is refused, however it compares.
    async def go() -> None:
        async with lm.connect(f"local://{tmp_path}") as laser:
            memory = laser.memory("notes")
            await memory.remember("warm", **{field: "c1"})  # its scope checked and kept
            await memory.remember("one", **{field: LyingText("c9")})
            await memory.remember_many([{"body": "many", field: LyingText("c9")}])
            items = await memory.recall(limit=10)
            assert {i.text: getattr(i.scope, field) for i in items} == {
                "warm": "c1",
                "one": "c9",
                "many": "c9",
            }
            ends = await laser.log.end_offsets(memory.topic)
            for call in (
                lambda: memory.remember("bad", **{field: LyingText("a\x00b")}),
                lambda: memory.remember_many([{"body": "bad", field: LyingText("a\x00b")}]),
            ):
                with pytest.raises(lm.InvalidName):
                    await call()
            assert await laser.log.end_offsets(memory.topic) == ends
            scope = lm.MemoryScope(stream=laser.stream, **{field: LyingText("a\x00b")})
            with pytest.raises(lm.InvalidName):
                scope.validated()

    asyncio.run(go())
