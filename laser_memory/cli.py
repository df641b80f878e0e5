"""The ``laser-memory`` command line.

Every command takes ``--url`` (default ``$LASER_URL`` or ``local://./laser-data``),
``--stream``, ``--namespace`` (default ``notes``) and ``--json``.

    laser-memory remember "the reporter prefers email" --conversation support-42
    laser-memory recall --conversation support-42 --json
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import gc
import json
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import click
import msgspec

from folders.index_snapshots import IndexSnapshots, Read
from folders.replay import LoggedRecord, replay_stream, to_millis
from folders.service import FolderConfig, ViewFolder
from folders.state import ItemFilter, history_entry
from folders.view import MemoryView, view_path_of

from . import connect
from .errors import BodyTooLarge, ConfigError, LaserError, UnknownTopic, printable, shown
from .ids import MemoryId, validate_name
from .items import MemoryItem, NamedItem, body_fields
from .kinds import MemoryKind
from .log import DEFAULT_URL
from .memory import MemoryConfig, MemoryHandle, Receipt
from .named import load_json
from .recall import MAX_LIMIT, STRATEGIES, to_context_block
from .records import Embedded, Feedback, Forget, Remember, Retrieved, Superseded
from .vector_clusters import ApproximateSearch


def _run(coro_fn: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """Run an async command; a LaserError becomes a clean message and exit code 1."""

    @functools.wraps(coro_fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return asyncio.run(coro_fn(*args, **kwargs))
        except LaserError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None

    return wrapper


@contextlib.contextmanager
def _startup_frozen() -> Iterator[None]:
    """While a long fold runs, leave what the process made to start (modules, classes,
    the connection: tens of thousands of objects) out of the garbage collector's full
    collections, which walked them all each time: a tenth of a fold of many owners.
    Unfrozen after, so a command run inside another program (a test's `CliRunner`)
    leaves the collector as it found it; one that froze objects of its own is left
    to manage them (an unfreeze would undo its freeze).

    Measured on 100,000-record logs, `rebuild` alternating with and without: a
    conversation per item 2.45 -> 2.29 s, 10,000 tenants 2.24 -> 2.10 s (medians of
    six, start-up included); a one-conversation log's fold hardly collects at all."""
    if gc.get_freeze_count():
        yield
        return
    gc.collect()  # garbage made so far is collected, not kept for good
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def _until_stopped(work: Awaitable[Any]) -> tuple[Any, str | None]:
    """Run a long-running command's work until it ends or SIGTERM or SIGINT stops it:
    (its result, None), or (None, the signal's name). A stop cancels the work, which
    finishes what it must (a folder its transaction under way) before it ends, so a
    service manager's stop is a clean exit (status 0), not a kill."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    stopped_by: list[str] = []

    def stop(sig: signal.Signals) -> None:
        if not stopped_by:  # one stop is enough: the work is already ending
            stopped_by.append(sig.name)
            task.cancel()

    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop, sig)
        except (ValueError, RuntimeError, NotImplementedError):
            continue  # not the main thread, or no signals here: the default stays
        installed.append(sig)
    try:
        return await task, None
    except asyncio.CancelledError:
        if not stopped_by:
            raise
        return None, stopped_by[0]
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


#: ``--view``, for the commands that read the present, which a managed view holds.
_view_to_read = click.option(
    "--view",
    envvar="LASER_VIEW",
    default=None,
    help="Managed view folder to read (default $LASER_VIEW; none: fold the log).",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_namespace_option = click.option(
    "--namespace", "-n", default="notes", show_default=True, help="Memory namespace."
)


#: ``--as-of`` of the reads that answer for a past moment (recall, fetch, named).
_as_of_option = click.option(
    "--as-of",
    "as_of",
    default=None,
    help="As it stood at this moment (ISO time, UTC unless it names a zone, or epoch "
    "milliseconds): folded from the log up to it, never from a view.",
)


def _connection_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The log's options and ``--view``: for the commands that read the present."""
    return _log_options(_view_to_read(fn))


def _log_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The log's options, for the commands that write, or read the log itself (replay).
    Each command takes only the options it reads: a ``--view`` (or ``--namespace``, or
    ``--json``) taken and never read let a caller believe it was used."""
    return _url_options(_namespace_option(_json_option(fn)))


def _url_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--stream", default=None, help="Default stream (topic prefix).")(fn)
    fn = click.option(
        "--url",
        envvar="LASER_URL",
        default=DEFAULT_URL,
        show_default=True,
        help="local://PATH or kafka://host:port[,host:port].",
    )(fn)
    return fn


def _scope_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for name in ("application", "user", "agent", "conversation"):
        fn = click.option(f"--{name}", default=None, help=f"The {name} in scope.")(fn)
    fn = click.option("--tenant", default="", help="Tenant (a hard boundary; default '').")(fn)
    return fn


EMBEDDERS = ("word-hash", "minilm")


def _embedder_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--embedder",
        envvar="LASER_EMBEDDER",
        default=None,
        type=click.Choice(EMBEDDERS),
        help="Embed bodies and queries: minilm (the local all-MiniLM-L6-v2, `make model`) "
        "or word-hash (tests); default $LASER_EMBEDDER, else none.",
    )(fn)


def _make_embedder(name: str | None):
    if name is None:
        return None
    if name == "word-hash":
        from .embedding import WordHashEmbedder

        return WordHashEmbedder()
    from .minilm import MiniLMEmbedder

    return MiniLMEmbedder()


class _Session:
    """A connection and a handle for one command. Reads pass ``read=True``: they never
    create a log (a mistyped --url says there is none)."""

    def __init__(
        self,
        url: str,
        stream: str | None,
        namespace: str,
        view: str | None = None,
        *,
        read: bool = False,
        embedder: str | None = None,
        tenant: str | None = None,
    ):
        self.laser = connect(
            url, stream=stream, view=view, create=not read, embedder=_make_embedder(embedder)
        )
        self.namespace = namespace
        self.tenant = tenant

    async def __aenter__(self) -> MemoryHandle:
        await self.laser.start()
        return self.laser.memory(self.namespace, tenant=self.tenant)

    async def __aexit__(self, *exc: object) -> None:
        await self.laser.stop()


def _given(value: str) -> str | bytes:
    """An argument as given, or for ``-`` what standard input holds: its text, or its
    bytes when they are no UTF-8 (a file of any kind piped in), less one trailing
    newline, as a shell's ``$(...)`` drops it (``echo`` adds one)."""
    if value != "-":
        return value
    most = MemoryConfig().max_body_bytes
    with click.open_file("-", "rb") as stdin:
        # No more than a body can hold (and a newline): read whole, 10 GB piped in by
        # mistake would be 10 GB of memory before the refusal.
        data = stdin.read(most + 3)
    if len(data) > most + 2:
        raise BodyTooLarge(
            f"standard input holds more than {most} bytes, the most a body takes; store "
            "large content elsewhere and remember a reference"
        )
    data = data[:-2] if data.endswith(b"\r\n") else data[:-1] if data.endswith(b"\n") else data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _named_json(item: NamedItem) -> dict[str, Any]:
    """A named item for ``--json``: its body as the JSON it holds, else as text (with its
    exact bytes in ``body_base64`` when they are no UTF-8)."""
    try:
        body: dict[str, Any] = {"body": item.json()}
    except LaserError:
        body = body_fields(item.body)
    return {"key": item.key, **body, "version": item.version}


def _receipt_json(receipt: Receipt) -> dict[str, Any]:
    return {
        "topic": receipt.topic,
        "partition": receipt.partition,
        "offset": receipt.offset,
        "append_time_ms": receipt.append_time_ms,
    }


def _print_write(as_json: bool, receipt: Receipt, **extra: Any) -> None:
    if as_json:
        click.echo(json.dumps({**extra, "receipt": _receipt_json(receipt)}))
    else:
        label = " ".join(str(v) for v in extra.values())
        where = f"{receipt.topic}/{receipt.partition}@{receipt.offset}"
        click.echo(f"{label} {where}".strip())


# Listings (recall, named, audit, replay) print each body on one line, its control
# characters escaped (`printable`): printed as it was, a body's newline forged lines of
# an audit (a remember that read as a forget after it) and its escape sequences drove
# the reader's terminal. ``--json`` gives every body exactly.
def _print_items(items: list[MemoryItem], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([item.to_json() for item in items], ensure_ascii=False))
        return
    if not items:
        click.echo("(nothing recalled)")
    for item in items:
        conversation = printable(item.conversation or "-")
        click.echo(
            f"{item.id}  {item.kind.value:<9} {conversation:<14} w={item.weight:<6g} "
            f"{printable(item.text)}"
        )


@click.group()
@click.version_option(package_name="laser-memory")
def main() -> None:
    """Long-term memory for AI agents on an append-only log."""


@main.command()
@_url_options
@_json_option
@click.option("--partitions", default=4, show_default=True, type=int)
@click.option(
    "--retention", default=None, type=float, help="Seconds to keep records (default: forever)."
)
@_run
async def bootstrap(url, stream, as_json, partitions, retention) -> None:
    """Create the stream's agent topics (idempotent)."""
    async with connect(url, stream=stream) as laser:
        infos = await laser.bootstrap(partitions=partitions, retention=retention)
    for info in infos:
        if as_json:
            click.echo(json.dumps({"topic": info.name, "partitions": info.partitions}))
        else:
            click.echo(f"{info.name}: {info.partitions} partitions")


@main.command()
@click.argument("text")
@_log_options
@_scope_options
@click.option(
    "--kind", default="fact", show_default=True, type=click.Choice([k.value for k in MemoryKind])
)
@click.option("--durable", is_flag=True, help="Durable lifetime instead of session.")
@click.option("--dedup", is_flag=True, help="Use the content id: the same fact is stored once.")
@click.option("--ttl", default=None, help="Expire after this age: 90d, 12h, 30m, 45s.")
@_embedder_option
@_run
async def remember(
    text,
    url,
    stream,
    namespace,
    as_json,
    tenant,
    conversation,
    agent,
    user,
    application,
    kind,
    durable,
    dedup,
    ttl,
    embedder,
) -> None:
    """Remember TEXT (- reads it from standard input); prints the new item's id."""
    seconds = _age(ttl) if ttl is not None else None
    body = _given(text)
    async with _Session(url, stream, namespace, embedder=embedder) as memory:
        mid = await memory.remember(
            body,
            kind=kind,
            conversation=conversation,
            agent=agent,
            user=user,
            application=application,
            tenant=tenant,
            durable=durable,
            dedup=dedup,
            ttl=seconds,
        )
    _print_write(as_json, mid.receipt, id=str(mid))


@main.command()
@click.argument("query", required=False)
@_connection_options
@_scope_options
@click.option("--kind", default=None, type=click.Choice([k.value for k in MemoryKind]))
@click.option(
    "--text", default=None, help="Rank by this text (keyword, meaning or both); as QUERY."
)
@click.option("--strategy", default="auto", show_default=True, type=click.Choice(STRATEGIES))
@click.option("--limit", default=50, show_default=True, type=click.IntRange(0, MAX_LIMIT))
@_as_of_option
@click.option(
    "--block",
    is_flag=True,
    help="Print the items as one prompt block ('- [kind] body' lines), as context() does.",
)
@click.option(
    "--token-budget",
    type=click.IntRange(min=0),
    default=None,
    help="With --block: keep lines within about this many tokens (UTF-8 bytes / 4).",
)
@_embedder_option
@_run
async def recall(
    query,
    url,
    stream,
    namespace,
    as_json,
    view,
    tenant,
    conversation,
    agent,
    user,
    application,
    kind,
    text,
    strategy,
    limit,
    as_of,
    block,
    token_budget,
    embedder,
) -> None:
    """Recall items in scope, ranked by QUERY (or --text) when given: from the managed view
    with --view, else folded from the log; with --as-of, as they stood at that moment."""
    if token_budget is not None and not block:
        raise click.UsageError("--token-budget budgets a --block; without one it cuts nothing")
    if query is not None:
        if text is not None and text != query:
            # Two texts: which one ranks is a guess, so neither is taken.
            raise click.UsageError("give the text to rank by once: as QUERY or as --text")
        text = query
    moment = _moment(as_of)
    arguments = {
        "conversation": conversation,
        "agent": agent,
        "user": user,
        "application": application,
        "tenant": tenant,
        "kind": kind,
        "text": text,
        "strategy": strategy,
        "limit": limit,
    }
    if moment is None:
        async with _Session(url, stream, namespace, view, read=True, embedder=embedder) as memory:
            items = await memory.recall(**arguments)
        _print_recalled(items, as_json, block, token_budget)
        return
    # A view holds only the present: the past is folded from the log (as_of), of the
    # tenant asked for alone (a handle bound to it passes over the others' records).
    async with _Session(
        url, stream, namespace, None, read=True, embedder=embedder, tenant=tenant
    ) as memory:
        snapshot = await memory.as_of(moment)
        items = await snapshot.recall(**arguments)
    if not as_json and not block:
        # What an auditor cites: the moment, and the log up to where it was read (not
        # in a block, which is text for a prompt).
        positions = ", ".join(f"{p}@{o}" for p, o in sorted(snapshot.positions.items()))
        click.echo(
            f"as of {_format_ms(moment)} (read up to partition@offset, not included: "
            f"{positions or 'nothing'})"
        )
    _print_recalled(items, as_json, block, token_budget)


def _print_recalled(items, as_json: bool, block: bool, token_budget: int | None) -> None:
    if not block:
        _print_items(items, as_json)
        return
    # As recall(block=True) makes it, from the same items; with --json, as a JSON string.
    text = to_context_block(items, token_budget)
    click.echo(json.dumps(text, ensure_ascii=False) if as_json else text)


# ignore_unknown_options: a negative WEIGHT such as -1.5 is an argument, not an option.
@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("id")
@click.argument("weight", type=float)
@_log_options
@click.option("--conversation", default=None)
@click.option("--tenant", default="")
@_run
async def improve(id, weight, url, stream, namespace, as_json, conversation, tenant) -> None:
    """Add feedback WEIGHT to item ID."""
    async with _Session(url, stream, namespace) as memory:
        receipt = await memory.improve(id, weight, conversation=conversation, tenant=tenant)
    _print_write(as_json, receipt, id=id)


@main.command()
@click.argument("id")
@_log_options
@click.option("--conversation", default=None)
@click.option("--tenant", default="")
@_run
async def forget(id, url, stream, namespace, as_json, conversation, tenant) -> None:
    """Write a tombstone for item ID."""
    async with _Session(url, stream, namespace) as memory:
        receipt = await memory.forget(id, conversation=conversation, tenant=tenant)
    _print_write(as_json, receipt, id=id)


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _age(value: str) -> float:
    """An age such as ``90d``, ``12h``, ``30m``, ``45s`` or plain seconds."""
    text = value.strip().lower()
    unit = _AGE_UNITS.get(text[-1:], None) if text else None
    number = text[:-1] if unit is not None else text
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        raise click.BadParameter(
            f"{shown(value)} is no age: write a number of seconds, or one with d, h, m or s (90d)"
        ) from None
    if not seconds >= 0 or seconds == float("inf"):
        raise click.BadParameter(f"{shown(value)} is no age: it must be 0 or more, and finite")
    return seconds


@main.command()
@click.option("--older-than", "older_than", default=None, help="an age: 90d, 12h, 30m, 45s")
@click.option("--expired", is_flag=True, help="forget the items whose ttl or expiry passed")
@_log_options
@click.option("--tenant", default="")
@click.option("--conversation", default=None, help="only items of this conversation")
@click.option("--limit", type=int, default=1000, show_default=True, help="forgets per batch")
@_run
async def purge(older_than, expired, url, stream, namespace, as_json, tenant, conversation, limit):
    """Forget the expired items (--expired) and the items last written longer ago than
    --older-than, oldest first, in batches of --limit until none is left; print how
    many."""
    if older_than is None and not expired:
        raise click.UsageError("say what to forget: --older-than AGE, --expired, or both")
    age = _age(older_than) if older_than is not None else None
    total = 0
    async with _Session(url, stream, namespace) as memory:
        handle = memory.scoped(conversation) if conversation is not None else memory
        calls = []
        if expired:
            calls.append(lambda: handle.forget_expired(tenant=tenant, limit=limit))
        if age is not None:
            calls.append(lambda: handle.purge(age, tenant=tenant, limit=limit))
        for call in calls:
            while True:
                forgotten = await call()
                total += forgotten
                if not as_json and forgotten:
                    click.echo(f"forgot {forgotten} ({total} so far)", err=True)
                if forgotten < limit:
                    break
    click.echo(json.dumps({"forgotten": total}) if as_json else f"{total} forgotten")


def _parse_json(value: str, what: str) -> Any:
    try:
        return load_json(value, what)
    except LaserError as exc:
        raise click.BadParameter(str(exc)) from None


@main.command(name="set")
@click.argument("key")
@click.argument("body")
@_log_options
@click.option("--tenant", default="")
@_run
async def set_(key, body, url, stream, namespace, as_json, tenant) -> None:
    """Set named item KEY to BODY (a JSON object or array, or plain text; - reads it from
    standard input)."""
    given = _given(body)
    value: Any = given
    if isinstance(given, str) and given.lstrip()[:1] in ("{", "["):
        value = _parse_json(given, "BODY")
    async with _Session(url, stream, namespace) as memory:
        receipt = await memory.set(key, value, tenant=tenant)
    _print_write(as_json, receipt, key=key)


@main.command()
@click.argument("key")
@_connection_options
@click.option("--tenant", default="")
@click.option(
    "--version",
    type=click.IntRange(min=1),
    default=None,
    help="After this many writes (needs --view).",
)
@_as_of_option
@_run
async def fetch(key, url, stream, namespace, as_json, view, tenant, version, as_of) -> None:
    """Print named item KEY (exit code 1 if absent)."""
    moment = _moment(as_of)
    if moment is not None and version is not None:
        raise click.UsageError(
            "--version reads a view's versions and --as-of the log at a moment: give one"
        )
    if moment is None:
        async with _Session(url, stream, namespace, view, read=True) as memory:
            item = await memory.fetch(key, tenant=tenant, version=version)
    else:
        async with _Session(url, stream, namespace, None, read=True, tenant=tenant) as memory:
            item = (await memory.as_of(moment)).fetch(key, tenant=tenant)
    if item is None:
        if as_json:
            click.echo("null")
        raise click.ClickException(f"no named item {shown(key)}")
    if as_json:
        click.echo(json.dumps(_named_json(item)))
    else:
        click.echo(item.body)  # its bytes as they are: text as it was set, and bytes too


@main.command()
@click.argument("key")
@click.argument("patch")
@_log_options
@click.option("--tenant", default="")
@_run
async def update(key, patch, url, stream, namespace, as_json, tenant) -> None:
    """Apply JSON merge PATCH to named item KEY (- reads it from standard input)."""
    given = _given(patch)
    if isinstance(given, bytes):
        raise click.BadParameter("PATCH is JSON text; standard input held bytes that are no UTF-8")
    parsed = _parse_json(given, "PATCH")
    async with _Session(url, stream, namespace) as memory:
        receipt = await memory.update(key, parsed, tenant=tenant)
    _print_write(as_json, receipt, key=key)


@main.command()
@click.argument("key")
@_log_options
@click.option("--tenant", default="")
@click.option(
    "--if-version",
    type=click.IntRange(min=1),
    default=None,
    help="Remove only if the item is still at this version when folded.",
)
@_run
async def remove(key, url, stream, namespace, as_json, tenant, if_version) -> None:
    """Remove named item KEY (absent keys succeed)."""
    async with _Session(url, stream, namespace) as memory:
        receipt = await memory.remove(key, tenant=tenant, if_version=if_version)
    _print_write(as_json, receipt, key=key)


@main.command()
@click.argument("prefix", default="")
@_connection_options
@click.option("--tenant", default="")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=None,
    help="List the first N in key order (default: all); a view reads no further.",
)
@_as_of_option
@_run
async def named(prefix, url, stream, namespace, as_json, view, tenant, limit, as_of) -> None:
    """List the named items whose key starts with PREFIX (all without one), by key."""
    moment = _moment(as_of)
    if moment is None:
        async with _Session(url, stream, namespace, view, read=True) as memory:
            items = await memory.named(prefix, tenant=tenant, limit=limit)
    else:
        # A view holds only the present: the past is folded from the log (as_of).
        async with _Session(url, stream, namespace, None, read=True, tenant=tenant) as memory:
            items = (await memory.as_of(moment)).named(prefix, tenant=tenant, limit=limit)
    for item in items:
        if as_json:
            click.echo(json.dumps(_named_json(item)))
        else:
            click.echo(f"{printable(item.key)}\t{item.version}\t{printable(item.text)}")


