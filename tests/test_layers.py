"""Each layer imports on its own, and imports point one way:
records, ids and the log  <-  folders  <-  the memory handle and connection  <-  cli."""

from __future__ import annotations

import subprocess
import sys

import pytest

LOWER = [
    "laser_memory.errors",
    "laser_memory.doorkeeper",
    "laser_memory.records",
    "laser_memory.ids",
    "laser_memory.scope",
    "laser_memory.named",
    "laser_memory.recall",
    "laser_memory.embedding",
    "laser_memory.clock",
    "laser_memory.items",
    "laser_memory.log",
    "laser_memory.log.deadlines",
    "laser_memory.inputs",
    "laser_memory.latest",
    "laser_memory.handler",
    "laser_memory.consolidation",
    "laser_memory.periodic",
    "laser_memory.custom",
    "laser_memory.search_index",
    "laser_memory.vector_clusters",
    "laser_memory.writes",
]
FOLDERS = [
    "folders.heap",
    "folders.state",
    "folders.view",
    "folders.replay",
    "folders.inprocess",
    "folders.service",
    "folders.http",
]
UPPER = ["laser_memory.memory", "laser_memory.client", "laser_memory.cli"]


def _loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"import {module} alone failed:\n{done.stderr[-2000:]}"
    return set(done.stdout.split())


@pytest.mark.parametrize("module", LOWER)
def test_lower_layers_import_nothing_above_them(module: str) -> None:
    loaded = _loaded_after_import(module)
    above = {m for m in loaded if m.startswith("folders") or m in UPPER}
    assert not above, f"{module} pulls in {sorted(above)}"


@pytest.mark.parametrize("module", FOLDERS)
def test_folders_import_alone_and_never_the_handle(module: str) -> None:
    loaded = _loaded_after_import(module)
    assert not loaded & set(UPPER), f"{module} pulls in {sorted(loaded & set(UPPER))}"


@pytest.mark.parametrize("module", UPPER)
def test_upper_layers_import_alone(module: str) -> None:
    assert module in _loaded_after_import(module)


def test_package_exposes_the_handle_on_first_use() -> None:
    import laser_memory as lm

    assert lm.connect.__module__ == "laser_memory.client"
    assert lm.MemoryHandle.__module__ == "laser_memory.memory"
    with pytest.raises(AttributeError):
        _ = lm.no_such_name


@pytest.mark.parametrize("module", [*UPPER, "laser_memory", "folders.service"])
def test_the_core_never_imports_an_integration(module: str) -> None:
    """LangGraph and the MCP SDK are optional extras: only their integration modules
    import them."""
    loaded = _loaded_after_import(module)
    frameworks = {
        m
        for m in loaded
        if m.split(".")[0] in ("langgraph", "langchain_core", "mcp")
        or m.startswith("laser_memory.integrations.")
    }
    assert not frameworks, f"{module} pulls in {sorted(frameworks)[:5]}"


@pytest.mark.parametrize(
    ("module", "hidden", "extra"),
    [
        ("laser_memory.integrations.langgraph", "langgraph", "langgraph"),
        ("laser_memory.integrations.langgraph", "langchain_core", "langgraph"),
        ("laser_memory.integrations.mcp", "mcp", "mcp"),
    ],
)
def test_an_integration_without_its_extra_says_which_to_install(module, hidden, extra) -> None:
    # A None entry in sys.modules makes Python refuse that import, as on a machine
    # where the extra was never installed.
    code = (
        f"import sys; sys.modules[{hidden!r}] = None\n"
        f"try:\n    import {module}\n"
        "except ModuleNotFoundError as exc:\n    print(exc.name, '|', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    name, message = done.stdout.strip().split(" | ", 1)
    assert name.split(".")[0] == hidden
    assert f"pip install 'laser-memory[{extra}]'" in message
