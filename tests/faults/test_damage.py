"""Damage after convert, on real files: truncated, extended, missing, extra and swapped shards,
and edits of manifest.json. `verify` (full) must find and name each one in every trial;
readers must raise CorruptShardError naming the shard's path on first access."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import shardkit
from shardkit.errors import CorruptShardError, ManifestError, NotADatasetError

from .crafting import forge_manifest
from .helpers import make_tiny_tree, run_cli, shard_paths

TRUNCATION_TRIALS = 12
MANIFEST_FLIP_TRIALS = 40
MANIFEST_BYTE_TRIALS = 20


@pytest.fixture(scope="module")
def damage_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("damage") / "src"
    make_tiny_tree(root, 30, seed=17)
    return root


@pytest.fixture
def pristine(damage_tree: Path, fmt: str, tmp_path: Path) -> Path:
    dst = tmp_path / "dst"
    shardkit.convert(str(damage_tree), str(dst), format=fmt, samples_per_shard=8, quiet=True)
    return dst


def _named(report, kinds: set) -> set:
    return {p.shard for p in report.problems if p.kind in kinds}


def test_truncated_or_extended_shards(pristine: Path, fmt: str) -> None:
    """Each round damages every shard at once (each is checked on its own: one verify run sees
    as many independent trials), every fourth trial extending a shard instead of cutting it."""
    shards = shard_paths(pristine)
    originals = [shard.read_bytes() for shard in shards]
    rng = np.random.default_rng(21)
    found = raised = 0
    for first_trial in range(0, TRUNCATION_TRIALS, len(shards)):
        damaged = range(min(len(shards), TRUNCATION_TRIALS - first_trial))
        try:
            for number in damaged:
                original = originals[number]
                if (first_trial + number) % 4 == 3:
                    shards[number].write_bytes(original + bytes(int(rng.integers(1, 64))))
                else:
                    shards[number].write_bytes(original[:int(rng.integers(0, len(original)))])
            for mode in ("quick", "full"):
                report = shardkit.verify(str(pristine), mode=mode)
                assert _named(report, {"size"}) == {f"shards/{shards[n].name}" for n in damaged}, report.problems
            found += len(damaged)
            ds = shardkit.open_dataset(pristine, decode=None)
            for number in damaged:
                with pytest.raises(CorruptShardError, match=str(shards[number])):
                    ds[int(ds.shard_starts[number])]
                raised += 1
            ds.close()
        finally:
            for shard, original in zip(shards, originals):
                shard.write_bytes(original)
    print(f"\n{fmt}: {found}/{TRUNCATION_TRIALS} truncated or extended shards found by verify, "
          f"{raised}/{TRUNCATION_TRIALS} refused by readers")
    assert found == raised == TRUNCATION_TRIALS
    assert shardkit.verify(str(pristine)).ok


def test_missing_shards(pristine: Path) -> None:
    for shard in shard_paths(pristine):
        content = shard.read_bytes()
        shard.unlink()
        try:
            report = shardkit.verify(str(pristine), mode="quick")
            assert [(p.kind, p.shard) for p in report.problems] == [("missing", f"shards/{shard.name}")]
            ds = shardkit.open_dataset(pristine, decode=None)
            index = int(ds.shard_starts[shard_paths(pristine).index(shard)])
            with pytest.raises(CorruptShardError, match=f"{shard}.*missing"):
                ds[index]
            ds.close()
        finally:
            shard.write_bytes(content)


@pytest.mark.parametrize("name", ["notes.txt", ".shard-00000.tmp", "shard-00099.h5", ".hidden", "sub"])
def test_extra_files_in_shards(pristine: Path, name: str) -> None:
    extra = pristine / "shards" / name
    if name == "sub":
        extra.mkdir()
    else:
        extra.write_bytes(b"stray")
    report = shardkit.verify(str(pristine), mode="quick")
    assert [(p.kind, p.shard) for p in report.problems] == [("extra", f"shards/{name}")]


def test_leftovers_without_a_manifest_are_not_a_dataset(pristine: Path) -> None:
    """After a kill, shards/ holds temporary files but there is no manifest: verify says the
    conversion is unfinished (exit 2), it does not list files of a dataset that does not exist."""
    (pristine / "shards" / ".shard-00001.tmp").write_bytes(b"half")
    (pristine / "manifest.json").unlink()
    with pytest.raises(NotADatasetError, match="--resume"):
        shardkit.verify(str(pristine))
    result = run_cli("verify", pristine)
    assert result.returncode == 2 and "not a shardkit dataset" in result.stderr


def test_swapped_shards(pristine: Path, fmt: str) -> None:
    shards = shard_paths(pristine)
    pairs = [(i, j) for i in range(len(shards)) for j in range(i + 1, len(shards))]
    for i, j in pairs:
        a, b = shards[i], shards[j]
        tmp = a.with_name("swap")
        os.replace(a, tmp)
        os.replace(b, a)
        os.replace(tmp, b)
        try:
            report = shardkit.verify(str(pristine), mode="full")
            assert _named(report, {"size", "checksum", "count"}) == {f"shards/{a.name}", f"shards/{b.name}"}
        finally:
            os.replace(a, tmp)
            os.replace(b, a)
            os.replace(tmp, b)
    print(f"\n{fmt}: {len(pairs)}/{len(pairs)} swapped shard pairs found by verify (both shards named)")


def _manifest_problem(dst: Path) -> bool:
    report = shardkit.verify(str(dst), mode="full")
    return any(p.kind == "manifest" for p in report.problems)


def _content(raw: bytes) -> object:
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:
        return "not JSON"


def test_edits_of_the_manifest(pristine: Path, fmt: str) -> None:
    path = pristine / "manifest.json"
    original = path.read_bytes()
    rng = np.random.default_rng(22)
    trials = detected = 0

    def trial(damaged: bytes) -> None:
        """The manifest's content is canonical, not its bytes: verify and readers must refuse every
        edit that changes the content, and accept one that only changes spacing or key order."""
        nonlocal trials, detected
        path.write_bytes(damaged)
        try:
            if _content(damaged) == _content(original):
                assert not _manifest_problem(pristine)
                assert len(shardkit.open_dataset(pristine)) == json.loads(original)["num_samples"]
                return
            trials += 1
            detected += _manifest_problem(pristine)
            with pytest.raises(ManifestError):
                shardkit.open_dataset(pristine)
        finally:
            path.write_bytes(original)

    for _ in range(MANIFEST_FLIP_TRIALS):
        damaged = bytearray(original)
        damaged[int(rng.integers(len(damaged)))] ^= 1 << int(rng.integers(8))
        trial(bytes(damaged))
    for _ in range(MANIFEST_BYTE_TRIALS):
        damaged = bytearray(original)
        position = int(rng.integers(len(damaged)))
        damaged[position] = (damaged[position] + int(rng.integers(1, 256))) % 256
        trial(bytes(damaged))
    trial(original[:len(original) // 2])
    trial(b"")
    trial(original.replace(b"\n", b"\r\n"))                                  # spacing only: fine
    trial(json.dumps(json.loads(original), indent=4).encode())               # re-indented: fine
    edited = json.loads(original)
    edited["classes"][0] = "renamed"                                         # content, not resealed
    trial(json.dumps(edited, indent=2, sort_keys=True).encode() + b"\n")
    print(f"\n{fmt}: {detected}/{trials} edits of manifest.json found by verify")
    assert detected == trials
    assert shardkit.verify(str(pristine)).ok


def test_forged_manifest_is_caught_by_the_shards(pristine: Path) -> None:
    """A manifest edited and resealed (its self-checksum recomputed) still has to agree with
    the shards' sizes, counts and sha256: verify names the shard it lies about."""
    cases = {"size": lambda d: d["shards"][1].update(size=d["shards"][1]["size"] + 1),
             "checksum": lambda d: d["shards"][1].update(sha256="0" * 64),
             "count": lambda d: (d["shards"][1].update(num_samples=d["shards"][1]["num_samples"] - 1),
                                 [s.update(first_index=s["first_index"] - 1) for s in d["shards"][2:]],
                                 d.update(num_samples=d["num_samples"] - 1),
                                 # a forger who keeps the manifest consistent shortens the sample table too
                                 d.get("sample_table")
                                 and d["sample_table"].update(size=d["sample_table"]["size"] - 12))}
    backup = pristine.parent / "backup.json"
    shutil.copyfile(pristine / "manifest.json", backup)
    for kind, edit in cases.items():
        forge_manifest(pristine, edit)
        report = shardkit.verify(str(pristine), mode="full")
        assert (kind, f"shards/{shard_paths(pristine)[1].name}") in {(p.kind, p.shard) for p in report.problems}
        shutil.copyfile(backup, pristine / "manifest.json")
