"""Choosing a log by URL."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time

import pytest

import laser_memory as lm
from folders.http import ServerConfig
from folders.service import FolderConfig, ViewFolder
from folders.view import MemoryView
from laser_memory.ids import MAX_NAME_BYTES, MemoryId
from laser_memory.log import (
    KafkaLog,
    KafkaLogConfig,
    LocalLog,
    LocalLogConfig,
    connect_log,
    parse_url,
)


def test_urls_pick_the_log():
    assert isinstance(connect_log("local:///tmp/x"), LocalLog)
    assert connect_log("local:///tmp/x").url == "local:///tmp/x"
    log = connect_log("kafka://127.0.0.1:9092, broker-2.example:19092")
    assert isinstance(log, KafkaLog)
    assert log.url == "kafka://127.0.0.1:9092,broker-2.example:19092"
    assert parse_url("kafka://[::1]:9092") == ("kafka", "[::1]:9092")
    assert parse_url("local://~/data")[1].endswith("/data")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "laser-data",
        "local://",
        "kafka://",
        "kafka://host",
        "kafka://host:port",
        "kafka://host:0",
        "kafka://host:70000",
        "kafka://a:1,,b:2",
        "http://x:1",
        42,
    ],
)
def test_malformed_urls_are_a_clear_error(bad):
    with pytest.raises(lm.InvalidUrl):
        connect_log(bad)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        # aiokafka read each of these as port 9092 of some host: a typo reached
        # whichever broker listened there.
        ("kafka://127.0.0.1:-5", "'127.0.0.1:-5' is not host:port"),
        ("kafka://::1:1", "'::1:1' is not host:port"),
        ("kafka://h:1 h:2", "'h:1 h:2' is not host:port"),
        ("kafka://h:1,", "an entry is empty"),
        # aiokafka tries a list's servers one by one, each up to a request timeout.
        ("kafka://" + ",".join(f"h{i}:9092" for i in range(101)), "101 servers are more"),
        # A folder named " ", or one beside ./data named "./data ", was made.
        ("local:// ", "' ' starts or ends with white space"),
        ("local://./data ", "'./data ' starts or ends with white space"),
        ("local://\t./data", "starts or ends with white space"),
        # A query read as settings made a folder named "data?sync=off" and set nothing.
        ("local://./data?sync=off", "has a query or fragment .* a folder path only"),
        ("local://./data#x", "has a query or fragment"),
        ("kafka://h:9092?acks=all", "'h:9092\\?acks=all' is not host:port"),
    ],
)
def test_a_url_that_names_some_other_place_is_refused(url, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(lm.InvalidUrl, match=says):
        lm.connect(url)
    assert list(tmp_path.iterdir()) == []


def test_a_bootstrap_list_takes_a_hundred_servers_and_a_path_spaces_inside():
    hundred = ",".join(f"h{i}:9092" for i in range(100))
    assert connect_log(f"kafka://{hundred}").url == f"kafka://{hundred}"
    assert KafkaLogConfig(f" {hundred} ").bootstrap_servers == f" {hundred} "
    assert parse_url("local:///tmp/a b") == ("local", "/tmp/a b")


def test_connect_uses_laser_url_and_checks_the_stream(monkeypatch, tmp_path):
    monkeypatch.setenv("LASER_URL", f"local://{tmp_path}")
    monkeypatch.setenv("LASER_VIEW", str(tmp_path / "view"))
    laser = lm.connect(stream="prod")
    assert laser.log.url == f"local://{tmp_path}"
    assert laser.memory_topic_name == "prod.agent.memory"
    assert laser.view_path == str(tmp_path / "view")  # $LASER_VIEW, as the README says
    assert lm.connect(stream="prod", view=tmp_path / "other").view_path == str(tmp_path / "other")
    monkeypatch.setenv("LASER_VIEW", "")
    assert lm.connect(stream="prod").view_path is None
    monkeypatch.setenv("LASER_URL", "")  # empty, as unset: the default
    assert lm.connect(stream="prod").log.url == f"local://{os.path.abspath('laser-data')}"
    with pytest.raises(lm.InvalidName):
        lm.connect(stream="bad stream")


@pytest.mark.parametrize("bad", ["", 0, False, b"local://x"])
def test_a_url_given_empty_or_not_text_is_refused_never_the_default_folder(
    bad, monkeypatch, tmp_path
):
    # A setting that came out empty (a missing config key) wrote to ./laser-data.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(lm.InvalidUrl, match=r"empty|not a log URL"):
        lm.connect(bad)
    assert list(tmp_path.iterdir()) == []


async def test_a_stream_is_as_long_as_its_agent_topics_may_be(tmp_path):
    # A stream of 235-249 characters is a topic name, but '<stream>.agent.memory' is
    # not: the connection was made, and every write of every handle failed.
    longest = "s" * 234
    with pytest.raises(lm.InvalidName, match="at most 234 fit"):
        lm.connect(f"local://{tmp_path}", stream=longest + "s")
    async with lm.connect(f"local://{tmp_path}", stream=longest) as laser:
        await laser.bootstrap(partitions=1)
        await laser.memory("n").remember("fits")
        with pytest.raises(lm.InvalidName, match="at most 234 fit"):
            laser.memory(f"stream:{longest}s/n")
        await laser.memory(f"stream:{longest}/m").remember("fits too")
        assert len(await laser.memory("n").recall()) == 1


async def test_a_namespace_fits_a_record_with_its_streams_prefix(tmp_path):
    # The records carry 'stream:<stream>/<namespace>': a namespace that fit alone but not
    # with the prefix was written, and set aside by every folder.
    async with lm.connect(f"local://{tmp_path}", stream="prod") as laser:
        room = MAX_NAME_BYTES - len("stream:prod/")
        handle = laser.memory("n" * room)
        assert len(handle.namespace.encode()) == MAX_NAME_BYTES
        await handle.remember("fits exactly")
        with pytest.raises(lm.InvalidName, match=f"at most {MAX_NAME_BYTES} fit"):
            laser.memory("n" * (room + 1))


def test_create_is_true_or_false(tmp_path):
    """create="no" is refused, not read as true: a read-only caller must not make a log."""
    with pytest.raises(lm.ConfigError, match="create"):
        lm.connect(f"local://{tmp_path}/log", create="no")
    with pytest.raises(lm.ConfigError):
        connect_log(f"local://{tmp_path}/log", create=0)
    assert not (tmp_path / "log").exists()


class _AsyncClock:
    async def now_ms(self) -> int:
        return 1


@pytest.mark.parametrize(
    ("arguments", "error", "says"),
    [
        ({"view": 5}, lm.ConfigError, "view path is a str"),
        ({"view": ""}, lm.ConfigError, "view path is empty"),
        ({"view": "a\x00b"}, lm.ConfigError, "view path .* NUL byte"),
        ({"view": "a\udcffb"}, lm.ConfigError, "view path .* no UTF-8"),
        ({"stream": 5}, lm.InvalidName, "stream name is a str"),
        ({"config": {"max_body_bytes": 10}}, lm.ConfigError, "MemoryConfig"),
        ({"clock": 5}, lm.ConfigError, "now_ms"),
        ({"clock": "system"}, lm.ConfigError, "now_ms"),
        ({"clock": _AsyncClock()}, lm.ConfigError, "has an async now_ms"),
        ({"principal": "alice"}, lm.ConfigError, "principal is a Principal, got str"),
        ({"embedder": "minilm"}, lm.InvalidInput, "embed_many"),
    ],
)
def test_connect_refuses_arguments_of_the_wrong_kind(tmp_path, arguments, error, says):
    """Each used to raise a raw TypeError or AttributeError, some only at the first
    write (a clock is first read inside a commit)."""
    with pytest.raises(error, match=says):
        lm.connect(f"local://{tmp_path}/log", **arguments)
    assert not (tmp_path / "log").exists()


@pytest.mark.skipif(
    sys.version_info >= (3, 13), reason="3.13's realpath leaves a link it cannot read as it is"
)
@pytest.mark.parametrize("where", ["log", "view"])
async def test_a_path_through_a_link_that_cannot_be_read_is_a_config_error(
    tmp_path, monkeypatch, where
):
    """Python before 3.13 raises a link's unreadable target (``/proc/1/root`` in a
    container without ptrace rights) from ``os.path.realpath``: it escaped the connect
    or the view's open raw. The readlink of one real link is made to fail so: where
    the kernel refuses it depends on the machine's rights."""
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "target", target_is_directory=True)
    readlink = os.readlink

    def refused(path, *args, **kwargs):
        if os.fspath(path) == str(link):
            raise PermissionError(13, "Permission denied", str(path))
        return readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", refused)
    if where == "log":
        with pytest.raises(lm.ConfigError, match=r"cannot resolve a local log's path .*Permission"):
            lm.connect(f"local://{link}/log")
    else:
        async with lm.connect(f"local://{tmp_path}/log", view=link / "view") as laser:
            with pytest.raises(lm.ConfigError, match=r"cannot resolve a view path .*Permission"):
                await laser.memory("notes").recall()
    assert not (tmp_path / "target").exists()


