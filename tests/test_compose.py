"""`docker/docker-compose.yml` without Docker (our machines have none): the command lines
of its header and of every service built from our Dockerfile run here as the
containers run them, with the compose network's broker, the volumes and the port
pointed at this test's log, folders and a free port. The reader then answers the
header's request with the header's token, and refuses one without it.

And why the reader shares the folder's PID namespace: two processes that are each
process 1 of their own namespace, as in two containers, cannot both read one LMDB
folder; the second is told so, and what to do."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp import ClientSession

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker" / "docker-compose.yml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
CLI = str(Path(sys.executable).with_name("laser-memory"))


def header_lines() -> list[str]:
    """The commands the compose file's header tells a user to run, in order."""
    lines = []
    for line in COMPOSE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        command = line.lstrip("#").strip()
        if command.startswith(("laser-memory ", "curl ", "docker ")):
            lines.append(command)
    return lines


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Translation:
    """Compose's names for things, as this test has them."""

    def __init__(self, url: str, stream: str, tmp: Path, port: int) -> None:
        self.url, self.stream, self.port = url, stream, port
        self.view, self.auth = tmp / "view", tmp / "auth.toml"

    def word(self, word: str) -> str:
        word = re.sub(r"kafka://(kafka:19092|127\.0\.0\.1:9092)", self.url, word)
        word = re.sub(r"\bprod\b", self.stream, word)
        word = word.replace("127.0.0.1:8765", f"127.0.0.1:{self.port}")
        exact = {
            "/view": str(self.view),
            "/auth/auth.toml": str(self.auth),
            "docker/auth.toml": str(self.auth),
            "8765": str(self.port),
        }
        return exact.get(word, word)

    def command(self, words: list[str]) -> list[str]:
        return [self.word(word) for word in words]


