"""A manifest is untrusted input: what it claims (counts, shard list, names, its own size) is
bounded and checked before anything is allocated from it, and manifest.json is read only as a
regular file inside DST. Each refusal is one ManifestError naming manifest.json."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Dict

import pytest

import shardkit
from shardkit.errors import ManifestError
from tests.faults.crafting import forge_manifest
from tests.faults.helpers import assert_no_traceback, run_cli
from tests.security.crafted import one_image_dataset

#: The limits formats/manifest.md states (shardkit.manifest.MAX_MANIFEST_BYTES and MAX_NAME_CHARS,
#: shardkit.shard_table.MAX_SAMPLES).
MAX_MANIFEST_BYTES = 256 << 20
MAX_NAME_CHARS = 1 << 16
MAX_SAMPLES = 1 << 40


def _claim_samples(count: int) -> Callable[[Dict[str, Any]], None]:
    """The last shard claims `count` samples; the sample table entry is sized to match, as an
    attacker who reseals the manifest would leave it."""
    def edit(data: Dict[str, Any]) -> None:
        data["shards"][-1]["num_samples"] = count
        data["num_samples"] = sum(shard["num_samples"] for shard in data["shards"])
        if "sample_table" in data:
            data["sample_table"]["size"] = 12 * data["num_samples"]
    return edit


def _many_huge_shards(data: Dict[str, Any]) -> None:
    """Sixteen shards, each claiming 2**59 samples in 2**63 - 1 bytes: each fits its claimed size,
    the counts sum to 2**63 (past int64)."""
    first = data["shards"][0]
    data["shards"] = [dict(first, path=f"shards/shard-{n:05d}.h5", num_samples=1 << 59, first_index=n << 59,
                           size=(1 << 63) - 1) for n in range(16)]
    data.pop("sample_table", None)


def _long_class_name(data: Dict[str, Any]) -> None:
    data["classes"] = ["x" * (MAX_NAME_CHARS + 1)]


CLAIMS = {
    "a shard claiming 400 million samples": (_claim_samples(400_000_000), "claims 400000000 samples in"),
    "counts summing past 2**63": (_many_huge_shards, f"more than {MAX_SAMPLES} samples in all"),
    "a NUL in a shard path": (lambda data: data["shards"][0].update(path="shards/shard-00000.h5\0.x"),
                              "unsafe shard path"),
    "a count given as a string": (lambda data: data["shards"][0].update(num_samples="1"),
                                  "num_samples must be a whole JSON number, not str"),
    "a count given as a fraction": (lambda data: data["shards"][0].update(num_samples=1.9),
                                    "num_samples must be a whole JSON number, not float"),
    "a count given as true": (lambda data: data["shards"][0].update(num_samples=True),
                              "num_samples must be a whole JSON number, not bool"),
    "a class name too long": (_long_class_name, "class name is longer than"),
}


@pytest.mark.parametrize("case", sorted(CLAIMS))
def test_crafted_claims_are_refused_when_the_manifest_opens(tmp_path: Path, case: str) -> None:
    """Mutations: dropping ShardTable._check_counts' size or total check; ShardEntry.from_dict
    taking int(value); check_relative_path without its NUL check; _class_names without its bound."""
    edit, reason = CLAIMS[case]
    dst = one_image_dataset(tmp_path, "hdf5")
    forge_manifest(dst, edit)
    manifest = str(dst / "manifest.json")
    with pytest.raises(ManifestError, match=reason) as caught:
        shardkit.open_dataset(dst)
    assert str(caught.value).startswith(manifest)
    report = shardkit.verify(str(dst), mode="quick")
    assert [problem.kind for problem in report.problems] == ["manifest"]
    assert report.problems[0].message.startswith(manifest) and reason in report.problems[0].message
    result = run_cli("verify", dst)
    assert result.returncode == 1
    assert_no_traceback(result)


def test_a_count_the_claimed_size_can_hold_is_still_checked_against_the_shard(tmp_path: Path) -> None:
    """The size bound is the format's floor, not a guess: a shard of one PNG claiming a second
    sample (12 bytes fit easily in its size) opens as a manifest, and the shard says otherwise."""
    dst = one_image_dataset(tmp_path, "hdf5")
    forge_manifest(dst, _claim_samples(2))
    dataset = shardkit.open_dataset(dst)
    assert len(dataset) == 2
    with pytest.raises(shardkit.CorruptShardError, match="sample_table.bin|sample table|holds 1 samples"):
        dataset[0]


def test_uncompressed_rows_count_their_bytes_against_the_size(tmp_path: Path) -> None:
    """Raw 8x8 RGB rows stored uncompressed take 192 bytes each in every format: a shard claiming
    more rows than its size holds at 12 + 192 bytes a sample is refused, though 12 bytes a sample
    would fit. Mutation: Manifest.check_consistency leaving out the row bytes."""
    dst = one_image_dataset(tmp_path, "hdf5", image_mode="raw", size=(8, 8))
    size = json.loads((dst / "manifest.json").read_text())["shards"][0]["size"]
    claimed = size // 12            # fits at 12 bytes a sample, not at 204
    forge_manifest(dst, _claim_samples(claimed))
    with pytest.raises(ManifestError, match=f"claims {claimed} samples in {size} bytes.* 204 bytes a sample"):
        shardkit.open_dataset(dst)


def test_too_many_shards_are_refused_before_any_is_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard-count bound, lowered to 3 here so that a 4-shard list passes it (a million
    entries would take the test minutes). Mutation: check_shard_count returning at once."""
    import shardkit.shard_table
    dst = one_image_dataset(tmp_path, "hdf5")
    forge_manifest(dst, lambda data: data.update(shards=[dict(data["shards"][0], path=f"shards/s{n}.h5",
                                                              first_index=n) for n in range(4)]))
    monkeypatch.setattr(shardkit.shard_table, "MAX_SHARDS", 3, raising=False)
    with pytest.raises(ManifestError, match="lists 4 shards, more than the 3"):
        shardkit.open_dataset(dst)


