"""A store of your own behind the memory API: arguments checked as the log handle
checks them before the backend sees them, sync and async backends, ids minted by the
handle (append) or by the backend, and every backend failure a BackendFailed."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

import laser_memory as lm


class DictStore:
    """A synchronous backend without append: it mints its own ids."""

    def __init__(self) -> None:
        self.items: dict[str, dict] = {}

    def remember(self, scope, payload):
        mid = str(lm.MemoryId.new())
        self.items[mid] = {"payload": payload, "scope": scope, "weight": 0.0, "id": mid}
        return mid

    def recall(self, scope, query):
        mine = [i for i in self.items.values() if i["scope"]["tenant"] == scope["tenant"]]
        if query["text"]:
            mine = [i for i in mine if query["text"].encode() in i["payload"]]
        mine.sort(key=lambda i: -i["weight"])
        return [
            {"payload": i["payload"], "id": i["id"], "score": i["weight"],
             "conversation": i["scope"]["conversation"]}
            for i in mine
        ]  # fmt: skip

    def improve(self, scope, feedback):
        self.items[feedback["id"]]["weight"] += feedback["weight"]

    def forget(self, scope, mid):
        self.items.pop(mid, None)


class AppendStore(DictStore):
    """An async backend with a typed append: the handle mints ids and passes kinds."""

    async def append(self, scope, mid, kind, payload):
        self.items[mid] = {"payload": payload, "scope": scope, "weight": 0.0, "id": mid,
                           "kind": kind}  # fmt: skip

    async def recall(self, scope, query):
        return super().recall(scope, query)


@pytest.mark.parametrize("store", [DictStore, AppendStore])
async def test_the_memory_api_over_a_store_of_your_own(tmp_path, store):
    async with lm.connect(f"local://{tmp_path}", stream="s") as laser:
        backend = store()
        memory = laser.memory_custom(backend)
        email = await memory.remember("prefers email", conversation="c1", tenant="t")
        bug = await memory.remember("login bug", kind="summary", tenant="t", durable=True)
        await memory.remember("someone else's", tenant="u")
        assert isinstance(email, lm.MemoryId)
        await memory.improve(bug, 2.0, tenant="t")
        items = await memory.recall(tenant="t")
        assert [i.text for i in items] == ["login bug", "prefers email"]
        assert items[1].conversation == "c1" and items[0].score == 2.0
        assert [i.text for i in await memory.recall(tenant="t", text="email")] == ["prefers email"]
        await memory.forget(email, tenant="t")
        assert [i.id for i in await memory.recall(tenant="t")] == [bug]
        stored = backend.items[str(bug)]
        assert stored["scope"]["stream"] == "s" and stored["scope"]["lifetime"] == "durable"
        if store is AppendStore:
            assert stored["kind"] == "summary"
    assert lm.MemoryHandle.custom(DictStore()).backend_kind == "custom"


async def test_bad_arguments_never_reach_the_backend():
    backend = DictStore()
    memory = lm.MemoryHandle.custom(backend)
    for call in (
        memory.remember(""),
        memory.remember(42),
        memory.remember("x", kind="gossip"),
        memory.remember("x", tenant="bad\x00name"),
        memory.recall(limit=-1),
        memory.recall(strategy="psychic"),
        memory.improve("not-an-id", 1.0),
        memory.improve(lm.MemoryId.new(), float("nan")),
        memory.remember("x", durable="yes"),
        memory.recall(text=5),
        memory.improve(lm.MemoryId.new(), 1.0, colour="red"),
        memory.forget(lm.MemoryId.new(), stream="other"),
    ):
        with pytest.raises(lm.InvalidInput):
            await call
    assert backend.items == {}


async def test_backend_failures_are_backend_failed():
    class Broken(DictStore):
        def recall(self, scope, query):
            return "not a list"

        def improve(self, scope, feedback):
            raise KeyError(feedback["id"])

        def remember(self, scope, payload):
            return "not an id"

    memory = lm.MemoryHandle.custom(Broken())
    with pytest.raises(lm.BackendFailed):
        await memory.recall()
    with pytest.raises(lm.BackendFailed, match="KeyError"):
        await memory.improve(lm.MemoryId.new(), 1.0)
    with pytest.raises(lm.BackendFailed, match="no id"):
        await memory.remember("x")
    with pytest.raises(lm.ConfigError, match="forget"):
        lm.MemoryHandle.custom(object())


def _item_of(tenant: str) -> lm.MemoryItem:
    return lm.MemoryItem(
        id=lm.MemoryId.new(),
        kind=lm.MemoryKind.FACT,
        body=b"a secret of " + tenant.encode(),
        scope=lm.MemoryScope(tenant=tenant),
        lifetime="session",
        append_time_ms=0,
        source=None,
        score=0.0,
        signals=(),
    )


def _nested(depth: int) -> list:
    outer: list = []
    inner = outer
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return outer


class _LookupFails(Mapping):
    """A mapping whose every lookup raises, as a backend's own mapping type may."""

    def __getitem__(self, key):
        raise ValueError("the store is closed")

    def __iter__(self):
        return iter(["payload"])

    def __len__(self):
        return 1


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        # A backend with a tenancy bug: its answer is refused whole, never passed on.
        ([_item_of("acme"), _item_of("globex")], "tenant 'globex' to a read of tenant 'acme'"),
        # bytes(10**10) was ten gigabytes of zeros, returned as the item's body.
        ([{"payload": 10**10}], "a payload is str or bytes, got int"),
        ([{"payload": [104, 105]}], "a payload is str or bytes, got list"),
        ([{"payload": "a", "score": float("nan")}], "a score is a finite number"),
        # float() read these as scores: text, a bool, a number no float holds.
        ([{"payload": "a", "score": "0.9"}], "a score is a number, got str"),
        ([{"payload": "a", "score": True}], "a score is a number, got bool"),
        ([{"payload": "a", "score": 10**400}], "OverflowError"),
        # Its message called repr: a raw RecursionError.
        ([_nested(100_000)], "items are MemoryItems or dicts"),
        # Asking whether it held a payload ran its lookup: a raw ValueError.
        ([_LookupFails()], "bad item: ValueError: the store is closed"),
    ],
)
async def test_a_backend_answer_that_breaks_the_rules_is_backend_failed(answer, says):
    class Answering(DictStore):
        def recall(self, scope, query):
            return answer

    memory = lm.MemoryHandle.custom(Answering())
    with pytest.raises(lm.BackendFailed, match=says):
        await memory.recall(tenant="acme")



