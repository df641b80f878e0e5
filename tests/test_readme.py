"""The README's Python examples run as a reader copies them.

A reader pastes a block into a script or a notebook with a connection at hand: every
```python block of the README is run here, on the embedded log, with what its prose
leaves to the reader (``laser``, ``memory``, a summariser, a store class, a graph) made
by `stand_ins`. A block that stops working (an API renamed, a date that has passed)
fails here rather than on a reader's machine. Blocks naming a Kafka broker or a server
path run against a local log and a temporary view instead, with a folder beside them.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import datetime
import re
import shlex
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from typing_extensions import TypedDict

import laser_memory as lm
from folders.service import ViewFolder
from laser_memory.records import MemoryRecord

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[tuple[int, str]]:
    """Each ```python block of the README with the line it starts on."""
    blocks, lines = [], README.read_text(encoding="utf-8").splitlines()
    start = None
    for number, line in enumerate(lines, 1):
        if start is None and line.strip() == "```python":
            start = number
        elif start is not None and line.strip() == "```":
            blocks.append((start, "\n".join(lines[start : number - 1])))
            start = None
    return blocks


BLOCKS = python_blocks()


def test_the_readme_has_its_examples():
    # Guards the parser: a README whose blocks it stopped finding would pass every test.
    assert len(BLOCKS) >= 15
    assert any("asyncio.run(main())" in text for _, text in BLOCKS)


class _Summarizer:
    def summarize(self, bodies: list[bytes]) -> str:
        return f"{len(bodies)} notes"


class _Compact:
    async def consolidate(self, scope: dict) -> None:
        return None


class _MyStore:
    """The smallest backend `CustomMemory` takes: ids it mints, recall by substring."""

    def __init__(self) -> None:
        self.items: dict[str, dict] = {}

    def remember(self, scope, payload):
        mid = str(lm.MemoryId.new())
        self.items[mid] = {"payload": payload, "id": mid, "tenant": scope["tenant"]}
        return mid

    def recall(self, scope, query):
        text = (query["text"] or "").encode()
        return [
            {"payload": item["payload"], "id": item["id"]}
            for item in self.items.values()
            if item["tenant"] == scope["tenant"] and text in item["payload"]
        ]

    def improve(self, scope, feedback):
        return None

    def forget(self, scope, mid):
        self.items.pop(mid, None)


class _Message:
    def __init__(self, payload: str, conversation: str | None, agent: str | None) -> None:
        self.payload, self.conversation, self.agent = payload, conversation, agent


class _GraphState(TypedDict):
    question: str
    answer: str


def _graph_builder():
    from langgraph.graph import END, START, StateGraph
    from langgraph.store.base import BaseStore

    async def answer(state: _GraphState, *, store: BaseStore) -> dict:
        hits = await store.asearch(("users", "u1"), query=state["question"], limit=1)
        return {"answer": hits[0].value["text"] if hits else ""}

    builder = StateGraph(_GraphState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder


def stand_ins(laser: lm.Laser) -> dict[str, Any]:
    """What the README's prose gives a block without writing it out."""

    async def answer_ticket(message) -> str:
        return f"answered {message.payload}"

    return {
        "lm": lm,
        "asyncio": asyncio,
        "laser": laser,
        "memory": laser.memory("notes"),
        "url": laser.log.url,
        "datetime": datetime.datetime,
        "timedelta": datetime.timedelta,
        "UTC": datetime.UTC,
        "cutoff_datetime": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC),
        "my_model": _Summarizer(),
        "Compact": _Compact,
        "MyStore": _MyStore,
        "answer_ticket": answer_ticket,
        "message": _Message("where is my order?", "t-42", "triage"),
        "builder": _graph_builder(),
        "state": {"question": "what is ERR-4021?", "answer": ""},
    }


def _raises_as_documented(text: str):
    """A block whose comment says a line raises (``# AccessDenied: ...``) must raise
    that error, and nothing else."""
    found = (getattr(lm, name, None) for name in re.findall(r"#\s*([A-Z]\w+)", text))
    named = [
        error for error in found if isinstance(error, type) and issubclass(error, lm.LaserError)
    ]
    if not named:
        return contextlib.nullcontext()
    assert len(named) == 1, f"a block documents {len(named)} errors; split it"
    return pytest.raises(named[0])


def _script(text: str) -> bool:
    """A whole program (it runs its own event loop), not a fragment."""
    return "asyncio.run(" in text