@pytest.mark.parametrize("log", ["local://./laser-data", None, object()])
def test_a_connection_over_no_log_is_refused_when_made(tmp_path, log):
    """A URL given where a Log goes (a natural first try) raised a raw AttributeError
    only at start; it is a ConfigError that points at connect(url) when made."""
    with pytest.raises(lm.ConfigError, match="made over a Log") as caught:
        lm.Laser(log)
    assert ("connect(url)" in str(caught.value)) == isinstance(log, str)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: LocalLogConfig(map_size=-1), "map_size is a positive int"),
        # Past what LMDB takes: a raw OverflowError at the first open, before.
        (lambda: LocalLogConfig(map_size=1 << 64), "map_size is a whole number .* 2\\*\\*64-1"),
        (lambda: LocalLogConfig(max_group_records=0), "max_group_records"),
        (lambda: LocalLogConfig(max_record_bytes="1"), "max_record_bytes"),
        (lambda: LocalLogConfig(poll_interval_s=0), "poll_interval_s is .* above 0"),
        (lambda: LocalLogConfig(poll_interval_s=float("nan")), "poll_interval_s"),
        (lambda: LocalLogConfig(sync="no"), "sync is True or False"),
        (lambda: LocalLogConfig(create=1), "create"),
        (lambda: LocalLogConfig(clock=object()), "now_ms"),
        (lambda: LocalLog(5), "path"),
        # A NUL byte in a path was a raw ValueError from the OS; an empty one was the
        # working directory.
        (lambda: LocalLog("/tmp/a\x00b"), "local log's path .* NUL byte"),
        (lambda: LocalLog(""), "local log's path is empty"),
        (lambda: connect_log("local:///tmp/a\x00b"), "NUL byte"),
        # LMDB opens UTF-8 paths only: a raw UnicodeEncodeError at the first write before.
        (lambda: LocalLog("/tmp/a\udcffb"), "local log's path .* no UTF-8"),
        (lambda: LocalLog(b"/tmp/a\xffb"), "local log's path .* no UTF-8"),
        (lambda: connect_log("local:///tmp/a\udcffb"), "no UTF-8"),
        (lambda: LocalLog("/tmp/x", {"sync": False}), "LocalLogConfig"),
        (lambda: KafkaLog("127.0.0.1:9092"), "takes a KafkaLogConfig"),
        (lambda: KafkaLog(None), "takes a KafkaLogConfig"),
        # Each was taken, then a raw TypeError at the first write (or, for partitions,
        # an InvalidInput at the first topic the log had to make).
        (lambda: lm.MemoryConfig(max_body_bytes=None), "MemoryConfig.max_body_bytes is a positive"),
        (lambda: lm.MemoryConfig(max_record_bytes="1"), "MemoryConfig.max_record_bytes"),
        (lambda: lm.MemoryConfig(default_partitions=0), "MemoryConfig.default_partitions"),
        (lambda: lm.MemoryConfig(default_partitions=10_001), "default_partitions is at most 10000"),
        # A mapping of its settings, a plausible slip, was a raw AttributeError at a search.
        (lambda: lm.MemoryConfig(approximate={"from_vectors": 50}), "approximate is an Approx"),
        (lambda: KafkaLogConfig(5), "bootstrap_servers"),
        # Each was taken, and read by aiokafka as port 9092 of some host.
        (lambda: KafkaLogConfig("garbage"), "bootstrap_servers: 'garbage' is not host:port"),
        (lambda: KafkaLogConfig("h:-5"), "bootstrap_servers: 'h:-5' is not host:port"),
        (lambda: KafkaLogConfig("h:1,,h:2"), "bootstrap_servers: an entry is empty"),
        (lambda: KafkaLogConfig("h:1," * 101), "bootstrap_servers: 102 servers"),
        (lambda: LocalLog(" "), "local log's path ' ' starts or ends with white space"),
        (lambda: KafkaLogConfig("h:1", client_id=""), "client_id"),
        (lambda: KafkaLogConfig("h:1", linger_s=-0.1), "linger_s"),
        (lambda: KafkaLogConfig("h:1", request_timeout_s=0), "request_timeout_s"),
        # Past Kafka's int32 milliseconds and int16 replicas: raw struct errors from
        # aiokafka at the first request before.
        (lambda: KafkaLogConfig("h:1", request_timeout_s=2.0**31), "at most 2147483.647 seconds"),
        (lambda: KafkaLogConfig("h:1", replication_factor=2**15), "up to 32767"),
        # As long as a request's deadline or an append's: every fetch, or every lone
        # append, failed (and stop waited out the linger).
        (lambda: KafkaLogConfig("h:1", fetch_wait_s=30.0), "fetch_wait_s .* shorter than"),
        (lambda: KafkaLogConfig("h:1", linger_s=100.0), "linger_s .* shorter than"),
        (
            lambda: KafkaLogConfig("h:1", linger_s=2.0, write_timeout_s=1.0),
            "linger_s .* shorter than write_timeout_s",
        ),
        (lambda: KafkaLogConfig("h:1", replication_factor=0), "replication_factor"),
        (lambda: KafkaLogConfig("h:1", max_batch_bytes=0.5), "max_batch_bytes"),
        # Past Kafka's int32 sizes: a topic's creation failed at the broker, at the first
        # write; a request too small for a record was an InvalidRecord from KafkaLog.
        (lambda: KafkaLogConfig("h:1", max_batch_bytes=2**31), "max_batch_bytes is at most"),
        (lambda: KafkaLogConfig("h:1", max_record_bytes=2**64), "max_record_bytes is at most"),
        (lambda: KafkaLogConfig("h:1", max_request_bytes=2**31), "max_request_bytes is at most"),
        (
            lambda: KafkaLogConfig("h:1", max_record_bytes=8 << 20),
            "max_request_bytes .* must exceed max_record_bytes",
        ),
        (lambda: KafkaLogConfig("h:1", extra_topic_configs={"a": 1}), "extra_topic_configs"),
        (
            lambda: KafkaLogConfig("h:1", extra_topic_configs={"cleanup.policy": "compact"}),
            "may not set cleanup.policy",
        ),
        (
            lambda: KafkaLogConfig(
                "h:1", extra_topic_configs={"message.timestamp.type": "CreateTime"}
            ),
            "may not set message.timestamp.type",
        ),
        (
            lambda: KafkaLogConfig("h:1", extra_topic_configs={"retention.bytes": "1000"}),
            "may not set retention.bytes",
        ),
    ],
)
def test_log_settings_of_the_wrong_kind_are_config_errors(make, says):
    with pytest.raises(lm.ConfigError, match=says):
        make()