async def test_a_backend_item_of_the_read_tenant_passes():
    class Answering(DictStore):
        def recall(self, scope, query):
            return [_item_of(scope["tenant"])]

    memory = lm.MemoryHandle.custom(Answering())
    assert [i.text for i in await memory.recall(tenant="acme")] == ["a secret of acme"]


async def test_a_custom_memory_of_a_tenant_bound_connection_acts_in_its_tenant(tmp_path):
    """A connection bound to acme gave a custom memory that wrote to tenant "" by default
    and to any tenant named: the binding held for every handle but this one."""
    async with lm.connect(f"local://{tmp_path}", tenant="acme") as laser:
        backend = DictStore()
        memory = laser.memory_custom(backend)
        assert memory.tenant == "acme"
        mid = await memory.remember("acme runs node-7")
        assert [i["scope"]["tenant"] for i in backend.items.values()] == ["acme"]
        assert [i.id for i in await memory.recall()] == [mid]
        before = dict(backend.items)
        for call in (
            memory.remember("globex runs node-9", tenant="globex"),
            memory.recall(tenant="globex"),
            memory.improve(mid, 1.0, tenant=""),
            memory.forget(mid, tenant="globex"),
        ):
            with pytest.raises(lm.AccessDenied, match="bound to tenant 'acme'"):
                await call
        assert backend.items == before and before[str(mid)]["weight"] == 0.0
    assert lm.MemoryHandle.custom(DictStore()).tenant is None
    with pytest.raises(lm.InvalidName):
        lm.CustomMemory(DictStore(), tenant="a\x00b")


@pytest.mark.parametrize("size", [0, -1, "1024", True, 1.5, None])
def test_a_custom_memory_refuses_a_body_cap_that_is_no_positive_size(size):
    """A cap of "1024" failed every remember with a raw TypeError; 0 or -1 refused every
    body with a message blaming it."""
    with pytest.raises(lm.ConfigError, match="max_body_bytes is a positive number of bytes"):
        lm.CustomMemory(DictStore(), max_body_bytes=size)


