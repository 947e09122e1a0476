"""Untrusted shards and manifests: crafted offsets, lengths, counts, types and paths are refused
with CorruptShardError / ManifestError before anything is allocated or read outside DST, and
reading never runs code from the file (no pickle)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shardkit
from shardkit.errors import CorruptShardError, ManifestError
from shardkit.formats import get_format, recorded_options
from shardkit.manifest import FIELDS_MANIFEST_VERSION, MANIFEST_VERSION, load_manifest

from .crafting import CASES, CRAFTERS, PWNED, forge_manifest, reseal
from .helpers import cli_env, make_tiny_tree, shard_paths


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("crafted") / "src"
    make_tiny_tree(root, 24, seed=7)
    return root


@pytest.fixture
def dataset(small_tree: Path, fmt: str, tmp_path: Path) -> Path:
    dst = tmp_path / "dst"
    shardkit.convert(str(small_tree), str(dst), format=fmt, samples_per_shard=8, quiet=True)
    return dst


def _reader(dst: Path, shard: Path):
    manifest = load_manifest(dst)
    fmt = get_format(manifest.format_name)
    return fmt.open_reader(str(shard), manifest.schema, recorded_options(fmt, manifest, str(dst)))


def _read_all(reader) -> None:
    for index in range(len(reader)):
        reader.read(index)


@pytest.mark.parametrize("case", CASES)
def test_crafted_shard_is_refused(dataset: Path, fmt: str, case: str) -> None:
    if fmt not in CRAFTERS:
        pytest.skip(f"no crafter for {fmt} shards in tests/faults/crafting.py")
    shard = shard_paths(dataset)[1]
    PWNED.unlink(missing_ok=True)
    expected = CRAFTERS[fmt](shard, case)
    if expected is None:
        pytest.skip(f"{case} cannot be expressed in {fmt}'s layout")
    reseal(dataset)   # the manifest agrees with the crafted file: only the reader's checks remain
    with pytest.raises(CorruptShardError) as caught:
        _read_all(_reader(dataset, shard))
    assert str(shard) in str(caught.value)
    assert re.search(expected, str(caught.value), re.IGNORECASE), str(caught.value)
    # through the Dataset: reading that shard raises, naming it (at its first access when the
    # damage is to the whole shard, at the crafted record otherwise); other shards still read
    ds = shardkit.open_dataset(dataset, decode=None, verify_checksums=True)
    with pytest.raises(CorruptShardError, match=re.escape(shard.name)):
        for index in range(8, 16):
            ds[index]
    assert bytes(memoryview(ds[0][0]))
    # verify reports it as a problem of that shard (its structure, or the crafted sample), not a crash
    report = shardkit.verify(str(dataset), mode="deep")
    assert report.problems and {p.shard for p in report.problems} == {f"shards/{shard.name}"}
    assert {p.kind for p in report.problems} <= {"structure", "sample"}
    assert not PWNED.exists(), "reading the shard ran code planted in it"


def _garbage(path: Path, rng: np.random.Generator) -> None:
    path.write_bytes(rng.integers(0, 256, size=os.path.getsize(path), dtype=np.uint8).tobytes())


def test_generic_damaged_files_raise_corrupt_shard(dataset: Path, fmt: str, tmp_path: Path) -> None:
    """Without knowing the layout: random bytes, an empty file and truncations at many points
    give CorruptShardError from the reader (never another exception, never a crash)."""
    original = shard_paths(dataset)[0]
    rng = np.random.default_rng(11)
    size = os.path.getsize(original)
    cuts = sorted({0, 1, 8, 64, 512} | {int(c) for c in rng.integers(1, size, size=20)})
    damaged = {"garbage": None, **{f"cut{cut}": cut for cut in cuts}}
    outcomes = {}
    for name, cut in damaged.items():
        victim = tmp_path / f"{name}{original.suffix}"
        shutil.copyfile(original, victim)
        if cut is None:
            _garbage(victim, rng)
        else:
            with open(victim, "r+b") as handle:
                handle.truncate(cut)
        try:
            _read_all(_reader(dataset, victim))
            outcomes[name] = "read"
        except CorruptShardError as exc:
            assert str(victim) in str(exc)
            outcomes[name] = "refused"
    refused = sum(1 for v in outcomes.values() if v == "refused")
    print(f"{fmt}: {refused}/{len(outcomes)} damaged files refused at open or read")
    # a file cut short of its end loses its index or its data: none may open as if whole
    assert outcomes["garbage"] == "refused" and outcomes["cut0"] == "refused"
    assert refused == len(outcomes), outcomes


def test_no_pickle_on_the_read_path(small_tree: Path, tmp_path: Path) -> None:
    """Reading never unpickles: in a child process pickle's loaders are traps and torch.load
    must be called with weights_only=True, while datasets of every format are read and verified."""
    from shardkit.formats import format_names
    datasets = []
    for name in format_names():
        dst = tmp_path / name
        shardkit.convert(str(small_tree), str(dst), format=name, samples_per_shard=8, quiet=True)
        datasets.append(str(dst))
    # torch first: its import subclasses pickle.Unpickler where dill is installed (a test extra's dependency)
    code = f"""
import torch
import pickle
def trap(*a, **k):
    raise SystemExit("pickle was used on the read path")
pickle.loads = pickle.load = pickle.Unpickler = trap
real_load = torch.load
def guarded(*a, **k):
    if k.get("weights_only") is not True:
        raise SystemExit("torch.load without weights_only=True")
    return real_load(*a, **k)
torch.load = guarded
import shardkit
for dst in {datasets!r}:
    ds = shardkit.open_dataset(dst, decode="numpy", verify_checksums="full")
    for i in range(len(ds)):
        ds[i]
    assert shardkit.verify(dst, mode="deep").ok
    print("ok", len(ds))
"""
    result = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split("\n")[:-1] == ["ok 24"] * len(datasets)


@pytest.mark.parametrize("path", ["../outside.h5", "/etc/passwd", "shards/../../outside.h5", "shards/./x.h5",
                                  "shards\\..\\x.h5", "C:/x.h5", "", "other/x.h5", "shards/a/../../../x"])
def test_manifest_paths_cannot_leave_dst(dataset: Path, path: str) -> None:
    def edit(data: dict) -> None:
        data["shards"][0]["path"] = path
    forge_manifest(dataset, edit)
    with pytest.raises(ManifestError, match="unsafe shard path"):
        shardkit.open_dataset(dataset)
    report = shardkit.verify(str(dataset))
    assert [p.kind for p in report.problems] == ["manifest"]
    assert "unsafe shard path" in report.problems[0].message


def test_newer_manifest_version_is_refused(dataset: Path) -> None:
    newest = max(MANIFEST_VERSION, FIELDS_MANIFEST_VERSION)
    forge_manifest(dataset, lambda data: data.update(manifest_version=newest + 1))
    with pytest.raises(ManifestError, match="newer than this shardkit reads"):
        shardkit.open_dataset(dataset)
    report = shardkit.verify(str(dataset))
    assert "newer" in report.problems[0].message


def test_newer_format_version_is_refused(dataset: Path, fmt: str) -> None:
    forge_manifest(dataset, lambda data: data["format"].update(version=data["format"]["version"] + 1))
    with pytest.raises(ManifestError, match=f"{fmt} format version .* is newer"):
        shardkit.open_dataset(dataset)
    report = shardkit.verify(str(dataset))
    assert [p.kind for p in report.problems] == ["manifest"] and "newer" in report.problems[0].message