class _FixedClock:
    def __init__(self, reading: object) -> None:
        self.reading = reading

    def now_ms(self) -> object:
        if isinstance(self.reading, Exception):
            raise self.reading
        return self.reading


@pytest.mark.parametrize(
    "reading",
    # A float (time.time() * 1000, the likeliest mistake), other types, and moments no
    # append time can hold: each was a raw TypeError, AttributeError or OverflowError,
    # 2**63 only when a fold met the record it stamped.
    [1.7e12, float("nan"), "1700000000000", None, True, -1, 1 << 63, 1 << 64, OSError("no")],
)
async def test_a_clock_that_gives_no_moment_is_refused_and_nothing_is_written(tmp_path, reading):
    clock = _FixedClock(1_700_000_000_000)
    async with lm.connect(f"local://{tmp_path}/log", stream="s", clock=clock) as laser:
        memory = laser.memory("notes")
        await memory.remember("before")
        clock.reading = reading
        for write in (
            lambda: memory.remember("a"),
            lambda: memory.remember_many(["b", "c"]),
            lambda: memory.forget(MemoryId.new()),
        ):
            with pytest.raises(lm.ConfigError, match=r"(gave|raised) .* from now_ms\(\)"):
                await write()
        clock.reading = 1_700_000_000_001
        assert [i.text for i in await memory.recall()] == ["before"]
        assert sum((await laser.log.end_offsets(memory.topic)).values()) == 1