def test_a_custom_memory_refuses_a_stream_that_is_no_name():
    """It was taken, and every call then failed naming no setting."""
    for stream in (5, "a\x00b"):
        with pytest.raises(lm.InvalidName, match="stream"):
            lm.CustomMemory(DictStore(), stream=stream)


async def test_replies_no_list_of_items_can_be_made_of_are_backend_failed():
    """A recall answering None, a mapping or a set, or a list holding a number or a mapping
    without a payload: each a BackendFailed naming it (a number was a raw TypeError)."""
    answers = [None, {"payload": "x"}, {"x"}, [5], [{"id": "x"}], [None]]

    class Odd(DictStore):
        def recall(self, scope, query):
            return answers.pop(0)

    memory = lm.MemoryHandle.custom(Odd())
    for _ in range(6):
        with pytest.raises(lm.BackendFailed, match="the backend's recall returned"):
            await memory.recall()


async def test_a_custom_memory_defaults_as_the_log_handle_does():
    """A session lifetime unless durable, 50 items unless told, bodies up to 1 MiB, and
    a memory bound to the default tenant "" refuses another as any binding does."""
    asked = []

    class Seen(DictStore):
        def recall(self, scope, query):
            asked.append(query)
            return super().recall(scope, query)

    backend = Seen()
    memory = lm.MemoryHandle.custom(backend)
    mid = await memory.remember("x")
    assert backend.items[str(mid)]["scope"]["lifetime"] == "session"
    await memory.recall()
    assert asked[-1]["limit"] == 50
    await memory.remember(b"x" * (1 << 20))
    with pytest.raises(lm.BodyTooLarge):
        await memory.remember(b"x" * ((1 << 20) + 1))
    default = lm.CustomMemory(DictStore(), tenant="")
    assert default.tenant == ""
    await default.remember("mine")
    with pytest.raises(lm.AccessDenied, match="bound to tenant ''"):
        await default.recall(tenant="acme")


async def test_a_laser_error_the_backend_raises_comes_back_as_it_is():
    """A backend over another laser handle, or with its own access rules, raises the
    library's errors: the caller gets that error, not a BackendFailed wrapping it."""

    class Guarded(DictStore):
        def recall(self, scope, query):
            raise lm.AccessDenied("this store serves acme only")

        async def forget(self, scope, mid):
            raise lm.InvalidInput("no such item here")

    memory = lm.MemoryHandle.custom(Guarded())
    with pytest.raises(lm.AccessDenied, match="acme only"):
        await memory.recall()
    with pytest.raises(lm.InvalidInput, match="no such item"):
        await memory.forget(lm.MemoryId.new())


async def test_the_smallest_body_cap_takes_one_byte():
    backend = DictStore()
    memory = lm.CustomMemory(backend, max_body_bytes=1)
    assert await memory.remember("a") is not None
    with pytest.raises(lm.InvalidBody):
        await memory.remember("ab")
    assert [i["payload"] for i in backend.items.values()] == [b"a"]


async def test_an_item_a_backend_gives_as_a_dict():
    """Its id, kind, score and conversation as given (a score left out is 0.0, the
    conversation the read's); in the read's stream and tenant, its place in the
    backend's answer its signal, and no topic, position, generation or time (the
    backend has none to give)."""
    given = lm.MemoryId.new()

    class Answering(DictStore):
        def recall(self, scope, query):
            return [
                {"payload": "a", "id": str(given), "kind": "summary", "score": 2,
                 "conversation": "c-9"},
                {"payload": b"b"},
            ]  # fmt: skip

    memory = lm.CustomMemory(Answering(), stream="s")
    first, second = await memory.recall(tenant="acme", conversation="c-1")
    assert (first.id, first.kind, first.score, first.conversation) == (
        given, lm.MemoryKind.SUMMARY, 2.0, "c-9"
    )  # fmt: skip
    assert (second.text, second.kind, second.score, second.conversation) == (
        "b", lm.MemoryKind.FACT, 0.0, "c-1"
    )  # fmt: skip
    assert second.id != first.id and isinstance(second.id, lm.MemoryId)
    for rank, item in enumerate((first, second)):
        assert (item.scope.stream, item.scope.tenant) == ("s", "acme")
        assert item.append_time_ms == 0
        assert item.source[:5] == ("s", "", 0, 0, "")
        assert item.source.conversation == item.conversation
        assert [(s.strategy, s.rank) for s in item.signals] == [("custom", rank)]
