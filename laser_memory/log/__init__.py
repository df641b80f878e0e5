"""The log port and its two logs, chosen by URL.

>>> log = connect("local://./laser-data")                  # doctest: +SKIP
>>> log = connect("kafka://127.0.0.1:9092,127.0.0.1:9093")  # doctest: +SKIP
"""

from __future__ import annotations

import os

from ..clock import SYSTEM_CLOCK, Clock, validate_clock
from ..errors import ConfigError, InvalidUrl, shown
from ..lmdb_env import folder_path
from .kafka import KafkaLog, KafkaLogConfig, bootstrap_problem
from .local import LocalLog, LocalLogConfig
from .partitioner import partition_for
from .port import (
    Appended,
    Log,
    LogRecord,
    OutgoingRecord,
    Position,
    TimeIndexedLog,
    TopicInfo,
)

__all__ = [
    "DEFAULT_URL",
    "Appended",
    "KafkaLog",
    "KafkaLogConfig",
    "LocalLog",
    "LocalLogConfig",
    "Log",
    "LogRecord",
    "OutgoingRecord",
    "Position",
    "TimeIndexedLog",
    "TopicInfo",
    "connect_log",
    "parse_url",
    "partition_for",
]

DEFAULT_URL = "local://./laser-data"


def parse_url(url: str) -> tuple[str, str]:
    """Split a log URL into ("local", path) or ("kafka", "host:port,host:port")."""
    if url == "":
        raise InvalidUrl(
            "the log URL is empty; use local://PATH or kafka://host:port[,host:port] "
            "(or leave it out for $LASER_URL, else local://./laser-data)"
        )
    if not isinstance(url, str) or "://" not in url:
        raise InvalidUrl(
            f"{shown(url)} is not a log URL; use local://PATH or kafka://host:port[,host:port]"
        )
    scheme, _, rest = url.partition("://")
    if scheme == "local":
        if not rest:
            raise InvalidUrl("local:// needs a folder path, for example local://./laser-data")
        if "?" in rest or "#" in rest:
            # Read as a URL's query, ?sync=off made a folder named "data?sync=off" and
            # set nothing; a folder's name with either is far rarer than that mistake.
            raise InvalidUrl(
                f"{shown(url)} has a query or fragment ('?' or '#'): a local:// URL is a "
                "folder path only; settings go to connect() (config=MemoryConfig(...))"
            )
        try:
            # The checks LocalLog makes of any path, made here so a bad one is a URL's
            # error (InvalidUrl) wherever a URL is parsed.
            folder_path(rest, "the path of a local:// URL")
        except ConfigError as exc:
            raise InvalidUrl(str(exc)) from None
        return "local", os.path.expanduser(rest)
    if scheme == "kafka":
        problem = bootstrap_problem(rest)
        if problem is not None:
            raise InvalidUrl(
                f"{problem} in {shown(url)}; use kafka://host:port[,host:port], for example "
                "kafka://127.0.0.1:9092"
            )
        return "kafka", ",".join(s.strip() for s in rest.split(","))
    raise InvalidUrl(
        f"unknown log scheme {shown(scheme)} in {shown(url)}; use local://PATH or kafka://host:port"
    )


def connect_log(url: str = DEFAULT_URL, *, create: bool = True, clock: Clock | None = None) -> Log:
    """Make the log a URL names; start it with ``await log.start()`` or ``async with``.
    With ``create=False`` an embedded log that does not exist yet is refused on start
    (`LogUnavailable`) instead of created: a read never creates anything. ``clock``
    stamps the embedded log's append times (Kafka's are the broker's)."""
    if not isinstance(create, bool):
        # create="no" must not create a log.
        raise ConfigError(f"create is True or False, got a {type(create).__name__}")
    kind, where = parse_url(url)
    if kind == "local":
        return LocalLog(
            where,
            LocalLogConfig(
                create=create, clock=validate_clock(clock) if clock is not None else SYSTEM_CLOCK
            ),
        )
    return KafkaLog(KafkaLogConfig(bootstrap_servers=where))