async def test_a_connection_used_before_it_starts_says_how_to_start_it(tmp_path):
    # The message told a connection's user to start a log they never held.
    laser = lm.connect(f"local://{tmp_path / 'log'}")
    with pytest.raises(lm.LogClosed, match=r"async with laser_memory\.connect"):
        await laser.memory("notes").remember("too early")
    with pytest.raises(lm.LogClosed, match=r"await laser\.start\(\)"):
        await laser.memory("notes").recall(folded=True)


@pytest.mark.parametrize(
    "config",
    [
        lambda: LocalLogConfig(),
        lambda: KafkaLogConfig("h:1"),
        lambda: lm.MemoryConfig(),
        lambda: FolderConfig(),
        lambda: ServerConfig(),
        lambda: lm.ApproximateSearch(),
    ],
)
def test_a_config_cannot_change_once_checked(config):
    # Its fields are checked when it is made: a field set afterwards would skip the check
    # (and a log or handle holding the config would change under its feet).
    made = config()
    name = dataclasses.fields(made)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, name, -1)


def test_the_logs_defaults_are_the_readmes():
    # 64 GiB of map (sparse: a larger map costs nothing until used) and a 30 s deadline
    # for an append on either log; durable (see test_log_local).
    assert LocalLogConfig().map_size == 64 << 30
    assert LocalLogConfig().write_timeout_s == KafkaLogConfig("h:1").write_timeout_s == 30.0