def _topic_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--topic", default=None, help="Memory topic (default: the stream's).")(fn)
    fn = click.option("--stream", default=None, help="Default stream (topic prefix).")(fn)
    fn = click.option(
        "--url", envvar="LASER_URL", default=DEFAULT_URL, show_default=True, help="The log."
    )(fn)
    return fn


def _status_seconds(value: float) -> float:
    """A finite number of seconds from 0 (-1 and nan read as "none", inf as a status
    never due, before)."""
    if not 0 <= value < float("inf"):
        raise click.BadParameter(f"{value} is no number of seconds: 0 or more, and finite")
    return value


def _view_option(required: bool = True) -> Callable[..., Any]:
    return click.option(
        "--view",
        envvar="LASER_VIEW",
        required=required,
        help="The managed view folder (default $LASER_VIEW).",
    )


def _map_size_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--map-size",
        default=FolderConfig().map_size,
        show_default=True,
        type=click.IntRange(min=1 << 20),
        help="Most bytes the view may hold (sparse on disk); raise it when the view is full.",
    )(fn)


@main.command()
@_topic_options
@_view_option()
@click.option("--exit-when-caught-up", is_flag=True, help="Stop at the end offsets seen at start.")
@click.option(
    "--status-every",
    default=30.0,
    show_default=True,
    type=float,
    callback=lambda _ctx, _param, value: _status_seconds(value),
    help="Seconds between status lines on stderr (0: none).",
)
@_map_size_option
@_run
async def fold(url, stream, topic, view, exit_when_caught_up, status_every, map_size) -> None:
    """Run a folder: keep the managed view at --view current from the memory topic."""
    async with connect(url, stream=stream, create=False) as laser:
        topic = laser.memory_topic_name if topic is None else topic
        if not await _topic_exists(laser, topic):
            raise click.ClickException(
                f"topic {shown(topic)} does not exist yet; write to it or run "
                "'laser-memory bootstrap'"
            )
        folder = ViewFolder(laser.log, topic, view, FolderConfig(map_size=map_size))
        click.echo(f"folding {topic} from {laser.log.url} into {view}", err=True)
        last_status = time.monotonic()
        progress: tuple[int, dict[int, int]] = (0, {})

        def status(folded: int, watermark: dict[int, int]) -> None:
            nonlocal last_status, progress
            progress = (folded, watermark)
            if status_every > 0 and time.monotonic() - last_status >= status_every:
                last_status = time.monotonic()
                click.echo(f"folded {folded} records; watermark {watermark}", err=True)

        with _startup_frozen():
            folded, stopped_by = await _until_stopped(
                folder.run(until_caught_up=exit_when_caught_up, on_progress=status)
            )
        if stopped_by is not None:
            click.echo(
                f"stopped by {stopped_by}: folded {progress[0]} records; watermark "
                f"{progress[1]} (a restart resumes from it)",
                err=True,
            )
            return
        click.echo(f"folded {folded} records", err=True)


