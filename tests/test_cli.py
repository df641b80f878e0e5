"""The command line, driven as a user would, over both logs."""

from __future__ import annotations

import json

from click.testing import CliRunner

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
    assert json.loads(run("recall", *common, "--conversation", "c2", "--json")) == []
    assert "prefers email" in run("recall", *common, "--limit", "1")

    run("set", "profile", '{"name": "Ada", "channel": "phone"}', *common)
    run("update", "profile", '{"channel": "email", "name": null}', *common)
    fetched = json.loads(run("fetch", "profile", *common, "--json"))
    assert fetched == {"key": "profile", "body": {"channel": "email"}, "version": 2}
    run("remove", "profile", *common)
    assert "no named item" in run("fetch", "profile", *common, ok=False)


def test_cli_errors_are_clear_and_write_nothing(tmp_path):
    url = f"local://{tmp_path / 'log'}"
    assert "EmptyBody" in run("remember", "", "--url", url, ok=False)
    assert "InvalidId" in run("forget", "nope", "--url", url, ok=False)
    assert "InvalidWeight" in run("improve", "0" * 26, "nan", "--url", url, ok=False)
    assert "InvalidPatch" in run("update", "k", "[1]", "--url", url, ok=False)
    assert "not valid JSON" in run("update", "k", "{oops", "--url", url, ok=False)
    assert "InvalidUrl" in run("recall", "--url", "kafka://nohostport", ok=False)
    assert json.loads(run("recall", "--url", url, "--json")) == []


def test_demo_runs_on_the_embedded_log(tmp_path):
    out = run("demo", "--url", f"local://{tmp_path / 'demo'}")
    assert "the reporter prefers email over phone calls" in out
    recalled = out.split("recall, newest first")[1].split("named item")[0]
    assert "node-7" in recalled and "node-9" not in recalled
    assert '"channel":"email"' in out and "omitted" in out
    assert "planning-7 knew: ['node-9 rotates keys monthly', 'node-7 sits" in out
    managed = out.split("recall from the managed view")[1]
    assert "the reporter prefers email" in managed and "['remember', 'feedback']" in managed