async def test_a_view_path_reads_a_leading_tilde_as_home_as_a_local_url_does(tmp_path, monkeypatch):
    # `--view ~/view` left alone by the shell (from $LASER_VIEW, say) made a folder named
    # `~` in the working directory, while `local://~/log` meant the home folder's.
    from folders.service import ViewFolder

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    async with lm.connect("local://~/log") as laser:
        await laser.memory("notes").remember("at home")
        await ViewFolder(laser.log, laser.memory_topic_name, "~/view").run(until_caught_up=True)
    assert sorted(os.listdir(tmp_path / "home")) == ["log", "view"]
    assert not (tmp_path / "~").exists()
    async with lm.connect("local://~/log", view="~/view") as reader:
        assert [i.text for i in await reader.memory("notes").recall()] == ["at home"]


def test_kafka_settings_take_kafkas_own_limits_and_nothing_past_them():
    # Each limit is Kafka's (int32 milliseconds and bytes, int16 replicas, a batch's
    # overhead beside a record): the value at the limit is taken, the next one refused,
    # so a topic or request the broker would refuse is caught when the config is made.
    from laser_memory.log.kafka import _BATCH_OVERHEAD, _INT32_MAX

    largest = _INT32_MAX - _BATCH_OVERHEAD
    edge = KafkaLogConfig(
        "h:1",
        request_timeout_s=_INT32_MAX / 1000,
        max_batch_bytes=largest,
        max_record_bytes=largest,
        max_request_bytes=_INT32_MAX,
        replication_factor=32767,
    )
    assert (edge.max_batch_bytes, edge.max_record_bytes) == (largest, largest)
    assert KafkaLogConfig("h:1", replication_factor=1).replication_factor == 1
    assert KafkaLogConfig("h:1", replication_factor=None).replication_factor is None
    # A request as large as one record and its batch's overhead carries it.
    snug = KafkaLogConfig("h:1", max_record_bytes=1 << 20, max_request_bytes=(1 << 20) + 16384)
    assert snug.max_request_bytes == (1 << 20) + _BATCH_OVERHEAD
    for make, says in (
        (lambda: KafkaLogConfig("h:1", request_timeout_s=(_INT32_MAX + 1) / 1000), "at most"),
        (lambda: KafkaLogConfig("h:1", max_batch_bytes=largest + 1), "at most"),
        (lambda: KafkaLogConfig("h:1", max_record_bytes=largest + 1), "at most"),
        (
            lambda: KafkaLogConfig(
                "h:1", max_record_bytes=1 << 20, max_request_bytes=(1 << 20) + 16383
            ),
            "must exceed",
        ),
        (lambda: KafkaLogConfig("h:1", linger_s=1.0, write_timeout_s=1.0), "shorter than"),
        # A bool is an int to Python; neither it, nor a str or float of a count, is taken.
        (lambda: KafkaLogConfig("h:1", replication_factor=True), "replication_factor"),
        (lambda: KafkaLogConfig("h:1", replication_factor="3"), "replication_factor"),
        (lambda: KafkaLogConfig("h:1", replication_factor=3.0), "replication_factor"),
        (lambda: KafkaLogConfig("h:1", replication_factor=32768), "up to 32767"),
        (lambda: KafkaLogConfig("h:1", extra_topic_configs=[("a", "b")]), "maps str names"),
        (lambda: KafkaLogConfig("h:1", extra_topic_configs={1: "b"}), "maps str names"),
    ):
        with pytest.raises(lm.ConfigError, match=says):
            make()


