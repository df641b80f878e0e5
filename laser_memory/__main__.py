"""``python -m laser_memory``: the ``laser-memory`` command, for an environment whose
scripts are not on PATH."""

from .cli import main

main(prog_name="laser-memory")