@pytest.mark.parametrize(
    "text", [text for _, text in BLOCKS if _script(text)], ids=lambda text: "script"
)
def test_a_whole_program_runs_as_written(text: str, tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-c", text],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize(
    "text",
    [text for _, text in BLOCKS if not _script(text)],
    ids=[f"line-{line}" for line, text in BLOCKS if not _script(text)],
)
async def test_a_fragment_runs_with_what_its_prose_gives(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)  # blocks open ./laser-data
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    view = tmp_path / "view"
    local = f"local://{tmp_path / 'laser-data'}"
    # What needs a broker or a server's disk runs on the embedded log and a view here.
    text = re.sub(r"kafka://[\w.,:-]+", local, text).replace("/srv/laser-view", str(view))
    code = compile(text, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    async with lm.connect(local, stream="prod") as laser:
        await laser.bootstrap()
        await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)
        folder = asyncio.create_task(ViewFolder(laser.log, laser.memory_topic_name, view).run())
        try:
            with _raises_as_documented(text):
                outcome = eval(code, stand_ins(laser))  # the README's own code
                if asyncio.iscoroutine(outcome):
                    await asyncio.wait_for(outcome, 120)
        finally:
            folder.cancel()
            await asyncio.gather(folder, return_exceptions=True)


def test_the_layout_table_names_every_module():
    """The README's layout is how a reader finds where a thing lives: a module without a
    row (three had none) is one a reader has to search for."""
    text = README.read_text(encoding="utf-8")
    layout = text[text.index("## Layout") : text.index("## Benchmarks")]
    rows = [line for line in layout.splitlines() if line.startswith("| `")]
    root = README.parent
    missing = []
    for package in ("laser_memory", "folders"):
        for module in sorted((root / package).glob("*.py")):
            if module.name == "__init__.py":
                continue
            named = f"`{package}/{module.name}`"
            # A row names its first module with its package, the others by file name.
            if not any(
                named in row or (f"`{package}/" in row and f"`{module.name}`" in row)
                for row in rows
            ):
                missing.append(f"{package}/{module.name}")
    for folder in ("laser_memory/log/", "laser_memory/integrations/"):
        if not any(f"`{folder}`" in row for row in rows):
            missing.append(folder)
    assert missing == [], f"modules with no row in the README's layout: {missing}"


def test_the_wire_format_names_every_record():
    """The wire format said seven records after `superseded` and `retrieved` made nine."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Wire format") : text.index("## Layout")]
    tags = [record.__struct_config__.tag for record in typing.get_args(MemoryRecord)]
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    words += ["ten", "eleven", "twelve"]
    assert f"{words[len(tags)]} frozen msgspec records" in section
    assert [tag for tag in tags if f"`{tag}`" not in section] == []


def command_lines() -> list[tuple[int, str]]:
    """Each ``laser-memory`` command line of the README: in shell blocks (split at ``;``
    and ``|``, comments and redirections dropped) and in the prose's code spans."""
    found = []
    in_shell = False
    for number, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() in ("```sh", "```bash", "```shell"):
            in_shell = True
            continue
        if in_shell and line.strip() == "```":
            in_shell = False
            continue
        if in_shell:
            for part in re.split(r"[;|]", re.split(r"\s#\s", line)[0]):
                part = re.split(r"\s>>?\s", part)[0].strip()
                if part.startswith("laser-memory "):
                    found.append((number, part))
        else:
            found += [(number, span) for span in re.findall(r"`(laser-memory [^`]+)`", line)]
    return found


COMMAND_LINES = command_lines()


def test_the_readme_has_its_command_lines():
    assert len(COMMAND_LINES) > 40


def _placeholder(word: str) -> bool:
    """What the reader fills in: ``...``, ``01M8...``, ``PATH``, ``BYTES``, ``TIME``."""
    return "..." in word or re.fullmatch(r"[A-Z][A-Z_]*", word) is not None


@pytest.mark.parametrize(("line", "text"), COMMAND_LINES, ids=[str(n) for n, _ in COMMAND_LINES])
def test_every_command_line_of_the_readme_parses(line: int, text: str):
    """A command or option renamed, a value of the wrong type, or a flag a command never
    took (`fold --until-caught-up`, which a reader would try) fails here rather than in a
    reader's shell. Each line is parsed as its command parses it, not run; ``[...]``
    marks what may be left out, and prose may name a command without the options it
    needs (`laser-memory stats`), so a missing one is no failure."""
    import click

    from laser_memory.cli import main

    words = shlex.split(re.sub(r"[\[\]]", "", text))[1:]
    if words == ["COMMAND", "--help"]:
        return
    name, args = words[0], words[1:]
    command = main.commands.get(name)
    assert command is not None, f"line {line}: no command {name!r}"
    ctx = click.Context(command, info_name=name)
    option = next((p for p in command.params if args and args[-1] in p.opts), None)
    if isinstance(option, click.Option) and not option.is_flag:
        args.append("VALUE")  # prose naming an option (`serve --auth`), not a whole line
    try:
        given, positional, _ = command.make_parser(ctx).parse_args(list(args))
    except click.UsageError as exc:
        pytest.fail(f"line {line}: {text!r}: {exc.format_message()}")
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    if all(p.nargs >= 0 for p in arguments):
        most = sum(p.nargs for p in arguments)
        assert len(positional) <= most, f"line {line}: {text!r}: extra {positional[most:]}"
    for param in command.params:
        value = given.get(param.name)
        if isinstance(param, click.Option) and value is not None and not param.is_flag:
            values = value if isinstance(value, list) else [value]
            for one in values:
                if isinstance(one, str) and not _placeholder(one):
                    param.type(one, param, ctx)  # a BadParameter for a wrong type


