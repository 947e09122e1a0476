"""How many shards a process may keep open: its descriptor and map limits, less reserves.

Each open shard holds at most one descriptor (an h5py file or an LMDB environment; located readers
and mapped rows hold none) and a few maps, so the default budget follows RLIMIT_NOFILE (its soft
limit raised toward the hard one) and vm.max_map_count. Every dataset of a process counts against
one budget (read/cache.py).
"""
from __future__ import annotations

import os
from typing import Dict, List

#: Kept free of shard descriptors and maps for the rest of the process (sockets, pipes, libraries).
DESCRIPTOR_RESERVE = 256
MAP_RESERVE = 1024
#: Raising the soft descriptor limit goes no further than this (docs/formats.md).
DESCRIPTOR_TARGET = 1 << 16
#: The default budget never exceeds this many shards per dataset and process.
MAX_DEFAULT_OPEN_SHARDS = 16384
#: Shards open in this process, every dataset's together (those a forked child inherited included).
OPEN_IN_PROCESS: List[int] = [0]


def _max_map_count() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return 65530


def default_max_open_shards() -> int:
    """How many shards a dataset keeps open in a process when not told: the descriptor limit (its
    soft limit raised toward the hard one, at most to DESCRIPTOR_TARGET) and half the map limit,
    less reserves for the rest of the process."""
    descriptors = DESCRIPTOR_TARGET
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = DESCRIPTOR_TARGET if hard == resource.RLIM_INFINITY else min(hard, DESCRIPTOR_TARGET)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
                soft = wanted
            except (ValueError, OSError):
                pass
        if soft != resource.RLIM_INFINITY:
            descriptors = soft
    except ImportError:     # not a POSIX system
        pass
    maps = _max_map_count()
    budget = min(descriptors - DESCRIPTOR_RESERVE, (maps - MAP_RESERVE) // 2, MAX_DEFAULT_OPEN_SHARDS)
    return max(16, budget)


_process_budget: Dict[int, int] = {}


def process_budget() -> int:
    """default_max_open_shards() of this process, computed once: the most shards all of its
    datasets together keep open."""
    pid = os.getpid()
    budget = _process_budget.get(pid)
    if budget is None:
        budget = _process_budget[pid] = default_max_open_shards()
    return budget


def arena_map_limit() -> int:
    """The maps the row arenas of this process may hold together: vm.max_map_count less the
    reserve and two maps for each shard the process budget lets it keep open."""
    return _max_map_count() - MAP_RESERVE - 2 * process_budget()