async def _topic_exists(laser, topic: str) -> bool:
    """Whether the topic exists; reading commands never create it."""
    try:
        await laser.log.describe_topic(topic)
    except UnknownTopic:
        return False
    return True


@main.command()
@_topic_options
@_view_option()
@_map_size_option
@_run
async def rebuild(url, stream, topic, view, map_size) -> None:
    """Empty the view at --view and fold the whole topic into it again, with progress;
    then make again the search index snapshots its readers had saved."""
    async with connect(url, stream=stream, create=False) as laser:
        topic = laser.memory_topic_name if topic is None else topic
        if not await _topic_exists(laser, topic):
            raise click.ClickException(f"topic {shown(topic)} does not exist")
        # Listed before the view is emptied, which removes them.
        reads = IndexSnapshots(view_path_of(view)).reads()
        total = sum((await laser.log.end_offsets(topic)).values())
        with click.progressbar(length=total, label=f"rebuilding {view}", file=sys.stderr) as bar:
            done = 0

            def progress(folded: int, _watermark: dict[int, int]) -> None:
                nonlocal done
                bar.update(folded - done)
                done = folded

            with _startup_frozen():
                folded = await ViewFolder(
                    laser.log, topic, view, FolderConfig(map_size=map_size)
                ).run(until_caught_up=True, rebuild=True, on_progress=progress)
        click.echo(f"rebuilt {view} from {folded} records", err=True)
    if reads:
        await asyncio.to_thread(_remake_snapshots, view, reads)