def test_config_fields_take_their_boundaries_and_none_only_where_it_means_no_limit():
    # The edges each kind of field takes: 1 for a count, 0 for seconds that may be 0,
    # None only where it means "no limit"; each could move unseen.
    assert LocalLogConfig(max_group_records=1).max_group_records == 1
    assert LocalLogConfig(write_timeout_s=None).write_timeout_s is None
    assert KafkaLogConfig("h:1", linger_s=0, fetch_wait_s=0).linger_s == 0
    assert KafkaLogConfig("h:1", write_timeout_s=None).write_timeout_s is None
    assert lm.MemoryConfig(default_partitions=10_000).default_partitions == 10_000
    assert lm.MemoryConfig(approximate=None).approximate is None
    for make in (
        # None is "no limit" only where it says so; below it, each needs a deadline.
        lambda: LocalLogConfig(write_timeout_s=0),
        lambda: LocalLogConfig(write_timeout_s=-1.0),
        lambda: KafkaLogConfig("h:1", write_timeout_s=-1.0),
        lambda: LocalLogConfig(poll_interval_s=None),
        lambda: KafkaLogConfig("h:1", linger_s=None),
        lambda: KafkaLogConfig("h:1", request_timeout_s=None),
        lambda: LocalLogConfig(max_group_records=None),
        lambda: KafkaLogConfig("h:1", linger_s=-0.001),
    ):
        with pytest.raises(lm.ConfigError):
            make()


