"""A support agent with long-term memory, runnable as is (no LLM: a scripted policy
stands in for one).

    python examples/support_agent.py                      # on an embedded log in a temp dir
    python examples/support_agent.py --url local://./agent-log
    python examples/support_agent.py --url kafka://localhost:9092
    python examples/support_agent.py --embedder minilm    # the local model (`make model`)

The agent runs as `laser.spawn_agent` runs agents: it listens on the stream's sessions
topic, and each customer message sent there (`laser.send_to_agent`) goes through the
loop a real agent would run: recall what memory holds about the question (the default
strategy: hybrid with an embedder, BM25 with neighbouring turns without one), record
which items entered the context (`session.record_retrieval`, so their history shows the
answer), build a context block within a token budget, answer from it, and give feedback
to the memory that answered, so it ranks higher next time.
`MemoryHandler(...).auto_remember("message")` remembers each customer message once it
is handled; the agent remembers its replies through `session.linked_memory()` (stamped
with the agent and the message it answered). A consolidation pass on a timer keeps the
namespace to its newest items while the agent works. The second conversation asks
what the first one said: the answers come from memory, not from the script.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile

import laser_memory as lm

#: (conversation, what the customer says). Statements are remembered; questions are
#: answered from memory.
SCRIPT = [
    ("ticket-1", "Hi, my order A-1043 arrived with a cracked screen."),
    ("ticket-1", "I prefer to be contacted by email, not phone."),
    ("ticket-1", "The courier was DHL and the parcel looked fine outside."),
    ("ticket-2", "Hello again, which order did I report as damaged?"),
    ("ticket-2", "How do I prefer to be contacted?"),
    ("ticket-2", "Which courier delivered it?"),
]

TOKEN_BUDGET = 120


def answer(question: str, recalled: list[lm.MemoryItem]) -> tuple[str, lm.MemoryItem | None]:
    """The scripted policy: answer with the best recalled customer statement (the
    agent's own replies carry it as producer)."""
    for item in recalled:
        if item.producer is None and not item.text.rstrip().endswith("?"):
            return f"From your earlier message: {item.text!r}", item
    return "I have nothing on that yet.", None


class Compact:
    """The consolidator the agent runs on a timer: keep the newest 200 items."""

    def __init__(self, memory: lm.MemoryHandle) -> None:
        self.memory = memory

    async def consolidate(self, scope) -> lm.ConsolidationReport:
        return await self.memory.consolidate(200)


def embedder_named(name: str | None) -> lm.Embedder | None:
    """``minilm``: the local all-MiniLM-L6-v2 (recall is hybrid: words and meaning);
    ``word-hash``: the test embedder; None: no vectors (recall is by words)."""
    if name == "minilm":
        return lm.MiniLMEmbedder()
    if name == "word-hash":
        return lm.WordHashEmbedder()
    return None


async def run(url: str | None, stream: str, embedder: lm.Embedder | None = None) -> list[str]:
    """The agent over the script; returns the transcript lines."""
    with tempfile.TemporaryDirectory() as scratch:
        async with lm.connect(
            url or f"local://{scratch}/log", stream=stream, embedder=embedder
        ) as laser:
            await laser.bootstrap(partitions=3)
            memory = laser.memory("support")
            transcript: list[str] = []
            replies: asyncio.Queue[str] = asyncio.Queue()

            async def respond(message: lm.AgentMessage) -> None:
                """Answer one customer message; MemoryHandler remembers it afterwards."""
                text = message.text
                if not text.rstrip().endswith("?"):
                    reply = "Noted, thank you."
                else:
                    recalled = await memory.recall(text=text, limit=5)
                    await message.session.record_retrieval(text, recalled)
                    context = lm.to_context_block(recalled, token_budget=TOKEN_BUDGET)
                    transcript.append(
                        f"[{message.conversation}]   context: {context.splitlines()[0]}"
                    )
                    reply, used = answer(text, recalled)
                    if used is not None:
                        await memory.improve(used.id, 1.0)  # it helped: rank it higher
                await message.session.linked_memory().remember(
                    reply, kind="message", conversation=message.conversation
                )
                await replies.put(reply)

            handler = lm.MemoryHandler(respond, memory).auto_remember("message")
            agent = await laser.spawn_agent(
                "support",
                lm.AgentTopic.SESSIONS,
                handler,
                consolidate_every=1.0,
                consolidator=Compact(memory),
            )
            try:
                for conversation, said in SCRIPT:
                    transcript.append(f"[{conversation}] customer: {said}")
                    await laser.send_to_agent("support", said, conversation=conversation)
                    reply = await asyncio.wait_for(replies.get(), timeout=60)
                    transcript.append(f"[{conversation}] agent: {reply}")
                # The handler remembers a message after the reply: let the last finish.
                await agent.drain(timeout=60)
            finally:
                await agent.stop()
            if agent.failures:
                raise RuntimeError(f"the agent failed: {agent.failures}")
            [order] = await memory.recall(text="A-1043 cracked screen", limit=1)
            answered = [h for h in await memory.history(order.id) if h.op == "retrieved"]
            transcript.append(
                f"memory: {len(await memory.recall(limit=1000))} items; the damaged-order "
                f"message went into {len(answered)} answer(s); "
                f"{agent.consolidation.passes} consolidation pass(es)"
            )
            return transcript


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default=None, help="a log URL (default: a temporary one)")
    parser.add_argument("--stream", default="support-demo")
    parser.add_argument(
        "--embedder",
        choices=["minilm", "word-hash"],
        default=None,
        help="embed what is remembered and asked (default: none, recall by words)",
    )
    args = parser.parse_args()
    for line in asyncio.run(run(args.url, args.stream, embedder_named(args.embedder))):
        print(line)


if __name__ == "__main__":
    main()