def _remake_snapshots(view: str, reads: list[Read]) -> None:
    """Make the search index of each read whose snapshot a rebuild removed, and save
    it, so that no reader's first text recall builds it (as `laser-memory index`)."""
    click.echo(f"making {len(reads)} search index snapshot(s) the readers had", err=True)
    now_ms = time.time_ns() // 1_000_000
    with MemoryView.open(view, create=False) as opened:
        for tenant, namespace, conversation, embedder, superseded in reads:
            where = ItemFilter(
                tenant=tenant,
                conversation=conversation,
                embedder=embedder,
                superseded=superseded,
                now_ms=now_ms,
            )
            prepared = opened.prepare_index(namespace, where, ApproximateSearch())
            read = _read_label(tenant, conversation, embedder, superseded)
            done = "saved" if prepared.snapshot is not None else f"not saved: {prepared.reason}"
            click.echo(
                f"  {printable(namespace)}{read}: {prepared.entries} entries, {done}", err=True
            )


@main.command()
@_log_options
@click.option("--tenant", default="", help="Tenant whose items to embed (default '').")
@click.option(
    "--embedder",
    envvar="LASER_EMBEDDER",
    required=True,
    type=click.Choice(EMBEDDERS),
    help="The model to embed with (default $LASER_EMBEDDER).",
)
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(1, 4096))
@_run
async def reembed(url, stream, namespace, as_json, tenant, embedder, batch_size) -> None:
    """Write the --embedder model's vector for every live item of the namespace that has
    none, as records (history kept), with progress. Rerun it to resume."""
    model = _make_embedder(embedder)
    async with _Session(url, stream, namespace, read=True) as memory:
        with click.progressbar(
            length=0, label=f"embedding with {model.label}", file=sys.stderr
        ) as bar:
            shown = 0

            def progress(done: int, total: int) -> None:
                nonlocal shown
                bar.length = total
                bar.update(done - shown)
                shown = done

            written = await memory.reembed(
                model, tenant=tenant, batch_size=batch_size, progress=progress
            )
    if as_json:
        click.echo(json.dumps({"written": written, "embedder": model.label}))
    else:
        click.echo(f"wrote {written} vector(s) of {model.label}")


