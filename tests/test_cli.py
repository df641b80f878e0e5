"""The command line, driven as a user would, over both logs."""

from __future__ import annotations

import ast
import asyncio
import base64
import datetime as dt
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

import laser_memory as lm
from laser_memory.cli import main


def run(*args: str, ok: bool = True) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code != 0, result.output
    return result.output


def test_a_memory_session_from_the_command_line(any_log_url: str, stream_name: str):
    common = ["--url", any_log_url, "--stream", stream_name]
    if any_log_url.startswith("kafka"):
        run("bootstrap", *common, "--partitions", "3")
    first = json.loads(
        run("remember", "the reporter prefers email", *common, "--conversation", "c1", "--json")
    )
    second = json.loads(
        run("remember", "ticket 42 is a login bug", *common, "--conversation", "c1", "--json")
    )
    wrong = json.loads(
        run(
            "remember",
            "node-9 rotates keys",
            *common,
            "--conversation",
            "c2",
            "--kind",
            "entity",
            "--json",
        )
    )
    assert first["receipt"]["topic"] == f"{stream_name}.agent.memory"
    run("improve", first["id"], "2.5", *common)
    run("forget", wrong["id"], *common, "--conversation", "c2")

    recent = json.loads(run("recall", *common, "--strategy", "recent", "--json"))
    assert [i["body"] for i in recent] == ["ticket 42 is a login bug", "the reporter prefers email"]
    ranked = json.loads(run("recall", *common, "--json"))
    assert [(i["id"], i["weight"]) for i in ranked] == [(first["id"], 2.5), (second["id"], 0.0)]
    assert ranked[0]["signals"][0]["strategy"] == "auto"
    assert (
        json.loads(run("recall", *common, "--text", "LOGIN", "--strategy", "keyword", "--json"))[0][
            "id"
        ]
        == second["id"]
    )
    # The text as an argument, as remember takes it: the same ranking as --text.
    by_query = json.loads(run("recall", "LOGIN", *common, "--strategy", "keyword", "--json"))
    assert [i["id"] for i in by_query] == [second["id"]]
    both = json.loads(run("recall", "login", *common, "--text", "login", "--json"))
    assert both[0]["id"] == second["id"]
    assert "as QUERY or as --text" in run("recall", "login", *common, "--text", "email", ok=False)
    assert json.loads(run("recall", *common, "--conversation", "c2", "--json")) == []
    assert "prefers email" in run("recall", *common, "--limit", "1")
    # An id nothing touched has an empty audit, said so (and [] in JSON), not an error.
    assert run("audit", "0" * 26, *common) == "(no records)\n"
    assert json.loads(run("audit", "0" * 26, *common, "--json")) == []

    run("set", "profile", '{"name": "Ada", "channel": "phone"}', *common)
    run("update", "profile", '{"channel": "email", "name": null}', *common)
    fetched = json.loads(run("fetch", "profile", *common, "--json"))
    assert fetched == {"key": "profile", "body": {"channel": "email"}, "version": 2}
    run("set", "prefs", "dark mode", *common)
    listed = [json.loads(line) for line in run("named", "pro", *common, "--json").splitlines()]
    assert listed == [fetched]
    # A body that is no JSON is listed as its text.
    listed = [json.loads(line) for line in run("named", *common, "--json").splitlines()]
    assert listed == [{"key": "prefs", "body": "dark mode", "version": 1}, fetched]
    assert [line.split("\t")[0] for line in run("named", *common).splitlines()] == [
        "prefs",
        "profile",
    ]
    for limit, keys in (("1", ["prefs"]), ("0", [])):
        listed = run("named", *common, "--limit", limit).splitlines()
        assert [line.split("\t")[0] for line in listed] == keys
    assert "--limit" in run("named", *common, "--limit", "-1", ok=False)
    # A remove for a version the item has moved past changes nothing.
    run("remove", "profile", *common, "--if-version", "1")
    assert json.loads(run("fetch", "profile", *common, "--json")) == fetched
    run("remove", "profile", *common, "--if-version", "2")
    assert "no named item" in run("fetch", "profile", *common, ok=False)
    # With --json an absent item is null on stdout (and still exit code 1).
    absent = CliRunner().invoke(main, ["fetch", "profile", *common, "--json"])
    assert absent.exit_code == 1 and absent.stdout == "null\n", absent.output
    assert "0" in run("remove", "prefs", *common, "--if-version", "0", ok=False)
    run("remove", "prefs", *common)
    assert run("named", *common) == ""


