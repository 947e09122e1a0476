"""Random single-bit flips in real shard files, many trials per format.

- `verify` (full) must flag every flip, anywhere in any shard (whole-file sha256);
- `verify --deep` must name the damaged sample for every flip inside a sample's payload;
- readers with verify_checksums=True must raise CorruptSampleError (payload flips: naming
  the shard and index) or CorruptShardError, and never return a payload that differs from
  what was stored.
Trial counts and detection rates are printed (run with -s or -rP to see them).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

import shardkit
from shardkit.errors import CorruptSampleError, CorruptShardError

from .helpers import bit_flipped, bits_flipped, make_tiny_tree, shard_paths

FULL_TRIALS = 30
DEEP_TRIALS = 30
READER_TRIALS = 30
METADATA_TRIALS = 30


@pytest.fixture(scope="module")
def flip_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("flips") / "src"
    make_tiny_tree(root, 24, seed=13)
    return root


@pytest.fixture
def flip_dataset(flip_tree: Path, fmt: str, tmp_path: Path) -> Path:
    dst = tmp_path / "dst"
    shardkit.convert(str(flip_tree), str(dst), format=fmt, samples_per_shard=4, quiet=True)
    return dst


Region = Tuple[int, int, int, int]   # shard number, local index, start byte, stop byte


def payload_regions(dst: Path) -> Tuple[List[Region], Dict[int, Tuple[bytes, int]]]:
    """Where each sample's payload lives in its shard file, and the samples as stored.

    A payload is found by its bytes. A format may also keep stale copies (LMDB's copy-on-write
    pages): each copy is probed by flipping one of its bits and reading the sample again, and
    the copy whose damage the reader sees is the live one.
    """
    ds = shardkit.open_dataset(dst, decode=None)
    samples = {index: (bytes(memoryview(ds[index][0])), ds[index][1]) for index in range(len(ds))}
    ds.close()
    regions: List[Region] = []
    for shard, path in enumerate(shard_paths(dst)):
        content = path.read_bytes()
        first = int(ds.shard_starts[shard])
        for local in range(int(ds.shard_starts[shard + 1]) - first):
            payload = samples[first + local][0]
            copies = _find_all(content, payload)
            assert copies, f"sample {first + local} is not stored verbatim"
            if len(copies) > 1:
                copies = [c for c in copies if _is_live(dst, path, c, first + local, payload)]
            live = copies
            assert len(live) == 1, f"sample {first + local}: {len(live)} live copies of {len(copies)}"
            regions.append((shard, local, live[0], live[0] + len(payload)))
    return regions, samples


def _find_all(content: bytes, needle: bytes) -> List[int]:
    found, start = [], content.find(needle)
    while start >= 0:
        found.append(start)
        start = content.find(needle, start + 1)
    return found


def _is_live(dst: Path, path: Path, start: int, index: int, payload: bytes) -> bool:
    offset = start + len(payload) // 2
    with bit_flipped(path, offset, 0), shardkit.open_dataset(dst, decode=None) as ds:
        return bytes(memoryview(ds[index][0])) != payload


def _outside(regions: List[Region], shard: int, offset: int) -> bool:
    return not any(s == shard and start <= offset < stop for s, _, start, stop in regions)


def _rng(fmt: str, salt: int) -> np.random.Generator:
    return np.random.default_rng([salt, sum(map(ord, fmt))])


def _payload_flip(regions: List[Region], rng: np.random.Generator) -> Tuple[int, int, int, int]:
    """A random bit inside a random sample's payload: (shard, local index, file offset, bit)."""
    shard, local, start, stop = regions[int(rng.integers(len(regions)))]
    return shard, local, int(rng.integers(start, stop)), int(rng.integers(8))


def _flip_rounds(trials: int, shards: int) -> List[int]:
    """How many shards each verify run damages: one bit in each of up to `shards` shards at once
    (each shard is checked on its own, so one run sees several independent trials)."""
    return [min(shards, trials - done) for done in range(0, trials, shards)]