@main.command()
@_view_option()
@click.option(
    "--url",
    default=None,
    help="The log the view folds: with it, stats also says how far the view is behind it.",
)
@click.option("--json", "as_json", is_flag=True)
def stats(view: str, url: str | None, as_json: bool) -> None:
    """Show a view's watermark, item counts and set-aside records (with --url, how many
    records of the log it has not folded yet), and its search index snapshots."""
    try:
        with MemoryView.open(view, create=False) as opened:
            result = opened.stats()
            snapshots = opened.search_snapshots()
        lag = asyncio.run(_view_lag(url, result)) if url is not None else None
    except LaserError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    if as_json:
        out = msgspec.to_builtins(result)
        if lag is not None:
            out["log"] = lag
        out["search_snapshots"] = msgspec.to_builtins(snapshots)
        click.echo(json.dumps(out))
        return
    click.echo(f"view:       {result.path}")
    click.echo(f"topic:      {result.topic} (generation {result.generation})")
    click.echo(f"watermark:  {result.watermark}")
    if lag is not None:
        if lag["generation"] != result.generation:
            click.echo(
                f"log:        the topic was recreated since the view was built (generation "
                f"{lag['generation']}): rebuild the view ('laser-memory rebuild')"
            )
        else:
            click.echo(f"log ends:   {lag['end_offsets']}")
            behind = sum(lag["behind"].values())
            where = f" {lag['behind']}" if behind else " (caught up)"
            click.echo(f"behind:     {behind} record(s){where}")
    click.echo(f"items:      {result.items}")
    click.echo(f"named:      {result.named_items}")
    click.echo(f"set aside:  {result.set_aside}")
    for aside in result.set_aside_records:
        position = aside.position
        click.echo(f"  partition {position.partition} offset {position.offset}: {aside.reason}")
    if result.set_aside > len(result.set_aside_records):
        click.echo(
            f"  ... and {result.set_aside - len(result.set_aside_records)} more "
            "(MemoryView.stats(aside_limit=N) lists them)"
        )
    click.echo(f"search:     {len(snapshots)} index snapshot(s)")
    for snapshot in snapshots:
        state = (
            "of an earlier view (rebuilt or restored since): 'laser-memory index' makes it again"
            if snapshot.behind is None
            else f"at change {snapshot.changes}, {snapshot.behind} change(s) behind"
        )
        read = _read_label(
            snapshot.tenant, snapshot.conversation, snapshot.embedder, snapshot.superseded
        )
        click.echo(f"  {printable(snapshot.namespace)}{read}: {state}")


