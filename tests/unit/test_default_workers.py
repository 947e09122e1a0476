"""--workers defaults to the CPUs this process may run on (its affinity), or $SHARDKIT_WORKERS."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import shardkit
from shardkit.options import RunOptions
from shardkit.runtime.workers import WORKERS_ENV, default_workers

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
PRINT_DEFAULT = "from shardkit.options import RunOptions; print(RunOptions().workers)"


def _default_in_child(cpus: set) -> int:
    """RunOptions().workers in a fresh interpreter pinned to `cpus`, without the override."""
    env = {key: value for key, value in os.environ.items() if key != WORKERS_ENV}
    out = subprocess.run([sys.executable, "-c", PRINT_DEFAULT], env=env, capture_output=True, text=True,
                         check=True, preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    return int(out.stdout)


@needs_affinity
def test_default_is_the_affinity_mask_not_the_core_count() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    assert _default_in_child({allowed[0]}) == 1
    assert _default_in_child(set(allowed)) == len(allowed)


def test_environment_overrides_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKERS_ENV, "3")
    assert default_workers() == 3 and RunOptions().workers == 3
    assert RunOptions(workers=1).workers == 1          # an explicit count always wins


@pytest.mark.parametrize("text", ["0", "-2", "two"])
def test_a_bad_override_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(WORKERS_ENV, text)
    with pytest.raises(shardkit.UsageError, match=WORKERS_ENV):
        default_workers()


def test_verify_rejects_zero_workers(tmp_path: object) -> None:
    with pytest.raises(shardkit.UsageError, match="--workers"):
        shardkit.verify(str(tmp_path), workers=0)
