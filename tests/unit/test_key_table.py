"""KeyTable groups every key added more than once, in memory or spilled to bucket files; digest
tasks give the same digests in spawned worker processes as here."""
from __future__ import annotations

import collections
import hashlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.ops.key_table import KeyTable
from shardkit.ops.sample_digests import STORED, DigestTask, digest_samples
from shardkit.runtime.workers import run_in_workers


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 2)), max_size=200),
       memory=st.integers(1, 50), chunk=st.integers(1, 30))
def test_groups_are_the_repeated_keys_whatever_spills(keys, memory, chunk, tmp_path_factory) -> None:
    expected = collections.defaultdict(list)
    for ref, key in enumerate(keys):
        expected[key].append(ref)
    wanted = sorted(refs for refs in expected.values() if len(refs) > 1)
    folder = tmp_path_factory.mktemp("spill")
    with KeyTable(len(keys), memory_rows=memory, folder=str(folder)) as table:
        for start in range(0, len(keys), chunk):
            part = keys[start:start + chunk]
            table.add(np.array([k for k, _ in part], dtype=np.uint64) << np.uint64(60),
                      np.array([k for _, k in part], dtype=np.uint64),
                      np.arange(start, start + len(part), dtype=np.int64))
        got = sorted(group.tolist() for group in table.groups())
        assert (table.spilled_rows > 0) == (len(keys) > memory)
    assert got == wanted
    assert not list(folder.iterdir())                  # closing removed the spilled files


@pytest.mark.parametrize("fmt", ["pt"])
def test_digest_tasks_run_in_spawned_workers(dataset_dir: Path) -> None:
    """The tasks and results cross to spawned processes and back; digests are BLAKE2b-128 of the
    layout and the stored bytes (computed here with hashlib from the dataset's own payloads)."""
    ds = shardkit.open_dataset(dataset_dir, decode=None)
    tasks = [DigestTask(str(dataset_dir), np.arange(start, start + 30, dtype=np.int64), STORED, dataset=7)
             for start in (0, 30, 60, 90)]
    results = {}
    run_in_workers(digest_samples, tasks, 2, on_done=lambda number, digests: results.update({number: digests}))
    for number, task in enumerate(tasks):
        got = results[number]
        assert got.dataset == 7 and got.indices.tolist() == task.indices.tolist() and not got.problems
        for index, k1, k2 in zip(got.indices.tolist()[:3], got.k1.tolist(), got.k2.tolist()):
            payload = bytes(memoryview(ds.read_encoded(index).payload))
            expected = hashlib.blake2b(b"bytes" + payload, digest_size=16).digest()
            assert (k1, k2) == tuple(np.frombuffer(expected, dtype="<u8").tolist())