class _SlowEmbedder(lm.WordHashEmbedder):
    """The word-hash embedder, 0.2 s a call (on the thread embeddings run on); keeps the
    texts it embedded."""

    def __init__(self) -> None:
        super().__init__()
        self.embedded: list[str] = []

    def embed_many(self, texts):
        time.sleep(0.2)
        self.embedded.extend(texts)
        return super().embed_many(texts)


async def test_a_stop_waits_for_writes_still_embedding_or_asking_the_governor(tmp_path):
    # Begun before the stop, they ended with LogClosed and nothing written: the stop
    # drained only the appends, and these had not reached theirs. The topic is made by
    # the first of them (a write whose append finds no topic makes it and writes again,
    # after the drain had let the stop go on).
    slow = _SlowEmbedder()

    async def slow_governor(write: lm.ProposedWrite) -> bool:
        await asyncio.sleep(0.2)
        return True

    url = f"local://{tmp_path}/log"
    laser = lm.connect(url)
    await laser.start()
    embedding = laser.memory("notes", embedder=slow)
    governed = laser.memory("notes", governor=slow_governor)
    writes = [asyncio.create_task(embedding.remember(f"embedded {i}")) for i in range(4)]
    writes += [asyncio.create_task(governed.remember(f"governed {i}")) for i in range(4)]
    await asyncio.sleep(0.05)  # each is embedding its body or waiting for the governor
    await asyncio.wait_for(asyncio.gather(laser.stop(), laser.stop()), 10)  # both end
    assert all(task.done() for task in writes)
    ids = [task.result() for task in writes]
    # Begun after the stop: refused before the embedder is asked.
    with pytest.raises(lm.LogClosed, match="connection was stopped"):
        await embedding.remember("too late")
    assert "too late" not in slow.embedded
    with pytest.raises(lm.LogClosed):
        await governed.remember("too late")
    async with lm.connect(url) as again:
        kept = await again.memory("notes").recall(folded=True, limit=100)
    assert sorted(item.id for item in kept) == sorted(ids)


async def test_a_stop_waits_for_plain_writes_and_messages_making_their_topic(tmp_path):
    # On a fresh embedded log a plain remember's append (and a message's) finds no topic:
    # the writer makes it and writes again. The stop did not count them as under way and
    # closed the log meanwhile: LogClosed, nothing written.
    for turns in range(1, 5):  # how far each write has gone when the stop begins
        url = f"local://{tmp_path}/log{turns}"
        laser = lm.connect(url)
        await laser.start()
        writes = [
            asyncio.create_task(laser.memory("notes").remember("plain")),
            asyncio.create_task(laser.send_to_agent("triage", "hello")),
        ]
        for _ in range(turns):
            await asyncio.sleep(0)
        await asyncio.wait_for(laser.stop(), 10)
        mid, sent = [await write for write in writes]
        async with lm.connect(url) as again:
            [kept] = await again.memory("notes").recall(folded=True)
            ends = await again.log.end_offsets(sent.topic)
        assert kept.id == mid and sum(ends.values()) == 1, turns


