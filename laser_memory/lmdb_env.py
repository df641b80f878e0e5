"""One LMDB environment per folder per process, shared and reference counted.

LMDB forbids opening one environment twice in a process (closing either copy
breaks the other's locks), yet a process may well hold a log and a view on
the same folder, or two handles on one log. Everything that opens LMDB goes
through `SharedEnvironments`.
"""

from __future__ import annotations

import os
import threading
from typing import ClassVar

import lmdb

__all__ = ["SharedEnvironments"]


class SharedEnvironments:
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _envs: ClassVar[dict[str, tuple[lmdb.Environment, int, dict[str, object]]]] = {}

    @classmethod
    def acquire(
        cls, path: str, names: tuple[str, ...], *, map_size: int, sync: bool = True
    ) -> tuple[lmdb.Environment, dict]:
        """The environment at ``path`` with its named databases, opened once per process."""
        with cls._lock:
            entry = cls._envs.get(path)
            if entry is not None:
                env, count, dbs = entry
                missing = [n for n in names if n not in dbs]
                if missing:
                    raise lmdb.Error(
                        f"{path} is open in this process with databases {sorted(dbs)}, "
                        f"not {sorted(names)}: is it a log and a view at once?"
                    )
                cls._envs[path] = (env, count + 1, dbs)
                return env, dbs
            os.makedirs(path, exist_ok=True)
            env = lmdb.open(
                path,
                map_size=map_size,
                max_dbs=len(names) + 1,
                sync=sync,
                metasync=sync,
                max_readers=512,
            )
            dbs = {name: env.open_db(name.encode()) for name in names}
            cls._envs[path] = (env, 1, dbs)
            return env, dbs

    @classmethod
    def release(cls, path: str) -> None:
        with cls._lock:
            env, count, dbs = cls._envs[path]
            if count == 1:
                del cls._envs[path]
                env.close()
            else:
                cls._envs[path] = (env, count - 1, dbs)
