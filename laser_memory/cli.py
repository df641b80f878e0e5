"""The ``laser-memory`` command line.

Every command takes ``--url`` (default ``$LASER_URL`` or ``local://./laser-data``),
``--stream``, ``--namespace`` (default ``notes``) and ``--json``.

    laser-memory remember "the reporter prefers email" --conversation support-42
    laser-memory recall --conversation support-42 --json
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import click

from . import connect
from .errors import LaserError
from .items import MemoryItem
from .kinds import MemoryKind
from .log import DEFAULT_URL
from .memory import MemoryHandle, Receipt
from .recall import STRATEGIES


def _run(coro_fn: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """Run an async command; a LaserError becomes a clean message and exit code 1."""

    @functools.wraps(coro_fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return asyncio.run(coro_fn(*args, **kwargs))
        except LaserError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None

    return wrapper


def _connection_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)
    fn = click.option(
        "--namespace", "-n", default="notes", show_default=True, help="Memory namespace."
    )(fn)
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


class _Session:
    def __init__(self, url: str, stream: str | None, namespace: str):
        self.laser = connect(url, stream=stream)
        self.namespace = namespace

    async def __aenter__(self) -> MemoryHandle:
        await self.laser.start()
        return self.laser.memory(self.namespace)

    async def __aexit__(self, *exc: object) -> None:
        await self.laser.stop()


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


def _print_items(items: list[MemoryItem], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([item.to_json() for item in items], ensure_ascii=False))
        return
    if not items:
        click.echo("(nothing recalled)")
    for item in items:
        conversation = item.conversation or "-"
        click.echo(
            f"{item.id}  {item.kind.value:<9} {conversation:<14} w={item.weight:<6g} {item.text}"
        )


@click.group()
@click.version_option(package_name="laser-memory")
def main() -> None:
    """Long-term memory for AI agents on an append-only log."""


@main.command()
@_connection_options
@click.option("--partitions", default=4, show_default=True, type=int)
@click.option(
    "--retention", default=None, type=float, help="Seconds to keep records (default: forever)."
)
@_run
async def bootstrap(url, stream, namespace, as_json, partitions, retention) -> None:
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
@_connection_options
@_scope_options
@click.option(
    "--kind", default="fact", show_default=True, type=click.Choice([k.value for k in MemoryKind])
)
@click.option("--durable", is_flag=True, help="Durable lifetime instead of session.")
@click.option("--dedup", is_flag=True, help="Use the content id: the same fact is stored once.")
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
) -> None:
    """Remember TEXT; prints the new item's id."""
    async with _Session(url, stream, namespace) as memory:
        mid = await memory.remember(
            text,
            kind=kind,
            conversation=conversation,
            agent=agent,
            user=user,
            application=application,
            tenant=tenant,
            durable=durable,
            dedup=dedup,
        )
    _print_write(as_json, mid.receipt, id=str(mid))


@main.command()
@_connection_options
@_scope_options
@click.option("--kind", default=None, type=click.Choice([k.value for k in MemoryKind]))
@click.option("--text", default=None, help="Keep items sharing a word with this text.")
@click.option("--strategy", default="auto", show_default=True, type=click.Choice(STRATEGIES))
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=0))
@_run
async def recall(
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
    text,
    strategy,
    limit,
) -> None:
    """Recall items in scope (folded from the log in this process)."""
    async with _Session(url, stream, namespace) as memory:
        items = await memory.recall(
            conversation=conversation,
            agent=agent,
            user=user,
            application=application,
            tenant=tenant,
            kind=kind,
            text=text,
            strategy=strategy,
            limit=limit,
        )
    _print_items(items, as_json)


@main.command()
@click.argument("id")
@click.argument("weight", type=float)
@_connection_options
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
@_connection_options
@click.option("--conversation", default=None)
@click.option("--tenant", default="")
@_run
async def forget(id, url, stream, namespace, as_json, conversation, tenant) -> None:
    """Write a tombstone for item ID."""
    async with _Session(url, stream, namespace) as memory:
        receipt = await memory.forget(id, conversation=conversation, tenant=tenant)
    _print_write(as_json, receipt, id=id)


def _parse_json(value: str, what: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"{what} is not valid JSON: {exc}") from None


@main.command(name="set")
@click.argument("key")
@click.argument("body")
@_connection_options
@click.option("--tenant", default="")
@_run
async def set_(key, body, url, stream, namespace, as_json, tenant) -> None:
    """Set named item KEY to BODY (JSON, or plain text)."""
    try:
        value: Any = json.loads(body)
        if not isinstance(value, dict | list):
            value = body
    except ValueError:
        value = body
    async with _Session(url, stream, namespace) as memory:
        receipt = await memory.set(key, value, tenant=tenant)
    _print_write(as_json, receipt, key=key)


@main.command()
@click.argument("key")
@_connection_options
@click.option("--tenant", default="")
@_run
async def fetch(key, url, stream, namespace, as_json, tenant) -> None:
    """Print named item KEY (exit code 1 if absent)."""
    async with _Session(url, stream, namespace) as memory:
        item = await memory.fetch(key, tenant=tenant)
    if item is None:
        if as_json:
            click.echo("null")
        raise click.ClickException(f"no named item {key!r}")
    if as_json:
        try:
            body: Any = item.json()
        except ValueError:
            body = item.text
        click.echo(json.dumps({"key": key, "body": body, "version": item.version}))
    else:
        click.echo(item.text)


@main.command()
@click.argument("key")
@click.argument("patch")
@_connection_options
@click.option("--tenant", default="")
@_run
async def update(key, patch, url, stream, namespace, as_json, tenant) -> None:
    """Apply JSON merge PATCH to named item KEY."""
    parsed = _parse_json(patch, "PATCH")
    async with _Session(url, stream, namespace) as memory:
        receipt = await memory.update(key, parsed, tenant=tenant)
    _print_write(as_json, receipt, key=key)


@main.command()
@click.argument("key")
@_connection_options
@click.option("--tenant", default="")
@_run
async def remove(key, url, stream, namespace, as_json, tenant) -> None:
    """Remove named item KEY (absent keys succeed)."""
    async with _Session(url, stream, namespace) as memory:
        receipt = await memory.remove(key, tenant=tenant)
    _print_write(as_json, receipt, key=key)


@main.command()
@click.option("--url", default=None, help="Log to use (default: a new temporary folder).")
@_run
async def demo(url: str | None) -> None:
    """A memory session: remember, improve, forget, recall newest-first and by feedback."""
    url = url or f"local://{tempfile.mkdtemp(prefix='laser-demo-')}"
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
        await planning.forget(wrong)

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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