async def test_a_stop_ends_while_tasks_keep_writing(any_log_url: str, stream_name: str):
    # The stop waited until no write was under way, and a task writing in a loop always
    # had one: the stop never returned. Writes begun after it are LogClosed; every write
    # acknowledged before it is in the log.
    async def allow(write: lm.ProposedWrite) -> bool:
        return True

    url = any_log_url
    laser = lm.connect(url, stream=stream_name)
    await laser.start()
    await laser.bootstrap(partitions=2)
    handles = {
        "plain": laser.memory("notes"),
        "governed": laser.memory("notes", governor=allow),
        "embedded": laser.memory("notes", embedder=lm.WordHashEmbedder()),
    }
    acknowledged: list[lm.MemoryId] = []

    async def keep_writing(memory: lm.MemoryHandle, many: bool) -> None:
        while True:
            if many:
                acknowledged.extend(await memory.remember_many(["one", "two"]))
            else:
                acknowledged.append(await memory.remember("one"))

    writers = [
        asyncio.create_task(keep_writing(memory, many))
        for memory in handles.values()
        for many in (False, True)
    ]
    await asyncio.sleep(0.2)
    await asyncio.wait_for(laser.stop(), 10)
    for writer in writers:
        with pytest.raises(lm.LogClosed, match="connection was stopped"):
            await writer
    async with lm.connect(url, stream=stream_name) as again:
        kept = await again.memory("notes").recall(folded=True, limit=1000)
        ends = await again.log.end_offsets(again.memory_topic_name)
    assert sum(ends.values()) == len(acknowledged) > 0
    assert {item.id for item in kept} <= set(acknowledged)


async def test_a_stop_wakes_when_its_one_plain_write_is_appended(tmp_path):
    """A plain remember counts as one write under way (the others nest two: a
    connection's and their writer's), so only its end can wake the stop: a stop that
    woke on a count above 0 passed every test with more than one."""
    url = f"local://{tmp_path}/log"
    laser = lm.connect(url)
    await laser.start()
    await laser.bootstrap(partitions=1)
    notes = laser.memory("notes")
    await notes.remember("first")
    write = asyncio.create_task(notes.remember("alone"))
    await asyncio.sleep(0)  # its append is waiting for the commit
    assert not write.done()
    await asyncio.wait_for(laser.stop(), 10)
    assert write.done()
    async with lm.connect(url) as again:
        kept = await again.memory("notes").recall(folded=True)
    assert [item.text for item in kept] == ["alone", "first"]
    assert kept[0].id == write.result()


async def test_a_stop_waits_for_a_lone_write_still_embedding(tmp_path):
    url = f"local://{tmp_path}/log"
    async with lm.connect(url) as laser:
        await laser.bootstrap(partitions=1)
        notes = laser.memory("notes", embedder=_SlowEmbedder())
        write = asyncio.create_task(notes.remember("alone"))
        await asyncio.sleep(0.05)
        await asyncio.wait_for(laser.stop(), 10)  # woken when its one write is done
        assert write.done() and write.result().receipt is not None


async def test_a_connection_and_a_snapshot_say_what_they_are(tmp_path, monkeypatch):
    """In a REPL or a log line: where a connection writes and what a snapshot holds, not
    an object's address."""
    monkeypatch.delenv("LASER_VIEW", raising=False)
    laser = lm.connect(f"local://{tmp_path}", stream="prod", tenant="acme", view="v")
    assert repr(laser) == f"Laser(url='local://{tmp_path}', stream='prod', view='v', tenant='acme')"
    assert repr(lm.connect("kafka://h:1")) == "Laser(url='kafka://h:1', stream=None)"
    async with lm.connect(f"local://{tmp_path}") as laser:
        mid = await laser.memory("notes").remember("x")
        snapshot = await laser.memory("notes").as_of(mid)
    assert repr(snapshot) == (
        f"MemorySnapshot(namespace='notes', as_of_ms={mid.receipt.append_time_ms}, "
        f"positions={{{mid.receipt.partition}: 1}})"
    )
    log = f"LocalLog(url='local://{tmp_path}')"
    assert repr(laser.log) == log
    assert repr(lm.connect("kafka://h:1,h:2").log) == "KafkaLog(url='kafka://h:1,h:2')"
    folder = ViewFolder(laser.log, "agent.memory", tmp_path / "view")
    where = tmp_path / "view"
    assert repr(folder) == f"ViewFolder(topic='agent.memory', view='{where}', log={log})"
    view = MemoryView.open(str(tmp_path / "view"))
    assert repr(view) == f"MemoryView('{tmp_path / 'view'}')"
    view.close()
    assert repr(view) == f"MemoryView('{tmp_path / 'view'}', closed)"