def test_the_http_routes_are_the_servers():
    """Every route the server has is in the README, every route and query parameter the
    README names is the server's, and the recall's list of parameters is whole (it
    lacked ``include_superseded``)."""
    from folders.http import _PARAMETERS

    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"GET (/v1/\w+)", text))
    assert named == set(_PARAMETERS)
    for path, query in re.findall(r"(/v1/\w+)\?([^`'\s)]+)", text):
        for parameter in re.findall(r"(?:^|&|\[&)(\w+)=", query):
            assert parameter in _PARAMETERS[path], (path, parameter)
    listed = re.search(r"`GET /v1/recall\?namespace=NS` \(with `([^`]+)`\)", text)
    assert listed is not None
    assert {"namespace", *listed.group(1).split()} == _PARAMETERS["/v1/recall"]


def _modules() -> list[Any]:
    """Every module of the package but the command line's."""
    import importlib
    import pkgutil

    import folders

    modules = []
    for package in (lm, folders):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith((".cli", "__main__")):
                continue
            try:
                modules.append(importlib.import_module(info.name))
            except ImportError:  # an optional extra that is not installed
                continue
    return modules


def _api_objects() -> dict[str, list[Any]]:
    """Every public function, class and method of the package, by name."""
    import inspect

    found: dict[str, list[Any]] = {}
    for module in _modules():
        for name, value in vars(module).items():
            if name.startswith("_") or not callable(value):
                continue
            found.setdefault(name, []).append(value)
            if inspect.isclass(value):
                for member, attribute in vars(value).items():
                    if not member.startswith("_") and callable(attribute):
                        found.setdefault(member, []).append(attribute)
    return found


def _calls_with_keywords(text: str) -> set[tuple[str, tuple[str, ...]]]:
    """(call, its keywords) of each call in a code span that gives keywords: in
    ``LocalLog(path, LocalLogConfig(map_size=BYTES))`` the keyword is the inner call's."""
    calls = set()
    for span in re.findall(r"`([A-Za-z_][\w.]*\([^`]*\))`", text):
        stack: list[tuple[str, list[str]]] = []
        for token in re.finditer(r"([A-Za-z_][\w.]*)\(|(\w+)=(?!=)|\)", span):
            if token.group(1):
                stack.append((token.group(1), []))
            elif token.group(2) and stack:
                stack[-1][1].append(token.group(2))
            elif token.group(0) == ")" and stack:
                call, keywords = stack.pop()
                if keywords:
                    calls.add((call, tuple(keywords)))
    return calls


def test_every_keyword_the_readme_gives_a_call_is_taken():
    """``connect(embedder=)``, ``named(limit=)``: each keyword the README's prose gives a
    call of ours is one that call takes (a parameter renamed would leave the prose
    naming one that is refused)."""
    import inspect

    text = README.read_text(encoding="utf-8")
    objects = _api_objects()
    wrong = []
    for call, keywords in _calls_with_keywords(text):
        name = call.rsplit(".", 1)[-1]
        if name == "put":  # LangGraph's BaseStore.put, not ours
            continue
        candidates = objects.get(name, [])
        if not candidates:
            wrong.append(f"{call}: no such function or class")
            continue
        takes: set[str] = set()
        for candidate in candidates:
            try:
                takes |= set(inspect.signature(candidate).parameters)
            except (TypeError, ValueError):
                continue
        wrong += [f"{call}({keyword}=)" for keyword in keywords if keyword not in takes]
    assert wrong == []


def test_every_class_the_readme_names_is_ours_or_named_as_anothers():
    """A class renamed (an error, a config) leaves the README naming one a reader cannot
    import. The others it names are Python's, msgspec's, aiokafka's and LangGraph's."""
    import builtins

    text = README.read_text(encoding="utf-8")
    known = set(dir(builtins)) | {"CancelledError", "DecodeError", "InMemoryStore", "NaN"}
    known |= {"LogAppendTime"}  # Kafka's timestamp type, not a class
    for module in _modules():
        known |= set(vars(module))
    named = set(re.findall(r"`([A-Z][a-z]\w*[A-Z]\w*)`", text))
    assert sorted(named - known) == []