def _read_label(
    tenant: str, conversation: str | None, embedder: str | None, superseded: bool
) -> str:
    """What sets a search index's read apart besides its namespace, for a line of output
    (empty for the namespace's plain read)."""
    parts = [
        f"{name} {shown(value)}"
        for name, value in (
            ("tenant", tenant),
            ("conversation", conversation),
            ("embedder", embedder),
        )
        if value
    ]
    if superseded:
        parts.append("with superseded items")
    return f" ({', '.join(parts)})" if parts else ""


@main.command(name="index")
@_connection_options
@click.option("--tenant", default="", help="Tenant whose reads to prepare (default '').")
@click.option("--conversation", default=None, help="Only a recall of this conversation.")
@_embedder_option
@_run
async def index_command(url, stream, namespace, as_json, view, tenant, conversation, embedder):
    """Make a managed view's search index for a namespace's text recalls and save its
    snapshot beside the view, so that no reader's first text recall builds it (about a
    minute at a million items). Run it before readers start ('rebuild' remakes the
    snapshots readers had saved); give the --embedder the readers use."""
    if view is None:
        raise click.UsageError("index prepares a managed view's search index: give --view PATH")
    started = time.monotonic()
    async with _Session(url, stream, namespace, view, read=True, embedder=embedder) as memory:
        if not as_json:
            click.echo(f"preparing the search index of {namespace!r} ...", err=True)
        prepared = await memory.prepare_search(tenant=tenant, conversation=conversation)
    seconds = time.monotonic() - started
    if as_json:
        click.echo(json.dumps({**msgspec.to_builtins(prepared), "seconds": round(seconds, 3)}))
        return
    click.echo(f"entries:    {prepared.entries} (as of view change {prepared.changes})")
    click.echo(f"embedder:   {prepared.embedder or 'none (keyword recall)'}")
    if prepared.snapshot is not None:
        click.echo(f"snapshot:   {prepared.snapshot}")
    else:
        click.echo(f"no snapshot: {prepared.reason}")
    click.echo(f"took:       {seconds:.1f} s")


async def _view_lag(url: str, stats: Any) -> dict[str, Any] | None:
    """How far a view is behind its log: the topic's generation and end offsets, and per
    partition the records not folded yet (only those behind). None for a view that
    folds no topic yet."""
    if stats.topic is None:
        return None
    async with connect(url, create=False) as laser:
        info = await laser.log.describe_topic(stats.topic)
        same = info.generation == stats.generation
        ends = await laser.log.end_offsets(stats.topic) if same else {}
    behind = {p: end - stats.watermark.get(p, 0) for p, end in sorted(ends.items())}
    return {
        "generation": info.generation,
        "end_offsets": ends,
        "behind": {p: n for p, n in behind.items() if n > 0},
    }


@main.command()
@_view_option()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--auth",
    "auth_file",
    default=None,
    type=click.Path(dir_okay=False),
    help="TOML file of principals and their token hashes (see 'laser-memory token'). "
    "Without it only loopback is served, and any caller reads any tenant.",
)
@_embedder_option
def serve(view: str, host: str, port: int, auth_file: str | None, embedder: str | None) -> None:
    """Serve the view read-only over HTTP (recall, context, fetch, named, history, stats,
    health)."""
    from folders.http import ServerConfig, serve_view
    from folders.http_auth import TokenAuth, is_loopback

    try:
        config = ServerConfig(embedder=_make_embedder(embedder))
        auth = TokenAuth.from_file(auth_file) if auth_file is not None else None
        if auth is None and not is_loopback(host):
            raise ConfigError(
                f"serving on {shown(host)} without --auth would let anyone who reaches it read "
                "every tenant; pass --auth FILE, or serve on 127.0.0.1"
            )
    except LaserError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None

    try:
        opened = MemoryView.open(view, create=False)
    except LaserError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    with opened:
        try:
            _, stopped_by = asyncio.run(
                _until_stopped(
                    serve_view(
                        opened,
                        host,
                        port,
                        config=config,
                        auth=auth,
                        ready=lambda m: click.echo(m, err=True),
                    )
                )
            )
        except LaserError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
        if stopped_by is not None:
            click.echo(f"stopped by {stopped_by}", err=True)


@main.command()
@click.argument("name")
@click.option("--tenant", default="", show_default=True, help="The tenant it acts for.")
@click.option(
    "--grant",
    "grants",
    multiple=True,
    help="A grant, e.g. 'kv:read:stream:prod/*' or 'view:stats'; repeat for several.",
)
def token(name: str, tenant: str, grants: tuple[str, ...]) -> None:
    """Make a bearer token for principal NAME: prints the token once (give it to the
    caller) and the [[principal]] entry to add to the serve --auth file (it stores only
    the token's hash)."""
    from folders.http_auth import hash_token, new_token

    from .access import Principal

    try:
        principal = Principal(name, tenant=tenant, grants=frozenset(grants))
    except LaserError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    secret = new_token()
    click.echo(f"token (shown once): {secret}", err=True)
    click.echo("[[principal]]")
    click.echo(f"name = {json.dumps(principal.name)}")
    click.echo(f"tenant = {json.dumps(principal.tenant)}")
    click.echo(f"grants = {json.dumps(sorted(principal.grants))}")
    click.echo(f'token_sha256 = "{hash_token(secret)}"')