@pytest.mark.slow
def test_verify_full_detects_every_flip(flip_dataset: Path, fmt: str) -> None:
    shards = shard_paths(flip_dataset)
    sizes = [os.path.getsize(p) for p in shards]
    rng = _rng(fmt, 1)
    detected = 0
    for count in _flip_rounds(FULL_TRIALS, len(shards)):
        flips = {int(shard): (int(rng.integers(sizes[shard])), int(rng.integers(8)))
                 for shard in rng.choice(len(shards), count, replace=False)}
        with bits_flipped({shards[shard]: flip for shard, flip in flips.items()}):
            report = shardkit.verify(str(flip_dataset), mode="full")
        named = {p.shard for p in report.problems}
        detected += sum(f"shards/{shards[shard].name}" in named for shard in flips)
        assert named <= {f"shards/{shards[shard].name}" for shard in flips}, "an intact shard was reported"
    print(f"\n{fmt}: verify (full) detected {detected}/{FULL_TRIALS} random bit flips")
    assert detected == FULL_TRIALS
    assert shardkit.verify(str(flip_dataset), mode="deep").ok, "flipping back restored the dataset"


@pytest.mark.slow
def test_verify_deep_names_the_damaged_sample(flip_dataset: Path, fmt: str) -> None:
    regions, _ = payload_regions(flip_dataset)
    shards = shard_paths(flip_dataset)
    rng = _rng(fmt, 2)
    named = 0
    for count in _flip_rounds(DEEP_TRIALS, len(shards)):
        flips: Dict[int, Tuple[int, int, int]] = {}
        while len(flips) < count:                   # one payload flip in each of `count` shards
            shard, local, offset, bit = _payload_flip(regions, rng)
            flips.setdefault(shard, (local, offset, bit))
        with bits_flipped({shards[shard]: (offset, bit) for shard, (_, offset, bit) in flips.items()}):
            report = shardkit.verify(str(flip_dataset), mode="deep")
        samples = {(p.shard, p.index) for p in report.problems if p.kind == "sample"}
        expected = {(f"shards/{shards[shard].name}", local) for shard, (local, _, _) in flips.items()}
        named += len(samples & expected)
        assert samples <= expected, f"samples reported that were not damaged: {samples - expected}"
    print(f"\n{fmt}: verify --deep named the damaged sample for {named}/{DEEP_TRIALS} payload bit flips")
    assert named == DEEP_TRIALS


@pytest.mark.slow
def test_verify_deep_reports_flips_outside_payloads(flip_dataset: Path, fmt: str) -> None:
    regions, _ = payload_regions(flip_dataset)
    shards = shard_paths(flip_dataset)
    rng = _rng(fmt, 3)
    flagged = 0
    for count in _flip_rounds(METADATA_TRIALS, len(shards)):
        flips: Dict[int, Tuple[int, int]] = {}
        while len(flips) < count:                   # one flip outside the payloads of `count` shards
            shard = int(rng.integers(len(shards)))
            offset, bit = int(rng.integers(os.path.getsize(shards[shard]))), int(rng.integers(8))
            if shard not in flips and _outside(regions, shard, offset):
                flips[shard] = (offset, bit)
        with bits_flipped({shards[shard]: flip for shard, flip in flips.items()}):
            report = shardkit.verify(str(flip_dataset), mode="deep")
        reported = {p.shard for p in report.problems}
        flagged += sum(f"shards/{shards[shard].name}" in reported for shard in flips)
        assert reported <= {f"shards/{shards[shard].name}" for shard in flips}, "an intact shard was reported"
    print(f"\n{fmt}: verify --deep flagged the shard for {flagged}/{METADATA_TRIALS} bit flips outside payloads")
    assert flagged == METADATA_TRIALS


