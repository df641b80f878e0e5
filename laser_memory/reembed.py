"""Moving a namespace to another embedding model, as records.

`reembed` folds the namespace, embeds (in batches) every live item of the tenant
that has no vector of the new model, and writes an `Embedded` record for each: the
item keeps its history, the old vectors stay in the log, and a recall with the new
model's embedder compares the new vectors only. Running it again writes only what
is still missing, so an interrupted run resumes.

>>> written = await memory.reembed(MiniLMEmbedder(), progress=print)   # doctest: +SKIP
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

from .embedding import Embedder, embed_texts, validate_embedder
from .errors import InvalidInput, shown
from .ids import validate_name
from .records import Embedded, body_digest

if TYPE_CHECKING:
    from .memory import MemoryHandle

__all__ = ["reembed"]


async def reembed(
    memory: MemoryHandle,
    embedder: Embedder,
    *,
    tenant: str = "",
    batch_size: int = 64,
    progress: Callable[[int, int], object] | None = None,
) -> int:
    """Write ``embedder``'s vector for every live item of ``tenant`` in the handle's
    namespace that has none; returns how many records were written. ``progress`` is
    called with (done, total) before the first batch and after each one, sync or async
    (what it returns is awaited if awaitable: an async one was called and never run). An
    embedder failure raises `EmbeddingFailed`; the batches written before it stay (a
    rerun resumes)."""
    validate_embedder(embedder)
    tenant = validate_name(tenant, "tenant", allow_empty=True)
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not 1 <= batch_size <= 4096
    ):
        raise InvalidInput(f"batch_size is a whole number from 1 to 4096, got {shown(batch_size)}")
    if progress is not None and not callable(progress):
        raise InvalidInput(
            f"progress is a callable taking (done, total), or None; got {shown(progress)}"
        )
    if await memory._topic_info() is None:
        return 0
    state = await memory._reader.catch_up()
    missing = state.missing_vectors(tenant, embedder.label)
    done = 0

    async def report() -> None:
        if progress is not None and inspect.isawaitable(reported := progress(done, len(missing))):
            await reported

    await report()
    for start in range(0, len(missing), batch_size):
        batch = missing[start : start + batch_size]
        texts = [record.body.decode("utf-8", "replace") for _, record in batch]
        vectors = await embed_texts(
            embedder, texts, then="the batches before this one were written; run it again to go on"
        )
        await memory._write(
            [
                Embedded(
                    ns=memory.namespace,
                    scope=record.scope,
                    target=raw_id,
                    body_digest=body_digest(record.body),
                    embedding=vector.astype("<f4").tobytes(),
                    embedder=embedder.label,
                )
                for (raw_id, record), vector in zip(batch, vectors, strict=True)
            ]
        )
        done += len(batch)
        await report()
    return done