@main.command()
@_url_options
@_namespace_option
@_view_to_read
@click.option("--tenant", default="", help="The tenant every tool acts in (fixed; default '').")
@click.option(
    "--http-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve streamable HTTP on 127.0.0.1:PORT/mcp, not stdio (0: a free port, printed).",
)
@_embedder_option
def mcp(url, stream, namespace, view, tenant, http_port, embedder) -> None:
    """Run a Model Context Protocol server over one namespace (stdio by default): tools
    remember, recall, context, improve, forget, fetch, named, set, update and remove.
    The namespace and tenant are fixed here, never by the model. Needs
    'laser-memory[mcp]'."""
    try:
        from .integrations.mcp import memory_server, serve_streamable_http
    except ImportError as exc:
        raise click.ClickException(f"the MCP server cannot start: {exc}") from None

    async def serve() -> str | None:
        try:
            laser = connect(url, stream=stream, view=view, embedder=_make_embedder(embedder))
            async with laser:
                if view is not None:
                    # As every command reading a view, at once: a mistyped --view was
                    # found only when a model first recalled, as an error only it read.
                    laser.managed_view()
                server = memory_server(laser.memory(namespace, tenant=tenant))
                if http_port is None:
                    # Left to the signals' default: a stop could not end it while its
                    # client keeps stdin open (the SDK reads it on a thread).
                    await server.run_stdio_async()
                    return None
                # A service manager's stop is a clean exit, as `serve`'s and `fold`'s: it
                # was status 143, uvicorn raising the signal again once it had shut down.
                _, stopped_by = await _until_stopped(
                    serve_streamable_http(
                        server, port=http_port, ready=lambda line: click.echo(line, err=True)
                    )
                )
                return stopped_by
        except LaserError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None

    previous = None
    if http_port is None and threading.current_thread() is threading.main_thread():
        # Ctrl-C ends a stdio server at once, as SIGTERM does: asyncio's own handler
        # cancels the server, which then waits for the MCP SDK's thread reading stdin
        # until the client closes it (modelcontextprotocol/python-sdk#3551), so at a
        # terminal Ctrl-C did nothing. A write is acknowledged once durable: none is lost.
        previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        stopped_by = asyncio.run(serve())
    finally:
        if previous is not None:  # the command run in a process of its caller's (a test)
            signal.signal(signal.SIGINT, previous)
    if stopped_by is not None:
        click.echo(f"stopped by {stopped_by}", err=True)


def _print_history(entries, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([entry.to_json() for entry in entries], ensure_ascii=False))
        return
    if not entries:
        click.echo("(no records)")
    for entry in entries:
        when = _format_ms(entry.append_time_ms)
        detail = entry.body.decode("utf-8", "replace") if entry.body is not None else ""
        if entry.weight is not None:
            detail = f"weight {entry.weight:g}"
        conversation = printable(entry.conversation or "-")
        click.echo(
            f"{when}  v{entry.version:<3} {entry.op:<12} {entry.topic}/{entry.partition}@"
            f"{entry.offset}  {conversation:<12} {printable(detail)}"
        )


def _format_ms(millis: int) -> str:
    moment = dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@main.command()
@click.argument("target")
@_connection_options
@click.option("--tenant", default="")
@click.option("--key", "is_key", is_flag=True, help="TARGET is a named item key, not an id.")
@_run
async def audit(target, url, stream, namespace, as_json, view, tenant, is_key) -> None:
    """Every record that touched item TARGET (or named item, with --key)."""
    async with _Session(url, stream, namespace, view, read=True) as memory:
        what = target if is_key else MemoryId.parse(target)
        entries = await memory.history(what, tenant=tenant)
    _print_history(entries, as_json)


def _moment(value: str | None) -> int | None:
    if value is None:
        return None
    if value.isascii() and value.isdigit():
        digits = value.lstrip("0") or "0"
        # Compared by length first: int() of over 4,300 digits raises Python's own error.
        if len(digits) > 19 or int(digits) >= 1 << 63:
            raise click.BadParameter(f"{shown(value)} is past the last millisecond a log holds")
        return int(digits)
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        try:
            number = float(value)
        except ValueError:
            number = None
        if number is not None:
            # A number, but no moment: said as such, not as "neither" (as if it were no
            # number at all).
            raise click.BadParameter(
                f"{shown(value)} is no moment: milliseconds since the epoch are a whole "
                "number from 0 (or give an ISO 8601 time)"
            ) from None
        raise click.BadParameter(
            f"{shown(value)} is neither milliseconds since the epoch nor an ISO 8601 time"
        ) from None
    # The CLI prints times in UTC ("...Z"), so a time without a zone is read as UTC.
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return to_millis(moment)


@main.command()
@_log_options
@click.option(
    "--since",
    default=None,
    help="ISO time (UTC unless it names a zone) or epoch milliseconds (inclusive).",
)
@click.option(
    "--until",
    default=None,
    help="ISO time (UTC unless it names a zone) or epoch milliseconds (inclusive).",
)
@click.option("--tenant", default="", help="The tenant whose records to print (default '').")
@click.option(
    "--all-tenants",
    is_flag=True,
    help="Operators only: print every tenant's records, and records nobody can read.",
)
@click.option(
    "--all-namespaces",
    is_flag=True,
    help="Every namespace of the stream's memory topic, each line naming its namespace.",
)
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Then print records as they are appended, until Ctrl-C or SIGTERM.",
)
@_run
async def replay(
    url, stream, namespace, as_json, since, until, tenant, all_tenants, all_namespaces, follow
) -> None:
    """Print a tenant's records of a namespace from the log, in order (append time,
    partition, offset); with --follow, then the records appended since, as they come."""
    if all_namespaces and (
        click.get_current_context().get_parameter_source("namespace")
        is not click.core.ParameterSource.DEFAULT
    ):
        raise click.UsageError("--namespace and --all-namespaces exclude each other")
    since_ms, until_ms = _moment(since), _moment(until)
    if since_ms is not None and until_ms is not None and since_ms > until_ms:
        raise click.UsageError(
            f"--since ({since}) is after --until ({until}): no record is between"
        )
    if follow and until is not None:
        raise click.UsageError("--follow has no end: it takes --since, not --until")
    if all_tenants and tenant:
        raise click.UsageError("--tenant and --all-tenants exclude each other")
    validate_name(tenant, "tenant", allow_empty=True)
    async with _Session(url, stream, namespace, read=True) as memory:
        if not await _topic_exists(memory._laser, memory.topic):
            raise click.ClickException(f"topic {shown(memory.topic)} does not exist")
        # Streamed: each record is printed as it is read, and only a batch a partition
        # is held (a replay gathered first held 1.4 KB a record it kept).
        records = replay_stream(
            memory._laser.log,
            memory.topic,
            namespace=None if all_namespaces else memory.namespace,
            tenant=None if all_tenants else tenant,
            since_ms=since_ms,
            until_ms=until_ms,
            follow=follow,
        )

        async def print_all() -> None:
            # Closed here, stopped or not: a follow's read ends before the log stops.
            async with contextlib.aclosing(records):
                async for logged in records:
                    _print_logged(logged, as_json, all_namespaces)

        if not follow:
            await print_all()
            return
        _, stopped_by = await _until_stopped(print_all())
        if stopped_by is not None:
            click.echo(f"stopped by {stopped_by}", err=True)


