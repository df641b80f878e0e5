"""Ids and kinds: stable codes, stable content ids, clear errors."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import laser_memory as lm
from laser_memory.errors import InvalidId, InvalidName, UnknownKind
from laser_memory.ids import AgentId, ConversationId, MemoryId, memory_id_content
from laser_memory.kinds import MemoryClass, MemoryKind, memory_kind_class, memory_kind_code
from laser_memory.log.partitioner import murmur2, partition_for


def test_random_ids_are_16_bytes_printable_and_time_ordered():
    first = MemoryId.new()
    time.sleep(0.002)
    ids = [MemoryId.new() for _ in range(100)]
    assert len(first.bytes) == 16 and len(str(first)) == 26
    assert all(first < later for later in ids)
    assert all(str(first) < str(later) for later in ids)
    assert len(set(ids)) == 100
    assert abs(first.millis - time.time() * 1000) < 5000


def test_a_random_id_takes_its_time_from_the_clock_given_and_checks_it():
    """`MemoryId.new(clock)` stamps the clock's millisecond (the low 48 bits of it), and a
    clock that is none, or reads no whole number of milliseconds, is a `ConfigError`."""
    from laser_memory.clock import SteppedClock

    assert MemoryId.new(SteppedClock(1_234_567)).millis == 1_234_567
    assert MemoryId.new(SteppedClock((1 << 48) + 9)).millis == 9  # 48 bits: the year 10889

    class Fractional:
        def now_ms(self) -> float:
            return 1.5

    for bad in (object(), Fractional()):
        with pytest.raises(lm.ConfigError):
            MemoryId.new(bad)  # type: ignore[arg-type]


def test_printed_ids_parse_back():
    mid = MemoryId.new()
    assert MemoryId.parse(str(mid)) == mid
    assert MemoryId.parse(str(mid).lower()) == mid
    assert MemoryId.parse(mid.bytes.hex()) == mid
    assert MemoryId.parse(mid.bytes) == mid
    assert str(MemoryId(bytes(range(16)))) == "00041061050R3GG28A1C60T3GF"
    # Crockford base32: an id read aloud or retyped with O for 0, I or L for 1 is the same
    # id, in either case.
    retyped = "00041061050R3GG28A1C60T3GF".replace("0", "O").replace("1", "I")
    assert MemoryId.parse(retyped) == MemoryId(bytes(range(16)))
    assert MemoryId.parse(retyped.replace("I", "l").lower()) == MemoryId(bytes(range(16)))
    # An id no write returned (parsed, or made from bytes) has no receipt to wait for.
    for unwritten in (MemoryId.parse(str(mid)), MemoryId(bytes(16))):
        assert unwritten.receipt is None and unwritten.also == ()


@pytest.mark.parametrize("bad", ["", "short", "U" * 26, "8" + "0" * 25, "0" * 27, b"\x00" * 15, 42])
def test_malformed_ids_are_refused(bad):
    with pytest.raises(InvalidId):
        MemoryId.parse(bad)


# Test vectors: content ids must never change across processes or versions.
CONTENT_VECTORS = [
    (("fact", b"node-7 rotates keys monthly"), {}, "11136KJJ58QV1YF330F0MC47G2"),
    (
        ("entity", b"node-7 rotates keys monthly"),
        {"agent": "planner"},
        "1VNCH7FHRP38NE1KR9G3P1T1CA",
    ),
    (
        ("fact", "the reporter prefers email"),
        {
            "stream": "prod",
            "tenant": "acme",
            "agent": "triage",
            "user": "u-1",
            "application": "helpdesk",
        },
        "35Z38ZG7Q6RNAVAS8X56K8GS7D",
    ),
]


@pytest.mark.parametrize(("args", "scope", "expected"), CONTENT_VECTORS)
def test_content_id_vectors(args, scope, expected):
    assert str(memory_id_content(*args, **scope)) == expected


def test_content_id_depends_on_owner_kind_and_body_only():
    base = memory_id_content("fact", b"x", agent="a", user="u")
    assert memory_id_content("fact", "x", agent="a", user="u") == base
    assert memory_id_content("fact", b"x", agent="a", user="v") != base
    assert memory_id_content("fact", b"x", agent="b", user="u") != base
    assert memory_id_content("summary", b"x", agent="a", user="u") != base
    assert memory_id_content("fact", b"y", agent="a", user="u") != base
    assert memory_id_content("fact", b"x", agent="a", user="u", tenant="t") != base
    # Field boundaries are unambiguous: moving bytes between fields changes the id.
    assert memory_id_content("fact", b"x", agent="ab", user="") != memory_id_content(
        "fact", b"x", agent="a", user="b"
    )


@pytest.mark.parametrize(
    ("arguments", "error", "says"),
    [
        # bytes(5) hashed five zero bytes (and bytes(10**12) would allocate a terabyte).
        (
            ("fact", 5),
            lm.InvalidBody,
            "a body is str or bytes, got int; give a structured value as its JSON text",
        ),
        (("fact", 10**12), lm.InvalidBody, "got int"),
        (("fact", None), lm.InvalidBody, "got NoneType"),
        (("fact", [1, 2]), lm.InvalidBody, "got list"),
        (("fact", "\udcff"), lm.InvalidBody, "not valid Unicode"),
        (("fact", "x", {"tenant": 5}), lm.InvalidName, "tenant must be a string"),
        (("fact", "x", {"stream": b"s"}), lm.InvalidName, "stream must be a string"),
        (("fact", "x", {"agent": "\ud800"}), lm.InvalidName, "agent .* not valid Unicode"),
    ],
)
def test_a_content_id_of_what_no_remember_takes_is_refused(arguments, error, says):
    kind, body, *scope = arguments
    with pytest.raises(error, match=says):
        memory_id_content(kind, body, **(scope[0] if scope else {}))
    with pytest.raises(error, match=says):
        MemoryId.content(kind, body, **(scope[0] if scope else {}))


def test_a_content_id_reads_a_str_subclass_as_its_text():
    class Shouting(str):
        def encode(self, *args, **kwargs):
            return b"SOMETHING ELSE"

    assert memory_id_content("fact", Shouting("x"), agent=Shouting("a")) == memory_id_content(
        "fact", "x", agent="a"
    )


def test_memory_ids_order_among_themselves_only():
    low, high = MemoryId(bytes(16)), MemoryId(b"\xff" * 16)
    assert sorted([high, low]) == [low, high]
    assert low < high and not high < low and not low < MemoryId(bytes(16))  # strict
    assert repr(low) == "MemoryId('00000000000000000000000000')"
    with pytest.raises(TypeError, match="not supported"):
        _ = low < 5


def test_kind_codes_and_classes():
    expected = {
        "fact": (1, "semantic"),
        "message": (2, "episodic"),
        "summary": (3, "semantic"),
        "entity": (4, "semantic"),
        "feedback": (5, "semantic"),
        "procedure": (6, "procedural"),
    }
    for word, (code, cls) in expected.items():
        assert memory_kind_code(word) == code
        assert memory_kind_class(word) == cls
        assert MemoryKind.from_code(code) == MemoryKind(word)
    assert memory_kind_code("Fact") == 1


@pytest.mark.parametrize("code", [99, 0, True, "1", 1.0, [1]])
def test_a_kind_code_is_a_known_int(code):
    with pytest.raises(UnknownKind, match="unknown memory kind code"):
        MemoryKind.from_code(code)


@pytest.mark.parametrize("bad", ["facts", "", None, 3])
def test_unknown_kind_is_an_error_never_a_fact(bad):
    with pytest.raises(UnknownKind, match="unknown memory kind"):
        memory_kind_code(bad)


@pytest.mark.parametrize("bad", ["facts", "", None, 3, [], "\ud800"])
def test_the_enums_say_what_they_know_when_given_another_value(bad):
    # Their own ValueError ("'facts' is not a valid MemoryKind") said nothing of the
    # known values, and was no LaserError: still ValueErrors, now saying them.
    with pytest.raises(UnknownKind, match="use one of: fact, message, summary"):
        MemoryKind(bad)
    with pytest.raises(lm.InvalidInput, match="use one of: semantic, episodic, procedural"):
        MemoryClass(bad)
    with pytest.raises(lm.InvalidInput, match=r"use one of: agent\.sessions"):
        lm.AgentTopic(bad)
    assert issubclass(UnknownKind, ValueError) and issubclass(lm.InvalidInput, ValueError)


def test_a_kind_word_is_read_in_any_case_as_parse_kind_reads_it():
    class Shouting(str):
        def lower(self):
            raise RuntimeError("asked")

    assert MemoryKind("FACT") is MemoryKind("Fact") is MemoryKind.FACT
    assert MemoryKind(Shouting("SUMMARY")) is MemoryKind.SUMMARY


def test_unknown_kind_code_is_an_error():
    with pytest.raises(UnknownKind, match="7"):
        MemoryKind.from_code(7)


def test_conversation_and_agent_ids_validate():
    assert ConversationId("support-42") == "support-42"
    assert ConversationId.new() != ConversationId.new()
    assert AgentId("planner") == "planner"
    for bad in ("", "a\nb", "x" * 256):
        with pytest.raises(InvalidName):
            ConversationId(bad)
        with pytest.raises(InvalidName):
            AgentId(bad)


def test_murmur2_matches_the_java_client():
    # Vectors from Kafka's own Utils tests (signed 32-bit in Java).
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for key, signed in vectors.items():
        assert murmur2(key) == signed & 0xFFFFFFFF
        assert partition_for(key, 7) == (signed & 0x7FFFFFFF) % 7
        # Placed again (the hash is kept) and from a bytearray: the same partition.
        assert partition_for(bytearray(key), 7) == (signed & 0x7FFFFFFF) % 7
        assert partition_for(key, 5) == (signed & 0x7FFFFFFF) % 5


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_murmur2_is_aiokafkas_for_any_key(key):
    """Ours reads a key's words at once; aiokafka's (the Java client's, byte by byte) says
    what it must give, for every length's tail and for keys past 63 words."""
    from aiokafka.partitioner import murmur2 as aiokafkas

    assert murmur2(key) == aiokafkas(key)
    assert murmur2(bytearray(key)) == aiokafkas(key)


def test_a_forked_child_never_mints_the_ids_its_parent_mints():
    """Random parts come from a pool drawn ahead of need: a child forked after the
    parent drew one must draw its own, or both would mint the same next ids."""
    MemoryId.new()  # the parent's pool now holds unused random bytes
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: mint a few ids and hand them over
        try:
            os.write(write, b"".join(MemoryId.new().bytes[6:] for _ in range(8)))
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read()
    parent = b"".join(MemoryId.new().bytes[6:] for _ in range(8))
    assert len(child) == len(parent) == 80
    assert {child[i : i + 10] for i in range(0, 80, 10)}.isdisjoint(
        parent[i : i + 10] for i in range(0, 80, 10)
    )


def test_random_parts_never_repeat_across_threads():
    seen: list[bytes] = []

    def mint() -> None:
        seen.extend(MemoryId.new().bytes[6:] for _ in range(5_000))

    threads = [threading.Thread(target=mint) for _ in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: races show
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(set(seen)) == len(seen) == 20_000
