"""Which process an object was made in, told without a system call per read.

A shard cache or an LMDB environment made before a fork must not be used as-is in the child
(an h5py file or an LMDB transaction is the parent's), yet asking os.getpid() costs a system call
(about half a microsecond here, a third of a read of a row). So the first object that holds open
shard files calls `watch()`, which registers one after-fork callback for the child: it only bumps
`FORK_COUNT[0]`. Nothing runs in the parent at a fork, no lock is taken, nothing is registered at
import, and a process that never opens a shard registers nothing. Holders remember the count they
were made under and compare it on their read path (one list index).
"""
from __future__ import annotations

import os
from typing import List

#: Bumped in every child forked after watch() was first called (a one-element list: read in place).
FORK_COUNT: List[int] = [0]
_watching: List[bool] = [False]


def _bump() -> None:
    FORK_COUNT[0] += 1


def watch() -> int:
    """Start counting forks (once per process, idempotent); the current count."""
    if not _watching[0]:
        _watching[0] = True
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_bump)
    return FORK_COUNT[0]
