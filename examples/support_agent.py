"""A support agent with long-term memory, runnable as is (no LLM: a scripted policy
stands in for one).

    python examples/support_agent.py                      # on an embedded log in a temp dir
    python examples/support_agent.py --url local://./agent-log
    python examples/support_agent.py --url kafka://localhost:9092

Each turn of two customer conversations goes through the same loop a real agent would
run: recall what memory holds about the question (the default strategy: hybrid with an
embedder, BM25 with neighbouring turns without one), build a context block within a
token budget, answer from it, and give feedback to the memory that answered, so it
ranks higher next time. `MemoryHandler(...).auto_remember("message")` remembers each
customer message once it is handled; the agent remembers its own replies. The second conversation
asks what the first one said: the answers come from memory, not from the script.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile

import msgspec

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
    """The scripted policy: answer with the best recalled customer statement."""
    for item in recalled:
        if item.scope.agent == "customer" and not item.text.rstrip().endswith("?"):
            return f"From your earlier message: {item.text!r}", item
    return "I have nothing on that yet.", None


class Turn(msgspec.Struct):
    """A customer's message, as `MemoryHandler` takes it."""

    payload: str
    conversation: str
    agent: str = "customer"


async def run(url: str | None, stream: str) -> list[str]:
    """The agent loop over the script; returns the transcript lines."""
    with tempfile.TemporaryDirectory() as scratch:
        async with lm.connect(url or f"local://{scratch}/log", stream=stream) as laser:
            if laser.log.url.startswith("kafka"):
                await laser.bootstrap(partitions=3)
            memory = laser.memory("support")
            transcript = []

            async def respond(turn: Turn) -> str:
                """Answer one customer message; MemoryHandler remembers it afterwards."""
                if not turn.payload.rstrip().endswith("?"):
                    return "Noted, thank you."
                recalled = await memory.recall(text=turn.payload, limit=5)
                context = lm.to_context_block(recalled, token_budget=TOKEN_BUDGET)
                transcript.append(f"[{turn.conversation}]   context: {context.splitlines()[0]}")
                reply, used = answer(turn.payload, recalled)
                if used is not None:
                    await memory.improve(used.id, 1.0)  # it helped: rank it higher
                return reply

            handler = lm.MemoryHandler(respond, memory).auto_remember("message")
            for conversation, said in SCRIPT:
                transcript.append(f"[{conversation}] customer: {said}")
                reply = await handler(Turn(said, conversation))
                await memory.remember(
                    reply, kind="message", conversation=conversation, agent="support"
                )
                transcript.append(f"[{conversation}] agent: {reply}")
            return transcript


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default=None, help="a log URL (default: a temporary one)")
    parser.add_argument("--stream", default="support-demo")
    args = parser.parse_args()
    for line in asyncio.run(run(args.url, args.stream)):
        print(line)


if __name__ == "__main__":
    main()