def test_python_m_laser_memory_is_the_command(tmp_path):
    """Where the venv's scripts are not on PATH (a container, a notebook's kernel)."""
    url = f"local://{tmp_path / 'log'}"
    done = subprocess.run(
        [sys.executable, "-m", "laser_memory", "remember", "via -m", "--url", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    recalled = subprocess.run(
        [sys.executable, "-m", "laser_memory", "recall", "--url", url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert [item["body"] for item in json.loads(recalled.stdout)] == ["via -m"]
    usage = subprocess.run(
        [sys.executable, "-m", "laser_memory", "--help"], capture_output=True, text=True, check=True
    )
    assert usage.stdout.startswith("Usage: laser-memory ")


def test_cli_errors_are_clear_and_write_nothing(tmp_path, monkeypatch):
    url = f"local://{tmp_path / 'log'}"
    monkeypatch.chdir(tmp_path)
    # An empty --url (a script's unset variable) wrote to ./laser-data.
    assert "InvalidUrl: the log URL is empty" in run("remember", "x", "--url", "", ok=False)
    assert list(tmp_path.iterdir()) == []
    assert "EmptyBody" in run("remember", "", "--url", url, ok=False)
    assert "InvalidId" in run("forget", "nope", "--url", url, ok=False)
    assert "InvalidWeight" in run("improve", "0" * 26, "nan", "--url", url, ok=False)
    assert "InvalidPatch" in run("update", "k", "[1]", "--url", url, ok=False)
    assert "not valid JSON" in run("update", "k", "{oops", "--url", url, ok=False)
    assert "InvalidUrl" in run("recall", "--url", "kafka://nohostport", ok=False)
    assert json.loads(run("recall", "--url", url, "--json")) == []


def test_demo_runs_on_the_embedded_log(tmp_path, monkeypatch):
    # `make demo` runs it without --url: a log of its own in a new temporary folder.
    import asyncio
    import tempfile

    import laser_memory as lm

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    out = run("demo")
    assert out.startswith(f"log: local://{tmp_path}/laser-demo-"), out[:200]
    log_url = out.split("\n", 1)[0].removeprefix("log: ")

    def bodies(section: str) -> list[str]:
        block = out.split(section, 1)[1].split("\n\n", 1)[0]
        return [line.split("  ")[-1].strip() for line in block.splitlines()[1:]]

    email, ticket = "the reporter prefers email over phone calls", "ticket 42 is a login bug"
    berlin, pool = "the reporter is in the Berlin office", "node-7 sits in the eu-west pool"
    assert bodies("recall, newest first") == [pool, berlin, ticket + " on the mobile app", email]
    assert bodies("recall ranked by feedback")[0] == email  # improved by 2.0
    assert bodies("sharing a word with 'login email'") == [email, ticket + " on the mobile app"]
    assert 'profile (version 3): {"name":"Ada","channel":"email","office":"Berlin"}' in out
    partition = int(re.search(r"came from demo\.agent\.memory partition (\d+)", out)[1])

    async def partitions() -> int:
        async with lm.connect(log_url, create=False) as laser:
            return (await laser.log.describe_topic("demo.agent.memory")).partitions

    assert 0 <= partition < asyncio.run(partitions()) == 4
    recalled = out.split("recall, newest first")[1].split("named item")[0]
    assert "node-7" in recalled and "node-9" not in recalled
    assert '"channel":"email"' in out and "omitted" in out
    assert "planning-7 knew: ['node-9 rotates keys monthly', 'node-7 sits" in out
    assert "just after it was forgotten: ['node-7 sits in the eu-west pool']" in out
    replayed = re.search(r"since the forget's millisecond \(it may share it\): (\[.*\])", out)
    ops = ast.literal_eval(replayed[1])
    assert "forget" in ops and ops[-3:] == ["named.set", "named.patch", "named.patch"]
    managed = out.split("recall from the managed view")[1]
    assert "the reporter prefers email" in managed and "['remember', 'feedback']" in managed


def test_negative_weights_work_from_the_shell(any_log_url: str, stream_name: str):
    common = ["--url", any_log_url, "--stream", stream_name]
    if any_log_url.startswith("kafka"):
        run("bootstrap", *common, "--partitions", "3")
    mid = json.loads(run("remember", "a fact", *common, "--json"))["id"]
    run("improve", mid, "-1.5", *common)
    [item] = json.loads(run("recall", *common, "--json"))
    assert item["weight"] == -1.5


def test_recall_prints_a_context_block_for_a_prompt(tmp_path):
    """What an agent pastes into a prompt, from a shell: the SDK had context() and
    recall(block=True), the CLI only its listing."""
    common = ["--url", f"local://{tmp_path / 'log'}"]
    for body in ("first fact", "second fact", "third fact"):
        run("remember", body, *common, "--conversation", "c1")
    run("remember", "another conversation", *common, "--conversation", "c2")
    block = ["- [fact] third fact", "- [fact] second fact", "- [fact] first fact"]
    assert run("recall", *common, "--conversation", "c1", "--block").splitlines() == block
    # "- [fact] third fact\n" is 5 tokens: a budget of 5 keeps it and says what it left.
    budgeted = run("recall", *common, "--conversation", "c1", "--block", "--token-budget", "5")
    assert budgeted.splitlines() == [block[0], "[... 2 more recalled item(s) omitted ...]"]
    as_json = run("recall", *common, "--conversation", "c1", "--block", "--json")
    assert json.loads(as_json) == "\n".join(block)
    run("remember", "un café noté", *common, "--conversation", "c3")
    # Text as it is, as every --json output gives it (not \u escapes).
    assert "un café noté" in run("recall", *common, "--conversation", "c3", "--block", "--json")
    # Of a moment, with no header line (the block is text for a prompt).
    now = str(int(time.time() * 1000) + 60_000)
    of_then = run("recall", *common, "--conversation", "c1", "--block", "--as-of", now)
    assert of_then.splitlines() == block
    said = run("recall", *common, "--token-budget", "5", ok=False)
    assert "--token-budget budgets a --block" in said


def test_recall_as_of_a_moment_shows_what_was_known_then(
    any_log_url: str, stream_name: str, tmp_path
):
    """An auditor's question from the shell: what could the agent recall at that moment?
    Folded from the log up to it, even with a view (which holds only the present)."""
    common = ["--url", any_log_url, "--stream", stream_name]
    if any_log_url.startswith("kafka"):
        run("bootstrap", *common, "--partitions", "3")
    old = json.loads(run("remember", "the key rotates monthly", *common, "--json"))
    then = old["receipt"]["append_time_ms"]
    new = json.loads(run("remember", "the key rotates weekly", *common, "--json"))
    run("forget", old["id"], *common)
    now = new["receipt"]["append_time_ms"] + 60_000
    view = str(tmp_path / "view")
    run("rebuild", *common, "--view", view)

    def recalled(*args: str) -> list[str]:
        return [i["body"] for i in json.loads(run("recall", *common, *args, "--json"))]

    assert recalled("--view", view) == ["the key rotates weekly"]
    assert recalled("--as-of", str(then), "--view", view) == ["the key rotates monthly"]
    assert recalled("--as-of", str(now), "key") == ["the key rotates weekly"]
    assert recalled("--as-of", "1970-01-01T00:00:00Z") == []
    iso = dt.datetime.fromtimestamp(then / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
    assert recalled("--as-of", iso.replace("+00:00", "")) == ["the key rotates monthly"]
    printed = run("recall", *common, "--as-of", str(then)).splitlines()
    position = f"{old['receipt']['partition']}@{old['receipt']['offset'] + 1}"
    assert printed[0].startswith(f"as of {iso.replace('+00:00', 'Z')} (read up to")
    assert position in printed[0] and "the key rotates monthly" in printed[1]
    assert "is neither milliseconds" in run("recall", *common, "--as-of", "yesterday", ok=False)
    # A named item as it stood: its value then, and absent before it was set.
    first = json.loads(run("set", "plan", '{"tier": "free"}', *common, "--json"))
    run("update", "plan", '{"tier": "pro"}', *common)
    at = str(first["receipt"]["append_time_ms"])
    fetched = json.loads(run("fetch", "plan", *common, "--as-of", at, "--json"))
    assert fetched == {"key": "plan", "body": {"tier": "free"}, "version": 1}
    assert json.loads(run("fetch", "plan", *common, "--json"))["body"] == {"tier": "pro"}
    assert "no named item" in run("fetch", "plan", *common, "--as-of", str(then), ok=False)
    # The named items as they stood: the plan at its first version, and none before it.
    listed = run("named", *common, "--as-of", at, "--json").splitlines()
    assert [json.loads(line) for line in listed] == [fetched]
    assert run("named", *common, "--as-of", str(then)) == ""
    assert json.loads(run("named", *common, "--json"))["version"] == 2
    both = run("fetch", "plan", *common, "--as-of", at, "--version", "1", "--view", view, ok=False)
    assert "give one" in both


def test_bad_input_is_a_message_never_a_traceback(tmp_path):
    common = ["--url", f"local://{tmp_path / 'log'}"]
    cases = [
        ("set", "k", '{"a": NaN}'),
        ("set", "k", "[" * 5000 + "]" * 5000),
        ("update", "k", '{"a":' * 5000 + "1" + "}" * 5000),
        ("update", "k", '{"a": Infinity}'),
        ("remember", "lone \udcff surrogate"),
        ("set", "k", "\udcff"),
        ("improve", "0" * 26, "1e400"),
        ("recall", "--limit", "1000000000000"),
        ("replay", "--since", "²"),
    ]
    for args in cases:
        result = CliRunner().invoke(main, [*args, *common])
        assert result.exit_code != 0, args
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            args,
            result.exception,
        )
        assert "Traceback" not in result.output
    # Nothing was written by any of them: the log, if made at all, holds no record.
    assert run("recall", *common) == "(nothing recalled)\n"
    assert run("fetch", "k", *common, ok=False).startswith("Error: no named item")


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--status-every", "-1"], "--status-every': -1.0 is no number of seconds"),
        (["--status-every", "nan"], "--status-every': nan is no number of seconds"),
        (["--status-every", "inf"], "--status-every': inf is no number of seconds"),
        (["--topic", ""], "'' is not a valid topic name"),
    ],
)
def test_a_folders_options_are_checked(tmp_path, option, says):
    # A negative or nan interval read as "no status", an infinite one as a status never
    # due, and an empty topic as the stream's: each is refused, and no view is made.
    log = f"local://{tmp_path / 'log'}"
    run("remember", "x", "--url", log)
    view = tmp_path / "view"
    result = CliRunner().invoke(
        main, ["fold", "--url", log, "--view", str(view), "--exit-when-caught-up", *option]
    )
    assert result.exit_code != 0
    assert says in result.output
    assert not view.exists()


def test_listings_print_a_body_on_its_own_line_with_its_control_characters_escaped(tmp_path):
    # An agent's body printed as it was forged lines of an auditor's listing (a remember
    # whose body read as a forget after it) and drove the terminal with escape sequences.
    # Each record is one line, its control characters escaped; --json keeps it exact.
    common = ["--url", f"local://{tmp_path / 'log'}"]
    forged = "ok\n2026-12-05T00:00:00.000Z  forget       01M91V3YYX8HJRMC3JC40P9Y4E\x1b[2J"
    mid = run("remember", forged, *common).split()[0]
    run("set", "k", forged, *common)
    escaped = "ok\\n2026-12-05T00:00:00.000Z  forget       01M91V3YYX8HJRMC3JC40P9Y4E\\x1b[2J"
    for args, lines in (
        (("recall",), 1),
        (("replay",), 2),
        (("audit", mid), 1),
        (("named",), 1),
    ):
        output = run(*args, *common)
        assert len(output.splitlines()) == lines, (args, output)
        assert escaped in output and "\x1b" not in output, (args, output)
    [item] = json.loads(run("recall", "--json", *common))
    assert item["body"] == forged
    # One value, printed as it is (click drops escape sequences when not a terminal).
    assert run("fetch", "k", *common).startswith("ok\n2026-12-05T00:00:00.000Z  forget")
    # Bidirectional controls (a name may hold them) reorder how the rest of a line is
    # shown: an override in a conversation or a key showed the body, or the operation
    # after it, backwards. Escaped wherever a listing prints what a producer wrote; a
    # line separator too, where some viewers break a line.
    other = ["--url", f"local://{tmp_path / 'other'}"]
    mid = run("remember", "evil\u2066 body\u2028", "--conversation", "c\u202e", *other)
    mid = mid.split()[0]
    run("set", "k\u202e", "value\u200f", *other)
    for args in (("recall",), ("replay",), ("audit", mid), ("named",)):
        output = run(*args, *other)
        for control in ("\u202e", "\u2066", "\u2028", "\u200f"):
            assert control not in output, (args, control, output)
        assert "\\u202e" in output, (args, output)
    assert json.loads(run("recall", "--json", *other))[0]["scope"]["conversation"] == "c\u202e"


def test_json_output_gives_a_body_that_is_no_utf8_exactly(tmp_path):
    """A body remembered as bytes came out of --json (and HTTP) with its undecodable bytes
    replaced, so no reader could get it back: body_base64 carries it exactly."""
    url = f"local://{tmp_path / 'log'}"
    blob, text = b"\x89PNG\r\n\x1a\n\xff", "caf\u00e9"

    async def write() -> None:
        async with lm.connect(url) as laser:
            memory = laser.memory("notes")
            await memory.remember(blob, conversation="c1")
            await memory.remember(text, conversation="c1")
            await memory.set("blob", blob)

    asyncio.run(write())
    common = ["--url", url]
    recalled = json.loads(run("recall", *common, "--strategy", "recent", "--json"))
    assert [i["body"] for i in recalled] == [text, blob.decode("utf-8", "replace")]
    assert "body_base64" not in recalled[0]  # text is given as text alone
    assert base64.b64decode(recalled[1]["body_base64"]) == blob
    for args in (("replay",), ("audit", recalled[1]["id"]), ("named",), ("fetch", "blob")):
        printed = [json.loads(line) for line in run(*args, *common, "--json").splitlines()]
        entries = printed[0] if isinstance(printed[0], list) else printed  # audit: one list
        given = [base64.b64decode(e["body_base64"]) for e in entries if "body_base64" in e]
        assert given == [blob] * (2 if args == ("replay",) else 1), (args, printed)
    # One value, printed as it is: its bytes.
    printed = CliRunner().invoke(main, ["fetch", "blob", *common], catch_exceptions=False)
    assert printed.stdout_bytes == blob + b"\n"


def test_a_dash_reads_text_bodies_and_patches_from_standard_input(tmp_path):
    """`cat notes.txt | laser-memory remember -` stored the text "-"."""
    common = ["--url", f"local://{tmp_path / 'log'}"]

    def piped(data: bytes, *args: str, ok: bool = True) -> str:
        result = CliRunner().invoke(main, [*args, *common], input=data)
        assert (result.exit_code == 0) is ok, result.output
        return result.output

    piped(b"line one\nline two\n", "remember", "-", "--conversation", "c1")
    piped(b"\x89PNG\r\n\x1a\n", "remember", "-", "--conversation", "c2")
    piped(b'{"tier": "free", "seats": 3}\r\n', "set", "plan", "-")
    piped(b'{"seats": null}', "update", "plan", "-")
    assert "no UTF-8" in piped(b"\xff", "update", "plan", "-", ok=False)
    assert "EmptyBody" in piped(b"\n", "remember", "-", ok=False)
    # Read no further than a body can hold (it was read whole first, however large).
    most = lm.MemoryConfig().max_body_bytes
    assert "more than 1048576 bytes" in piped(b"a" * (most + 3), "remember", "-", ok=False)
    assert "1048577 bytes, over" in piped(b"a" * (most + 1) + b"\n", "remember", "-", ok=False)
    items = {i["scope"]["conversation"]: i for i in json.loads(run("recall", *common, "--json"))}
    # One trailing newline dropped, as $(...) drops it; the rest as piped.
    assert items["c1"]["body"] == "line one\nline two"
    assert base64.b64decode(items["c2"]["body_base64"]) == b"\x89PNG\r\n\x1a"
    assert json.loads(run("fetch", "plan", *common, "--json"))["body"] == {"tier": "free"}
    run("remember", *common, "--", "-x-")  # only "-" alone reads the input
    assert "-x-" in run("recall", *common)


def test_named_bodies_are_json_or_text_and_json_output_is_strict(tmp_path):
    common = ["--url", f"local://{tmp_path / 'log'}"]
    run("set", "k", "plain text", *common)
    assert json.loads(run("fetch", "k", "--json", *common))["body"] == "plain text"
    assert "not valid JSON" in run("set", "k", "{ looks like json", *common, ok=False)
    run("set", "j", '{"a": [1, 2]}', *common)
    assert json.loads(run("fetch", "j", "--json", *common))["body"] == {"a": [1, 2]}


def test_every_json_output_is_strict_json(tmp_path):
    """Every command that takes --json prints JSON a strict parser reads (one document,
    or one a line): a script piping it to jq must never meet a bare text line."""

    def strict(line: str) -> object:
        def refuse(constant: str) -> object:
            raise AssertionError(f"{constant} in {line!r}")

        return json.loads(line, parse_constant=refuse)

    url, view = f"local://{tmp_path / 'log'}", str(tmp_path / "view")
    common = ["--url", url]
    mid = strict(run("remember", "a fact", *common, "--conversation", "c1", "--json"))["id"]
    moment = str(int(time.time() * 1000) + 60_000)
    commands = [
        ["bootstrap", *common],
        ["improve", mid, "1.5", *common],
        ["set", "k", '{"a": 1}', *common],
        ["update", "k", '{"b": 2}', *common],
        ["fetch", "k", *common],
        ["fetch", "k", *common, "--as-of", moment],
        ["named", *common],
        ["named", *common, "--as-of", moment],
        ["recall", *common],
        ["recall", "fact", *common, "--as-of", moment],
        ["recall", *common, "--block", "--token-budget", "5"],
        ["audit", mid, *common],
        ["replay", *common],
        ["reembed", *common, "--embedder", "word-hash"],
        ["remove", "k", *common],
        ["forget", mid, *common, "--conversation", "c1"],
        ["purge", "--expired", *common],
        ["rebuild", *common, "--view", view],
        ["stats", "--view", view, "--url", url],
        ["index", *common, "--view", view],
    ]
    taking = {n for n, c in main.commands.items() if any("--json" in p.opts for p in c.params)}
    assert {c[0] for c in commands} | {"remember"} >= taking - {"rebuild"}, "a command untried"
    for command in commands:
        if command[0] not in taking:
            run(*command)
            continue
        result = CliRunner().invoke(main, [*command, "--json"], catch_exceptions=False)
        assert result.exit_code == 0, (command, result.output)
        printed = result.stdout  # what a pipe reads: progress goes to stderr
        lines = printed.splitlines()
        assert lines, command
        try:
            strict(printed)
        except json.JSONDecodeError:
            for line in lines:
                strict(line)


def test_reads_never_create_a_log_a_view_or_a_topic(tmp_path):
    missing = tmp_path / "typo"
    for args in (
        ("recall", "--url", f"local://{missing}"),
        ("replay", "--url", f"local://{missing}"),
        ("fetch", "k", "--url", f"local://{missing}"),
        ("named", "--url", f"local://{missing}"),
        ("audit", "0" * 26, "--url", f"local://{missing}"),
        ("stats", "--view", str(missing)),
        ("recall", "--url", f"local://{tmp_path / 'log'}", "--view", str(missing)),
    ):
        if args[0] == "recall" and "--view" in args:
            run("remember", "x", "--url", f"local://{tmp_path / 'log'}")
        output = run(*args, ok=False)
        assert "no log at" in output or "no view at" in output, (args, output)
        assert not missing.exists(), args
    # A read of a log that exists creates no topic in it.
    log = tmp_path / "empty"
    run("bootstrap", "--url", f"local://{log}", "--stream", "a")
    run("recall", "--url", f"local://{log}", "--stream", "b")
    said = run("replay", "--url", f"local://{log}", "--stream", "b", ok=False)
    assert "topic 'b.agent.memory' does not exist" in said, said

    async def topics() -> list[str]:
        from laser_memory.log import connect_log

        async with connect_log(f"local://{log}") as opened:
            names = []
            for name in ("a.agent.memory", "b.agent.memory"):
                try:
                    await opened.describe_topic(name)
                    names.append(name)
                except Exception:
                    pass
            return names

    import asyncio

    assert asyncio.run(topics()) == ["a.agent.memory"]


def test_replay_says_what_each_record_did_and_which_it_set_aside(tmp_path):
    """A replacement names the item that replaced, another model's vector its size and
    model, and a record no fold can read is listed with why (operators only): none of
    these lines had a test."""
    import asyncio

    import laser_memory as lm
    from laser_memory.log import OutgoingRecord

    class Other(lm.WordHashEmbedder):
        label = "test/other"

    url = f"local://{tmp_path / 'log'}"

    async def write() -> tuple[lm.MemoryId, lm.MemoryId]:
        async with lm.connect(url, embedder=lm.WordHashEmbedder()) as laser:
            memory = laser.memory("notes")
            old = await memory.remember("node-7 runs billing")
            new = await memory.remember("node-7 runs billing and audit", supersedes=old)
            await memory.reembed(Other())
            await laser.log.append(memory.topic, OutgoingRecord(b"\xc1 junk", key=b"x"))
            return old, new

    old, new = asyncio.run(write())
    lines = run("replay", "--url", url, "--all-tenants").splitlines()
    assert any(f"superseded   {old}" in line and f"by {new}" in line for line in lines)
    assert sum(f"64-d vector of {Other.label}" in line for line in lines) == 2
    [aside] = [line for line in lines if "(set aside)" in line]
    assert "not a memory record" in aside
    records = [
        json.loads(line)
        for line in run("replay", "--url", url, "--all-tenants", "--json").splitlines()
    ]
    [error] = [r for r in records if "error" in r]
    assert "not a memory record" in error["error"] and error["offset"] >= 0
    # A tenant's replay leaves out what nobody can tell the tenant of.
    assert "(set aside)" not in run("replay", "--url", url)


def test_replay_names_the_item_each_record_touched(tmp_path):
    common = ["--url", f"local://{tmp_path / 'log'}"]
    mid = json.loads(run("remember", "café au lait", *common, "--conversation", "c1", "--json"))[
        "id"
    ]
    run("improve", mid, "1.5", *common)
    run("forget", mid, *common, "--conversation", "c1")
    run("set", "profile", '{"channel": "email"}', *common)
    remembered, improved, forgot, named = run("replay", *common).splitlines()
    assert f" remember     {mid} c1 " in remembered and remembered.endswith("café au lait")
    assert f" feedback     {mid} " in improved and improved.endswith("weight 1.5")
    assert f" forget       {mid} c1" in forgot
    assert " named.set    profile " in named and named.endswith('{"channel":"email"}')
    raw = CliRunner().invoke(main, ["replay", *common, "--json"])
    assert "café au lait" in raw.output  # not "caf\u00e9"
    records = [json.loads(line) for line in raw.output.splitlines()]
    assert [(r["op"], r.get("id")) for r in records] == [
        ("remember", mid),
        ("feedback", mid),
        ("forget", mid),
        ("named.set", None),
    ]
    assert not any("version" in r for r in records)  # a version is the view's, not the log's
    said = run("replay", *common, "--tenant", "bad\x00tenant", ok=False)
    assert "tenant" in said, said


def test_replay_shows_one_tenant_unless_an_operator_asks_for_all(tmp_path):
    common = ["--url", f"local://{tmp_path / 'log'}"]
    run("remember", "ours", *common, "--tenant", "acme")
    run("remember", "theirs", *common, "--tenant", "globex")
    run("remember", "default", *common)

    def bodies(*extra: str) -> list[str]:
        lines = run("replay", *common, "--json", *extra).splitlines()
        return [json.loads(line)["body"] for line in lines]

    assert bodies() == ["default"]
    assert bodies("--tenant", "acme") == ["ours"]
    assert bodies("--all-tenants") == ["ours", "theirs", "default"]
    run("replay", *common, "--tenant", "acme", "--all-tenants", ok=False)
    # --since and --until take the records appended at the moments they name.
    every = [
        json.loads(line) for line in run("replay", *common, "--json", "--all-tenants").splitlines()
    ]
    middle = every[1]["append_time_ms"]
    assert bodies("--all-tenants", "--since", str(middle)) == [
        e["body"] for e in every if e["append_time_ms"] >= middle
    ]
    assert bodies("--all-tenants", "--until", str(middle)) == [
        e["body"] for e in every if e["append_time_ms"] <= middle
    ]
    assert "theirs" in bodies("--all-tenants", "--since", str(middle), "--until", str(middle))
    # A range with nothing in it, or past the last millisecond a log holds, is refused,
    # not printed as an empty audit (as if nothing had been written then).
    for since, until, says in (
        (str(middle + 1), str(middle), "--since ("),
        ("2026-12-05T10:00", "2026-12-05T09:00", "is after --until"),
        (str(1 << 63), None, "past the last millisecond"),
        ("-5", None, "a whole number from 0"),
        ("1.5e3", None, "a whole number from 0"),
        ("nan", None, "a whole number from 0"),
        ("soon", None, "neither milliseconds"),
        ("9" * 5000, None, "past the last millisecond"),  # int() of it raised ValueError
        ("0" * 5000 + "3", "2", "--since ("),  # leading zeros: still the number 3
    ):
        result = CliRunner().invoke(
            main,
            ["replay", *common, "--since", since, *(["--until", until] if until else [])],
        )
        assert result.exit_code == 2 and says in result.output, result.output


def test_purge_from_the_command_line(any_log_url: str, stream_name: str):
    import time

    common = ["--url", any_log_url, "--stream", stream_name]
    if any_log_url.startswith("kafka"):
        run("bootstrap", *common, "--partitions", "3")
    for n in range(3):
        run("remember", f"old fact {n}", *common)
    time.sleep(1.2)
    run("remember", "new fact", *common)
    out = json.loads(run("purge", "--older-than", "1s", "--limit", "2", *common, "--json"))
    assert out == {"forgotten": 3}  # two batches: 2, then 1
    left = json.loads(run("recall", *common, "--json"))
    assert [i["body"] for i in left] == ["new fact"]
    nothing = CliRunner().invoke(main, ["purge", "--older-than", "1d", *common])
    assert "0 forgotten" in nothing.stdout and "forgot" not in nothing.stderr  # no progress
    for bad in ("-5s", "90x", "", "nan"):
        assert "no age" in run("purge", "--older-than", bad, *common, ok=False)
    # Expiry: remember --ttl, then purge --expired once it passed.
    run("remember", "door code 4471", "--ttl", "1s", *common)
    run("remember", "door code policy", "--ttl", "1d", *common)
    assert "0 forgotten" in run("purge", "--expired", *common)
    time.sleep(1.2)
    bodies = [i["body"] for i in json.loads(run("recall", *common, "--json"))]
    assert bodies == ["door code policy", "new fact"]  # gone from recall at once
    assert "1 forgotten" in run("purge", "--expired", *common)
    assert "say what to forget" in run("purge", *common, ok=False)
    assert "no age" in run("remember", "x", "--ttl", "soon", *common, ok=False)
    # An age of 0 is every item, as asked; each batch says how far it got on stderr.
    every = CliRunner().invoke(main, ["purge", "--older-than", "0s", "--limit", "1", *common])
    assert every.exit_code == 0, every.output
    assert every.stdout == "2 forgotten\n"
    assert every.stderr == "forgot 1 (1 so far)\nforgot 1 (2 so far)\n"
    assert json.loads(run("recall", *common, "--json")) == []


def test_bootstrap_makes_four_partitions_unless_told_and_says_so_in_json(tmp_path):
    common = ["--url", f"local://{tmp_path / 'log'}", "--stream", "s"]
    made = [json.loads(line) for line in run("bootstrap", *common, "--json").splitlines()]
    assert made == [
        {"topic": "s.agent.memory", "partitions": 4},
        {"topic": "s.agent.sessions", "partitions": 4},
    ]


def test_recall_gives_the_newest_50_unless_told(tmp_path):
    """As recall() and HTTP do; --limit 0 is a recall of nothing, not refused."""
    url = f"local://{tmp_path / 'log'}"

    async def write() -> list[str]:
        async with lm.connect(url) as laser:
            ids = await laser.memory("notes").remember_many([f"fact {n}" for n in range(51)])
            return [str(mid) for mid in ids]

    written = asyncio.run(write())
    recalled = [item["id"] for item in json.loads(run("recall", "--url", url, "--json"))]
    assert len(recalled) == 50 and set(recalled) <= set(written)
    assert json.loads(run("recall", "--url", url, "--limit", "0", "--json")) == []


def test_remember_options_reach_the_record(tmp_path):
    """Each of remember's options as the item recalls it: the kind (a fact unless
    given), --durable, --dedup (the same text once) and --ttl in every unit."""
    common = ["--url", f"local://{tmp_path / 'log'}"]
    ages = {"45s": 45, "30m": 30 * 60, "1.5h": 5_400, "2d": 2 * 86_400, "90": 90}
    ids = {
        age: json.loads(run("remember", f"ttl {age}", "--ttl", age, *common, "--json"))["id"]
        for age in ages
    }
    durable = json.loads(run("remember", "kept", "--durable", *common, "--json"))["id"]
    once = json.loads(run("remember", "same fact", "--dedup", *common, "--json"))["id"]
    again = json.loads(run("remember", "same fact", "--dedup", *common, "--json"))["id"]
    twice = json.loads(run("remember", "same fact", *common, "--json"))["id"]
    assert once == again != twice
    items = {item["id"]: item for item in json.loads(run("recall", *common, "--json"))}
    for age, seconds in ages.items():
        item = items[ids[age]]
        # Set by the writer's clock as it wrote, a millisecond or so before the append.
        lasts = item["expires_at_ms"] - item["append_time_ms"]
        assert seconds * 1000 - 1000 < lasts <= seconds * 1000, (age, lasts)
    assert items[durable]["lifetime"] == "durable" and items[durable]["expires_at_ms"] is None
    assert {items[ids["45s"]]["lifetime"], items[twice]["lifetime"]} == {"session"}
    assert {item["kind"] for item in items.values()} == {"fact"}
    assert len(items) == 8  # the deduplicated fact is one item


def test_fold_prints_status_lines_as_often_as_asked_and_none_at_0(tmp_path):
    url, view = f"local://{tmp_path / 'log'}", str(tmp_path / "view")
    run("remember", "first", "--url", url)
    fold = ["fold", "--url", url, "--view", view, "--exit-when-caught-up"]
    quiet = CliRunner().invoke(main, [*fold, "--status-every", "0"])
    assert quiet.exit_code == 0, quiet.output
    assert "folded 1 records\n" in quiet.stderr and "watermark" not in quiet.stderr
    run("remember", "second", "--url", url)
    chatty = CliRunner().invoke(main, [*fold, "--status-every", "0.000001"])
    assert chatty.exit_code == 0, chatty.output
    assert re.search(r"^folded 1 records; watermark \{.*\}$", chatty.stderr, re.M), chatty.stderr
    assert chatty.stdout == ""  # status is for people: stdout stays empty
    assert "view:       " + view in run("stats", "--view", view)


def test_fold_and_rebuild_freeze_start_up_objects_only_while_they_fold(tmp_path, monkeypatch):
    """The garbage collector's full collections walked every object of the process's
    start-up at each pass of a long fold: `fold` and `rebuild` freeze them while they
    fold, and unfreeze them after (as a failed fold does), so a program that runs the
    command inside itself gets its collector back as it was; one that froze objects of
    its own keeps them frozen."""
    import gc

    from folders.service import ViewFolder

    url, view = f"local://{tmp_path / 'log'}", str(tmp_path / "view")
    run("remember", "first", "--url", url)
    frozen_while_folding: list[int] = []
    real_run = ViewFolder.run

    async def watched_run(self, *args, **kwargs):
        frozen_while_folding.append(gc.get_freeze_count())
        return await real_run(self, *args, **kwargs)

    monkeypatch.setattr(ViewFolder, "run", watched_run)
    assert gc.get_freeze_count() == 0
    run("fold", "--url", url, "--view", view, "--exit-when-caught-up")
    run("rebuild", "--url", url, "--view", view)
    assert len(frozen_while_folding) == 2 and min(frozen_while_folding) > 1000
    assert gc.get_freeze_count() == 0

    async def failing_run(self, *args, **kwargs):
        frozen_while_folding.append(gc.get_freeze_count())
        raise lm.ViewMismatch("the view belongs to another log")

    monkeypatch.setattr(ViewFolder, "run", failing_run)
    said = run("rebuild", "--url", url, "--view", view, ok=False)
    assert "another log" in said and frozen_while_folding[-1] > 1000
    assert gc.get_freeze_count() == 0

    # A host that froze its own objects: left frozen, and not frozen further by us.
    monkeypatch.setattr(ViewFolder, "run", watched_run)
    gc.freeze()
    try:
        own = gc.get_freeze_count()
        run("rebuild", "--url", url, "--view", view)
        assert frozen_while_folding[-1] == own and gc.get_freeze_count() == own
    finally:
        gc.unfreeze()


def test_writes_say_what_they_wrote_and_an_age_without_a_unit_is_seconds(tmp_path):
    """Each write prints what it wrote and where (the id or key, then topic/partition@offset;
    with --json, both as JSON), progress goes to stderr so stdout stays the answer, JSON
    keeps a body's letters as they are, and an age given as a bare number is seconds."""
    common = ["--url", f"local://{tmp_path / 'log'}", "--stream", "s"]
    topics = run("bootstrap", *common, "--partitions", "2")
    assert re.search(r"^s\.agent\.memory: 2 partitions$", topics, re.M), topics
    written = json.loads(run("remember", "café au lait", *common, "--ttl", "90", "--json"))
    where = re.compile(r"s\.agent\.memory/\d+@\d+")
    improved = run("improve", written["id"], "1.5", *common)
    assert improved.startswith(f"{written['id']} ") and where.search(improved), improved
    as_json = json.loads(run("improve", written["id"], "1", *common, "--json"))
    assert as_json["id"] == written["id"] and as_json["receipt"]["topic"] == "s.agent.memory"
    named = run("set", "profile", '{"channel": "email"}', *common)
    assert named.startswith("profile ") and where.search(named), named
    patched = run("update", "profile", '{"office": "Berlin"}', *common)
    assert patched.startswith("profile ") and where.search(patched), patched
    raw = CliRunner().invoke(main, ["recall", *common, "--json"], catch_exceptions=False)
    assert "café au lait" in raw.output  # not "caf\u00e9"
    (item,) = json.loads(raw.output)
    # Set by the writer's clock as it wrote, a millisecond or so before the log's append.
    assert 89_000 < item["expires_at_ms"] - item["append_time_ms"] <= 90_000
    # An hour given in seconds: the item, a second old, is not older than that.
    assert json.loads(run("purge", "--older-than", "3600", *common, "--json")) == {"forgotten": 0}
    rebuilt = CliRunner().invoke(main, ["rebuild", "--view", str(tmp_path / "view"), *common])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "rebuilt" in rebuilt.stderr and "rebuilt" not in rebuilt.stdout
    stats = run("stats", "--view", str(tmp_path / "view"))
    for line in ("items:      1", "named:      1", "set aside:  0", "watermark:  {"):
        assert f"\n{line}" in stats, stats
    gone = json.loads(run("remove", "profile", *common, "--json"))
    assert gone["key"] == "profile" and gone["receipt"]["topic"] == "s.agent.memory"
    forgotten = run("forget", written["id"], *common)
    assert forgotten.startswith(f"{written['id']} ") and where.search(forgotten), forgotten


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_running_folder_stops_cleanly_on_a_signal_and_a_restart_resumes(tmp_path, stop):
    # What a service manager does: start the folder, later ask it to stop.
    url, view = f"local://{tmp_path / 'log'}", str(tmp_path / "view")
    run("remember", "before the folder", "--url", url)
    command = [sys.executable, "-c", "from laser_memory.cli import main; main()"]

    def items() -> int:
        # The folder says "folding" before it opens the view: on a busy machine a read
        # can come first and find no view yet.
        result = CliRunner().invoke(main, ["stats", "--view", view, "--json"])
        if result.exit_code and "NoView" in result.output:
            return 0
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["items"]

    # As a context manager: a failed assertion still reaps the folder and closes its
    # pipe, which would otherwise fail a later test with their ResourceWarnings.
    with subprocess.Popen(
        [*command, "fold", "--url", url, "--view", view],
        stderr=subprocess.PIPE,
        text=True,
    ) as folder:
        try:
            assert "folding" in folder.stderr.readline()
            run("remember", "while it runs", "--url", url)
            deadline = time.monotonic() + 30
            while items() < 2:
                assert time.monotonic() < deadline, "the folder did not fold the new item"
                time.sleep(0.05)
            folder.send_signal(stop)
            rest = folder.communicate(timeout=30)[1]
        finally:
            folder.kill()
    assert folder.returncode == 0, rest
    assert re.search(rf"stopped by {stop.name}: folded 2 records; watermark {{\d+: 2}}", rest)
    assert "folded None" not in rest  # the stop's line is the last: no end-of-run line
    run("remember", "after it stopped", "--url", url)
    resumed = run("fold", "--url", url, "--view", view, "--exit-when-caught-up")
    assert "folded 1 records" in resumed


def test_replay_of_every_namespace_names_each_records_namespace(tmp_path):
    # An operator's audit of the whole stream: every namespace of its memory topic, one
    # tenant's still (another's never), each line saying whose namespace it is.
    url = f"local://{tmp_path / 'log'}"
    run("remember", "a note", "--url", url, "--namespace", "notes")
    run("remember", "a plan", "--url", url, "--namespace", "plans")
    run("remember", "globex's", "--url", url, "--namespace", "plans", "--tenant", "globex")
    lines = run("replay", "--url", url, "--all-namespaces", "--json").splitlines()
    assert sorted((d["namespace"], d["body"]) for d in map(json.loads, lines)) == [
        ("notes", "a note"),
        ("plans", "a plan"),
    ]
    text = run("replay", "--url", url, "--all-namespaces")
    assert re.search(r"Z  notes  remember .* a note", text), text
    assert re.search(r"Z  plans  remember .* a plan", text), text
    one = [json.loads(line) for line in run("replay", "--url", url, "--json").splitlines()]
    assert [d["namespace"] for d in one] == ["notes"]  # the default namespace alone
    both = CliRunner().invoke(main, ["replay", "--url", url, "-n", "plans", "--all-namespaces"])
    assert both.exit_code == 2 and "exclude each other" in both.output


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_replay_follow_prints_what_is_appended_until_stopped(tmp_path, stop):
    # An operator's tail of the memory: the records so far, then each one appended, as
    # it comes, until a Ctrl-C or a service manager's stop, which is a clean exit.
    url = f"local://{tmp_path / 'log'}"
    run("remember", "before the tail", "--url", url)
    run("remember", "another tenant's", "--url", url, "--tenant", "globex")
    command = [sys.executable, "-c", "from laser_memory.cli import main; main()"]
    with subprocess.Popen(
        [*command, "replay", "--url", url, "--follow", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as tail:
        try:
            assert json.loads(tail.stdout.readline())["body"] == "before the tail"
            run("remember", "globex again", "--url", url, "--tenant", "globex")
            run("remember", "while it follows", "--url", url)
            assert json.loads(tail.stdout.readline())["body"] == "while it follows"
            tail.send_signal(stop)
            rest, said = tail.communicate(timeout=30)
        finally:
            tail.kill()
    assert tail.returncode == 0, said
    assert rest == "" and f"stopped by {stop.name}" in said
    usage = CliRunner().invoke(main, ["replay", "--url", url, "--follow", "--until", "0"])
    assert usage.exit_code == 2 and "--follow has no end" in usage.output


def test_fold_and_rebuild_of_a_topic_not_made_yet_say_so_and_make_nothing(tmp_path):
    """A folder started before the first write (or with a mistyped --stream) is told
    what to do, and leaves no view; a rebuild of a mistyped --url makes no log."""
    url, view = f"local://{tmp_path / 'log'}", tmp_path / "view"
    run("bootstrap", "--url", url, "--stream", "a")
    for command in ("fold", "rebuild"):
        said = run(command, "--url", url, "--stream", "b", "--view", str(view), ok=False)
        assert "topic 'b.agent.memory' does not exist" in said, said
        assert not view.exists(), command
    missing = tmp_path / "typo"
    said = run("rebuild", "--url", f"local://{missing}", "--view", str(view), ok=False)
    assert "no log at" in said, said
    assert not missing.exists() and not view.exists()
    assert "bootstrap" in run("fold", "--url", url, "--view", str(view), ok=False)


def test_view_is_an_option_only_of_the_commands_that_read_one(tmp_path):
    """Ten commands took --view and never read it: `replay --view ./view` looked like a
    replay of the view, `remember --view` like a write that waits for it. Each command
    that takes it reads it at once: a mistyped one is a NoView at start (the MCP server
    said so only to a model, at its first recall) and makes nothing there."""
    url, missing = f"local://{tmp_path / 'log'}", tmp_path / "typo"
    mid = json.loads(run("remember", "a fact", "--url", url, "--json"))["id"]
    for command in (
        ["remember", "another"],
        ["improve", mid, "1"],
        ["forget", mid],
        ["set", "k", "v"],
        ["update", "k", "{}"],
        ["remove", "k"],
        ["purge", "--expired"],
        ["reembed", "--embedder", "word-hash"],
        ["bootstrap"],
        ["replay"],
    ):
        result = CliRunner().invoke(main, [*command, "--url", url, "--view", str(missing)])
        # A usage error naming it (improve, which takes a negative weight, says "unexpected
        # extra arguments (--view ...)").
        assert result.exit_code == 2 and "--view" in result.output, command
    ctrl_c = signal.getsignal(signal.SIGINT)
    for command in (
        ["recall"],
        ["fetch", "k"],
        ["named"],
        ["audit", mid],
        ["index"],
        ["stats"],
        ["serve", "--port", "0"],
        ["mcp"],
    ):
        with_url = [] if command[0] in ("stats", "serve") else ["--url", url]
        result = CliRunner().invoke(main, [*command, *with_url, "--view", str(missing)])
        assert result.exit_code == 1, (command, result.output)
        assert f"NoView: there is no view at {missing}" in result.output, command
        assert not missing.exists(), command
    # mcp over stdio lets Ctrl-C end it at once, and gives its caller's handler back.
    assert signal.getsignal(signal.SIGINT) is ctrl_c
    assert run("replay", "--url", url).count("a fact") == 1  # the log unchanged


def test_every_option_a_command_takes_is_read():
    """A command took --view (ten did), --namespace (bootstrap) or --json (mcp) and never
    read it: the caller believed it was used. Every parameter of every command is read
    in its function's body."""
    import ast
    import inspect
    import textwrap

    unread = []
    for name, command in main.commands.items():
        function = inspect.unwrap(command.callback)
        body = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
        read = {node.id for node in ast.walk(body) if isinstance(node, ast.Name)}
        unread += [(name, p.name) for p in command.params if p.name not in read]
    assert unread == []


def test_the_commands_on_a_memory_take_the_options_the_readme_says():
    """The README said every command takes the scope options: most take only --tenant."""
    options = {
        name: {o for p in command.params for o in p.opts if o.startswith("--")}
        for name, command in main.commands.items()
    }
    on_a_memory = {name for name, taken in options.items() if "--namespace" in taken}
    assert on_a_memory == {
        *("audit", "fetch", "forget", "improve", "index", "mcp", "named", "purge", "recall"),
        *("reembed", "remember", "remove", "replay", "set", "update"),
    }
    for name in on_a_memory:
        common = {"--url", "--stream", "--tenant"} | ({"--json"} if name != "mcp" else set())
        assert common <= options[name], name
        owner = {"--conversation", "--agent", "--user", "--application"}
        expected = (
            owner
            if name in ("remember", "recall")
            else {"--conversation"}
            if name in ("improve", "forget", "purge", "index")
            else set()
        )
        assert options[name] & owner == expected, name


def test_serve_on_a_port_in_use_or_out_of_range_says_so(tmp_path):
    # Both were raw tracebacks (OSError, OverflowError).
    url, view = f"local://{tmp_path / 'log'}", str(tmp_path / "view")
    run("remember", "a fact", "--url", url)
    run("fold", "--url", url, "--view", view, "--exit-when-caught-up")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["serve", "--view", view, "--port", str(port)])
    assert result.exit_code == 1, result.output
    assert f"ConfigError: cannot serve on 127.0.0.1:{port}" in result.output
    result = CliRunner().invoke(main, ["serve", "--view", view, "--port", "80000"])
    assert result.exit_code == 2 and "80000 is not in the range" in result.output
    # A mistyped --view is no view, and none is made there.
    typo = tmp_path / "veiw"
    assert "no view at" in run("serve", "--view", str(typo), ok=False)
    assert not typo.exists()
    # With --auth, any address is served: the error is the taken port's, not the host's.
    auth = tmp_path / "auth.toml"
    auth.write_text(CliRunner().invoke(main, ["token", "reader", "--grant", "kv:read:*"]).stdout)
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            main,
            [
                "serve",
                "--view",
                view,
                "--host",
                "0.0.0.0",
                "--port",
                str(port),
                "--auth",
                str(auth),
            ],
        )
    assert f"cannot serve on 0.0.0.0:{port}" in result.output, result.output


def test_audit_prints_each_record_with_its_time_and_conversation(tmp_path):
    import datetime as dt

    common = ["--url", f"local://{tmp_path / 'log'}"]
    written = json.loads(run("remember", "café au lait", *common, "--conversation", "c7", "--json"))
    run("improve", written["id"], "2", *common)
    raw = CliRunner().invoke(main, ["audit", written["id"], *common, "--json"])
    assert "café au lait" in raw.output  # not "caf\u00e9"
    assert [e["op"] for e in json.loads(raw.output)] == ["remember", "feedback"]
    [remembered, feedback] = run("audit", written["id"], *common).splitlines()
    millis = written["receipt"]["append_time_ms"]
    when = dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    assert remembered.startswith(when[:-3] + "Z "), remembered  # the append time, in UTC
    assert " c7 " in remembered and remembered.endswith("café au lait")
    assert feedback.endswith("weight 2")
    # The last millisecond a log holds is a moment; the next is not.
    run("replay", *common, "--since", str((1 << 63) - 1))
    assert "past the last millisecond" in run("replay", *common, "--since", str(1 << 63), ok=False)


def test_index_prepares_a_views_search_index_for_the_readers(tmp_path):
    """``laser-memory index`` saves the snapshot a later reader loads; without --view it
    is a usage error, and a view that is not there is a clean error."""
    import asyncio

    import laser_memory as lm

    url, view = f"local://{tmp_path / 'log'}", str(tmp_path / "view")

    async def write() -> None:
        async with lm.connect(url) as laser:
            await laser.memory("notes").remember_many(
                [f"fact {n} about the deploy of node-{n}" for n in range(1200)]
            )

    asyncio.run(write())
    run("fold", "--url", url, "--view", view, "--exit-when-caught-up")
    prepared = json.loads(run("index", "--url", url, "--view", view, "--json"))
    assert prepared["entries"] == 1200 and prepared["embedder"] is None
    assert prepared["reason"] is None
    assert 0 <= prepared["seconds"] < 60  # how long it took, not a clock reading
    assert os.path.dirname(prepared["snapshot"]) == os.path.join(view, "search")
    assert os.path.isfile(prepared["snapshot"])
    shown = CliRunner().invoke(
        main, ["index", "--url", url, "--view", view, "--embedder", "word-hash"]
    )
    assert shown.exit_code == 0, shown.output
    for line in ("entries:    1200", "embedder:   test/word-hash", "snapshot:   ", "took:       "):
        assert line in shown.stdout, shown.stdout
    # Progress goes to stderr, so stdout stays the answer.
    assert "preparing the search index of 'notes'" in shown.stderr
    assert "preparing" not in shown.stdout
    assert "fewer than index_snapshots_from" in run(
        "index", "--url", url, "--view", view, "--conversation", "c9"
    )
    found = json.loads(run("recall", "--url", url, "--view", view, "--text", "node-7", "--json"))
    assert found[0]["body"] == "fact 7 about the deploy of node-7"

    # stats lists the snapshots, and how far each is behind the view.
    def snapshots() -> list[dict]:
        listed = json.loads(run("stats", "--view", view, "--json"))["search_snapshots"]
        return sorted(listed, key=lambda snapshot: snapshot["embedder"] or "")

    plain = {"tenant": "", "namespace": "notes", "conversation": None, "superseded": False}
    assert snapshots() == [
        {**plain, "embedder": None, "changes": 1200, "behind": 0},
        {**plain, "embedder": "test/word-hash", "changes": 1200, "behind": 0},
    ]
    run("remember", "one more fact", "--url", url)
    run("fold", "--url", url, "--view", view, "--exit-when-caught-up")
    assert [s["behind"] for s in snapshots()] == [1, 1]
    # A snapshot of the view before a rebuild (put back after it) is no reader's.
    search = os.path.join(view, "search")
    old = {name: (tmp_path / "view" / "search" / name).read_bytes() for name in os.listdir(search)}
    run("rebuild", "--url", url, "--view", view)
    assert [s["behind"] for s in snapshots()] == [0, 0]
    for name, data in old.items():
        (tmp_path / "view" / "search" / name).write_bytes(data)
    assert [s["behind"] for s in snapshots()] == [None, None]
    assert "of an earlier view" in run("stats", "--view", view)
    result = CliRunner().invoke(main, ["index", "--url", url])
    assert result.exit_code == 2 and "give --view PATH" in result.output
    assert "no view at" in run("index", "--url", url, "--view", str(tmp_path / "typo"), ok=False)
    assert not (tmp_path / "typo").exists()
    # A read: a mistyped --url is no log, and none is made there (nor by a folder).
    missing = tmp_path / "no-log"
    run("index", "--url", f"local://{missing}", "--view", view, ok=False)
    run("fold", "--url", f"local://{missing}", "--view", view, "--exit-when-caught-up", ok=False)
    assert "no log" in run("stats", "--view", view, "--url", f"local://{missing}", ok=False)
    assert not missing.exists()