def test_an_oversized_manifest_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A manifest.json past MAX_MANIFEST_BYTES (sparse here: no disk is used) is refused from its
    size alone. Mutation: _read_manifest_file without its size check (the file is then read and
    parsed, and fails as JSON instead)."""
    dst = one_image_dataset(tmp_path, "hdf5")
    path = dst / "manifest.json"
    with open(path, "r+b") as handle:
        handle.truncate(MAX_MANIFEST_BYTES + 1)
    with pytest.raises(ManifestError, match=f"has {MAX_MANIFEST_BYTES + 1} bytes, more than") as caught:
        shardkit.open_dataset(dst)
    assert str(caught.value).startswith(str(path))


def test_a_manifest_link_out_of_the_dataset_is_not_followed(tmp_path: Path) -> None:
    """manifest.json as a link to a valid manifest outside DST: refused, never read through.
    Mutation: _read_manifest_file opening without O_NOFOLLOW."""
    dst = one_image_dataset(tmp_path, "hdf5")
    outside = tmp_path / "elsewhere.json"
    os.replace(dst / "manifest.json", outside)
    (dst / "manifest.json").symlink_to(outside)
    with pytest.raises(ManifestError, match="is a symbolic link") as caught:
        shardkit.open_dataset(dst)
    assert str(caught.value).startswith(str(dst / "manifest.json"))
    result = run_cli("verify", dst)
    assert result.returncode == 1 and "symbolic link" in result.stderr + result.stdout
    assert_no_traceback(result)


def test_a_manifest_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO named manifest.json is opened non-blocking and refused by fstat, never read."""
    dst = one_image_dataset(tmp_path, "hdf5")
    (dst / "manifest.json").unlink()
    os.mkfifo(dst / "manifest.json")
    with pytest.raises(ManifestError, match="is not a regular file"):
        shardkit.open_dataset(dst)