def _print_logged(logged: LoggedRecord, as_json: bool, namespaced: bool = False) -> None:
    """One line of `replay`: a record with its position and time, or why it was set aside
    (``namespaced``: the line names the record's namespace; its JSON always does)."""
    position = logged.log_record
    where = {
        "topic": position.topic,
        "partition": position.partition,
        "offset": position.offset,
    }
    if logged.record is None:
        if as_json:
            click.echo(
                json.dumps(
                    {**where, "append_time_ms": position.append_time_ms, "error": logged.error}
                )
            )
        else:
            click.echo(f"{_format_ms(position.append_time_ms)}  (set aside) {logged.error}")
        return
    record = logged.record
    entry = history_entry(record, position, 0)
    # The item a record is of (a named item's records name a key instead).
    item = None
    if isinstance(record, Remember):
        item = str(MemoryId(record.id))
    elif isinstance(record, Feedback | Forget | Embedded | Superseded | Retrieved):
        item = str(MemoryId(record.target))
    if as_json:
        data = entry.to_json()
        data.pop("version")
        data["namespace"] = record.ns
        if item is not None:
            data["id"] = item
        click.echo(json.dumps(data, ensure_ascii=False))
        return
    target = item if item is not None else printable(entry.key or "")
    detail = entry.body.decode("utf-8", "replace") if entry.body is not None else ""
    if entry.weight is not None:
        detail = f"weight {entry.weight:g}"
    if isinstance(logged.record, Embedded):
        detail = f"{len(logged.record.embedding) // 4}-d vector of {logged.record.embedder}"
    if isinstance(logged.record, Superseded):
        detail = f"by {entry.superseded_by}"
    where_from = f"{printable(logged.record.ns)}  " if namespaced else ""
    click.echo(
        f"{_format_ms(position.append_time_ms)}  {where_from}{entry.op:<12} {target:<26} "
        f"{printable(entry.conversation or '-'):<12} {printable(detail)}"
    )


@main.command()
@click.option("--url", default=None, help="Log to use (default: a new temporary folder).")
@_run
async def demo(url: str | None) -> None:
    """A memory session: remember, improve, forget, recall newest-first and by feedback."""
    if url is None:
        url = f"local://{tempfile.mkdtemp(prefix='laser-demo-')}"
    say = click.echo
    say(f"log: {url}\n")
    async with connect(url, stream="demo") as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        support = laser.context("support-42").memory("notes")
        planning = laser.context("planning-7").memory("notes")

        say("remember three facts in conversation support-42 and two in planning-7")
        email = await support.remember("the reporter prefers email over phone calls")
        await support.remember("ticket 42 is a login bug on the mobile app")
        await support.remember("the reporter is in the Berlin office")
        pool = await planning.remember("node-7 sits in the eu-west pool")
        wrong = await planning.remember("node-9 rotates keys monthly")

        say(f"improve {email} by 2.0 (it mattered), forget {wrong} (it was wrong)\n")
        await memory.improve(email, 2.0)
        forgotten = await planning.forget(wrong)

        say("recall, newest first, every conversation:")
        _print_items(await memory.recall(strategy="recent"), False)
        say("\nrecall ranked by feedback (auto):")
        _print_items(await memory.recall(), False)
        say("\nrecall in support-42 sharing a word with 'login email':")
        _print_items(await support.recall(text="login email", strategy="keyword"), False)

        say("\nnamed item: set, then two merge patches")
        await memory.set("profile", {"name": "Ada", "channel": "phone"})
        await memory.update("profile", {"channel": "email"})
        await memory.update("profile", {"office": "Berlin"})
        profile = await memory.fetch("profile")
        assert profile is not None
        say(f"profile (version {profile.version}): {profile.text}")

        say("\ncontext block for support-42 (budget 20 tokens):")
        say(await support.context(token_budget=20))
        say(f"\nthe pool fact came from {pool.receipt.topic} partition {pool.receipt.partition}")

        # A receipt names one write exactly, where a millisecond may hold several.
        then = await memory.as_of(wrong)
        known = [item.text for item in await then.recall(conversation="planning-7")]
        say(f"\nas of the moment {wrong} was remembered, planning-7 knew: {known}")
        after = await memory.as_of(forgotten)
        now = [item.text for item in await after.recall(conversation="planning-7")]
        say(f"and just after it was forgotten: {now}")
        # An auditor's replay, read from where the moment falls in each partition.
        since = [
            history_entry(logged.record, logged.log_record, 0).op
            async for logged in memory.replay(since=forgotten.append_time_ms)
            if logged.record is not None
        ]
        say(f"the log replayed since the forget's millisecond (it may share it): {since}")

        view = tempfile.mkdtemp(prefix="laser-view-")
        folder = ViewFolder(laser.log, laser.memory_topic_name, view)
        folded = await folder.run(until_caught_up=True)
        say(f"\na folder folded {folded} records into the managed view at {view}")
    async with connect(url, stream="demo", view=view) as reader:
        shared = reader.memory("notes")
        say("recall from the managed view, as any reader process on this host would:")
        _print_items(await shared.recall(limit=3), False)
        trail = await shared.history(email)
        say(f"audit trail of {email}: {[entry.op for entry in trail]}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