async def cli(argv: list[str]) -> tuple[str, str]:
    """A command that runs to its end: its output and errors; it must succeed."""
    process = await asyncio.create_subprocess_exec(
        CLI, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, f"{argv[0]}: {err.decode()[-2000:]}"
    return out.decode(), err.decode()


@contextlib.asynccontextmanager
async def running(argv: list[str]) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await asyncio.create_subprocess_exec(
        CLI, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
        _, err = await process.communicate()
        # A service that stopped by itself before the end is the failure to show.
        assert process.returncode in (0, -15), f"{argv[0]}: {err.decode()[-2000:]}"


async def test_the_compose_services_serve_what_the_header_says(
    any_log_url: str, stream_name: str, tmp_path: Path
):
    compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    ours = {
        name: service["command"]
        for name, service in compose["services"].items()
        if service.get("build", {}).get("dockerfile") == "docker/Dockerfile"
    }
    assert set(ours) == {"bootstrap", "folder", "reader"}
    # The reader shares the folder's PID namespace (see the second test).
    assert compose["services"]["reader"]["pid"] == "service:folder"
    to = Translation(any_log_url, stream_name, tmp_path, free_port())

    token_line, up, remember_line, curl_line = header_lines()
    assert up.startswith("docker compose") and "up" in up
    # laser-memory token ... > docker/auth.toml: the entry to the file, the token on stderr.
    words, target = shlex.split(token_line).__iter__(), None
    argv = []
    for word in words:
        if word == ">":
            target = to.word(next(words))
        else:
            argv.append(word)
    entry, said = await cli(to.command(argv[1:]))
    assert target == str(to.auth)
    to.auth.write_text(entry, encoding="utf-8")
    token = re.search(r"token \(shown once\): (\S+)", said).group(1)

    # docker compose up: bootstrap runs to its end, then the folder and the reader.
    await cli(to.command(ours["bootstrap"]))
    async with running(to.command(ours["folder"])):
        deadline = time.monotonic() + 60
        while not (to.view / "data.mdb").exists():  # the reader restarts until then
            assert time.monotonic() < deadline, "the folder made no view"
            await asyncio.sleep(0.1)
        async with running(to.command(ours["reader"])) as reader:
            assert reader.stderr is not None
            line = await asyncio.wait_for(reader.stderr.readline(), 60)
            assert b"serving" in line, line
            await cli(to.command(shlex.split(remember_line)[1:]))

            curl = shlex.split(curl_line)
            header = to.word(curl[curl.index("-H") + 1]).replace("$TOKEN", token)
            name, _, value = header.partition(": ")
            address = to.word(curl[-1])
            # The reader's healthcheck, as Docker runs it in the container (no token).
            check = compose["services"]["reader"]["healthcheck"]["test"]
            assert check[:2] == ["CMD", "python"]
            probe = await asyncio.create_subprocess_exec(
                sys.executable, *to.command(check[2:-1]), check[-1].replace("8765", str(to.port))
            )
            assert await asyncio.wait_for(probe.wait(), 60) == 0
            async with ClientSession() as http:
                async with http.get(address) as anonymous:
                    assert anonymous.status == 401
                deadline = time.monotonic() + 60
                while True:
                    async with http.get(address, headers={name: value}) as answer:
                        assert answer.status == 200, await answer.text()
                        items = await answer.json()
                    if items or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.2)
    assert [item["body"] for item in items] == ["the reporter prefers email"]


def build_context() -> list[str]:
    """The top-level entries of the checkout that `.dockerignore` lets into the image's
    build context (it ignores everything, then lets named entries back in)."""
    rules = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules[0] == "*", "the build context is a list of what it takes"
    return [rule[1:] for rule in rules[1:] if rule.startswith("!")]


def test_the_image_installs_from_its_build_context_alone(tmp_path: Path):
    """What docker/Dockerfile does, without Docker: copy what it copies from the build
    context `.dockerignore` leaves, install it (not as an editable checkout, as the
    suite runs), and run the command."""
    context = build_context()
    copied = [
        source
        for line in DOCKERFILE.read_text(encoding="utf-8").splitlines()
        if line.startswith("COPY ")
        for source in line.split()[1:-1]
    ]
    assert set(copied) <= set(context), "the Dockerfile copies what the context leaves out"
    app = tmp_path / "app"
    for source in copied:
        if (ROOT / source).is_dir():
            shutil.copytree(
                ROOT / source, app / source, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            app.mkdir(exist_ok=True)
            shutil.copy(ROOT / source, app / source)
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", f"--target={site}", str(app)],
        check=True,
        capture_output=True,
        timeout=280,
    )
    for package in ("laser_memory", "folders"):
        assert (site / package / "py.typed").is_file()
    # The installed copy, not the checkout (the dependencies are the suite's own).
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import laser_memory, folders.service, folders.http, laser_memory.cli; "
            "print(laser_memory.__file__)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.startswith(str(site))
    usage = subprocess.run(
        [sys.executable, "-m", "laser_memory", "fold", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Usage: laser-memory fold" in usage.stdout


def _separate_pid_namespaces_allowed() -> bool:
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "true"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.skipif(
    not _separate_pid_namespaces_allowed(),
    reason="needs `unshare --pid` (root, or user namespaces) to run processes as containers do",
)
def test_processes_of_two_pid_namespaces_cannot_share_a_folder_and_are_told_why(
    tmp_path: Path,
):
    view = tmp_path / "view"
    subprocess.run(
        [CLI, "bootstrap", "--url", f"local://{tmp_path / 'log'}"], check=True, capture_output=True
    )
    subprocess.run(
        [CLI, "rebuild", "--url", f"local://{tmp_path / 'log'}", "--view", str(view)],
        check=True,
        capture_output=True,
    )
    holder = (
        "import sys, time; from folders.view import MemoryView\n"
        "with MemoryView.open(sys.argv[1], create=False) as view:\n"
        "    view.stats(); print('open', flush=True); time.sleep(60)\n"
    )
    # Each the first process of a namespace of its own, as each container's is.
    as_container = ["unshare", "--pid", "--fork", "--mount-proc"]
    first = subprocess.Popen(
        [*as_container, sys.executable, "-c", holder, str(view)], stdout=subprocess.PIPE
    )
    try:
        assert first.stdout is not None and first.stdout.readline() == b"open\n"
        second = subprocess.run(
            [*as_container, CLI, "stats", "--view", str(view)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert "another PID namespace" in second.stderr
        assert 'pid: "service:NAME"' in second.stderr
        # The same command from this namespace reads the view beside the holder.
        beside = subprocess.run(
            [CLI, "stats", "--view", str(view)], capture_output=True, text=True, timeout=60
        )
        assert beside.returncode == 0, beside.stderr
    finally:
        first.kill()
        first.wait()
        assert first.stdout is not None
        first.stdout.close()


@pytest.mark.parametrize("data", ["a folder of the user's", "a file", "--fresh"])
def test_kafka_local_never_replaces_a_data_folder_that_is_not_a_brokers(tmp_path: Path, data):
    # `start --dir DIR` put a new broker's storage in DIR/data with rm -rf: a DIR of the
    # user's (their home, say) lost its own data folder, --fresh or not.
    from kafka_broker import kafka_local

    if data == "a file":
        (tmp_path / "data").write_text("the user's own")
    else:
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "notes.txt").write_text("the user's own")
    done = kafka_local("start", "--dir", str(tmp_path), *(["--fresh"] if data == "--fresh" else []))
    assert done.returncode != 0
    assert "is no broker's storage" in done.stderr
    kept = tmp_path / "data" if data == "a file" else tmp_path / "data" / "notes.txt"
    assert kept.read_text() == "the user's own"
    assert not (tmp_path / "pid").exists()


def test_make_clean_never_removes_the_default_log():
    # ./laser-data is where the README's examples and the CLI's default URL keep what
    # they remember: a clean of build leftovers removed it with them.
    done = subprocess.run(
        ["make", "-n", "clean"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "rm -rf" in done.stdout and "laser-data" not in done.stdout