def test_reader_never_returns_a_damaged_payload(flip_dataset: Path, fmt: str) -> None:
    regions, payloads = payload_regions(flip_dataset)
    shards = shard_paths(flip_dataset)
    rng = _rng(fmt, 4)
    raised = 0
    for _ in range(READER_TRIALS):
        shard, local, offset, bit = _payload_flip(regions, rng)
        with bit_flipped(shards[shard], offset, bit):
            ds = shardkit.open_dataset(flip_dataset, decode=None, verify_checksums=True)
            index = int(ds.shard_starts[shard]) + local
            with pytest.raises(CorruptSampleError) as caught:
                ds[index]
            assert caught.value.index == local and caught.value.shard == f"shards/{shards[shard].name}"
            assert shards[shard].name in str(caught.value) and f"sample {local}" in str(caught.value)
            raised += 1
            _check_others(ds, payloads, skip=index)
            ds.close()
    print(f"\n{fmt}: readers raised CorruptSampleError for {raised}/{READER_TRIALS} payload bit flips")
    assert raised == READER_TRIALS


@pytest.mark.parametrize("checks", [True, "full"])
def test_reader_with_flips_outside_payloads(flip_dataset: Path, fmt: str, checks: object) -> None:
    """Damage to a shard's index or metadata. verify_checksums=True: every read raises or returns
    the stored payload (a flipped label can pass unless it leaves the class range: labels are
    not under the payload's CRC). verify_checksums="full": the shard's sha256 is checked when
    it is opened, so every such flip raises and nothing wrong is returned, labels included."""
    regions, samples = payload_regions(flip_dataset)
    shards = shard_paths(flip_dataset)
    rng = _rng(fmt, 5)
    outcomes = {"raised": 0, "intact": 0, "wrong label": 0}
    trials = 0
    while trials < METADATA_TRIALS:
        shard = int(rng.integers(len(shards)))
        offset, bit = int(rng.integers(os.path.getsize(shards[shard]))), int(rng.integers(8))
        if not _outside(regions, shard, offset):
            continue
        trials += 1
        with bit_flipped(shards[shard], offset, bit):
            ds = shardkit.open_dataset(flip_dataset, decode=None, verify_checksums=checks)
            raised, wrong_labels = _check_others(ds, samples, skip=-1)
            outcome = "raised" if raised else "wrong label" if wrong_labels else "intact"
            outcomes[outcome] += 1
            ds.close()
    print(f"\n{fmt}: {trials} bit flips outside payloads, verify_checksums={checks!r}: "
          f"{outcomes['raised']} raised, {outcomes['intact']} read back intact, "
          f"{outcomes['wrong label']} returned a wrong label; 0 returned a wrong payload")
    if checks == "full":
        assert outcomes["raised"] == trials


def _check_others(ds, samples: Dict[int, Tuple[bytes, int]], skip: int) -> Tuple[int, int]:
    """Read every sample but skip: each must raise CorruptShardError or return the stored payload.
    Returns (how many raised, how many came back with another label)."""
    raised = wrong_labels = 0
    for index, (expected, label) in samples.items():
        if index == skip:
            continue
        try:
            payload, got = ds[index]
        except CorruptShardError:
            raised += 1
            continue
        assert bytes(memoryview(payload)) == expected, f"sample {index} came back different without an error"
        wrong_labels += got != label
    return raised, wrong_labels


def test_full_checksums_hold_when_another_dataset_has_the_shard_open(writable_dataset: Path) -> None:
    """Another dataset of the process holds the shard open; verify_checksums="full" must still hash it."""
    shard = shard_paths(writable_dataset)[0]
    plain = shardkit.open_dataset(writable_dataset, decode=None)
    plain[0]                                    # the shard is now open in this process
    with bit_flipped(shard, shard.stat().st_size // 2, 3):
        checked = shardkit.open_dataset(writable_dataset, decode=None, verify_checksums="full")
        with pytest.raises(CorruptShardError, match="sha256"):
            checked[0]
    plain.close()
    checked.close()
