"""Every docstring example of the package that needs no connection runs as written: one
whose output went stale (a content id's printed value, a path's error message) fails the
suite, as the README's examples do in test_readme. Examples that need a log, a handle or
a running loop say ``# doctest: +SKIP``."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import re

import pytest

import folders
import laser_memory

MODULES = sorted(
    info.name
    for package in (laser_memory, folders)
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    if not info.name.endswith(".__main__")  # importing it runs the command line
)


@pytest.mark.parametrize("name", MODULES)
def test_the_docstring_examples_run(name: str, capsys):
    module = importlib.import_module(name)
    failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failed == 0, capsys.readouterr().out


def test_the_examples_are_found():
    # A module list walked wrong would pass every test above by finding no example.
    examples = sum(
        len(test.examples)
        for name in MODULES
        for test in doctest.DocTestFinder().find(importlib.import_module(name))
    )
    assert len(MODULES) > 50 and examples > 60, (len(MODULES), examples)


def test_the_error_tree_drawn_in_errors_is_the_classes_tree():
    """`laser_memory.errors` draws its tree at the top, where a reader looks first: an
    error added, moved or renamed without the drawing would send them to the wrong
    ``except``."""
    from laser_memory import errors

    drawn: dict[str, str | None] = {}
    path: list[str] = []
    for line in errors.__doc__.split("::")[1].split("Each message")[0].splitlines():
        if not line.strip():
            continue
        prefix, name = re.match(r"^ {4}([│ ├└─]*)(\w+)", line).groups()
        depth = len(prefix) // 4
        path[depth:] = [name]
        drawn[name] = path[depth - 1] if depth else None
    classes = {
        name: (None if cls is errors.LaserError else cls.__mro__[1].__name__)
        for name, cls in vars(errors).items()
        if isinstance(cls, type) and issubclass(cls, errors.LaserError)
    }
    assert drawn == classes
