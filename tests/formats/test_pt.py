"""PT specifics: plain contents, mmap'd zero-copy reads, flat memory, refusal of malformed files."""
from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from shardkit.errors import CorruptShardError, UsageError
from shardkit.formats import get_format
from shardkit.records import Encoded
from shardkit.schema import SampleSchema

from .shard_helpers import sized_samples, write_shard

FMT = get_format("pt")
SCHEMA = SampleSchema(kind="image")


def _write(path: Path, samples: list, schema: SampleSchema = SCHEMA) -> None:
    write_shard(FMT.name, path, schema, samples)


def test_contents_are_plain_tensors_as_documented(tmp_path: Path) -> None:
    schema = SampleSchema(kind="image", compression="gzip", compression_level=1)
    samples = [Encoded.make(b"xyz" * 500, 2, key="x"), Encoded.make(b"", -1, key="dir/é"),
               Encoded.make(b"\xff" * 7, 0, key="z")]
    path = tmp_path / "s.pt"
    write_shard(FMT.name, path, schema, samples, dataset_id="feed")
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) == []
    shard = torch.load(str(path), mmap=True, weights_only=True)
    assert list(shard) == ["shardkit_format", "format_version", "layout", "dtype", "shape", "compression",
                           "num_samples", "data", "offsets", "raw_lengths", "labels", "crc32", "dataset_id", "keys",
                           "key_blocks"]
    assert (shard["shardkit_format"], shard["format_version"], shard["compression"], shard["num_samples"],
            shard["dataset_id"]) == ("pt", 3, "gzip", 3, "feed")
    block = zlib.decompress(shard["keys"].numpy().tobytes())
    assert shard["key_blocks"].tolist() == [0, len(shard["keys"])]
    assert np.frombuffer(block[:16], "<u4").tolist() == [3, 1, 6, 1] and block[16:] == "xdir/éz".encode()
    assert {name: shard[name].dtype for name in ("data", "offsets", "raw_lengths", "labels", "crc32")} == {
        "data": torch.uint8, "offsets": torch.int64, "raw_lengths": torch.int64, "labels": torch.int64,
        "crc32": torch.int64}
    offsets = shard["offsets"].tolist()
    first = shard["data"][offsets[0]:offsets[1]].numpy().tobytes()
    assert first == zlib.compress(b"xyz" * 500, 1)
    assert shard["raw_lengths"].tolist() == [1500, 0, 7] and shard["labels"].tolist() == [2, -1, 0]
    assert shard["crc32"].tolist() == [s.crc32 for s in samples]


def test_file_bytes_do_not_depend_on_the_file_name(tmp_path: Path) -> None:
    samples = sized_samples(30, 500)
    _write(tmp_path / "one.pt", samples)
    _write(tmp_path / ".shard-00007.pt.tmp", samples)
    assert (tmp_path / "one.pt").read_bytes() == (tmp_path / ".shard-00007.pt.tmp").read_bytes()


def test_payloads_are_read_only_views_of_the_mapping(tmp_path: Path) -> None:
    path = tmp_path / "s.pt"
    samples = sized_samples(5, 1000)
    _write(path, samples)
    reader = FMT.open_reader(str(path), SCHEMA)
    payload = reader.read(2).payload
    assert isinstance(payload, np.ndarray) and payload.dtype == np.uint8 and payload.ndim == 1
    assert not payload.flags.writeable and not payload.flags.owndata
    assert payload.tobytes() == samples[2].payload
    reader.close()
    assert payload.tobytes() == samples[2].payload     # the view keeps its mapping alive


def _rss_anon_kib() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    pytest.skip("no RssAnon in /proc/self/status")


def test_open_shards_cost_no_private_memory(tmp_path: Path) -> None:
    payload = os.urandom(4 << 20)
    paths = []
    for number in range(6):                  # 6 shards of 16 MiB
        path = tmp_path / f"s{number}.pt"
        _write(path, [Encoded.make(payload, k) for k in range(4)])
        paths.append(path)
    before = _rss_anon_kib()
    readers = [FMT.open_reader(str(path), SCHEMA) for path in paths]
    for reader in readers:
        assert reader.read(3).crc_ok()
    grown = _rss_anon_kib() - before
    assert grown < 8 * 1024, f"private memory grew by {grown} KiB for 96 MiB of open shards"
    for reader in readers:
        reader.close()


def test_lzf_is_refused() -> None:
    with pytest.raises(UsageError, match="lzf"):
        FMT.check(SampleSchema(kind="image", compression="lzf"))


def _good() -> dict:
    data = b"hello world!"
    return {"shardkit_format": "pt", "format_version": 1, "layout": "bytes", "dtype": None, "shape": None,
            "compression": "none", "num_samples": 2, "data": torch.frombuffer(bytearray(data), dtype=torch.uint8),
            "offsets": torch.tensor([0, 5, 12]), "raw_lengths": torch.tensor([5, 7]),
            "labels": torch.tensor([0, 1]), "crc32": torch.tensor([zlib.crc32(data[:5]), zlib.crc32(data[5:])])}


def _with(**changes) -> dict:
    shard = _good()
    shard.update(changes)
    return shard


@pytest.mark.parametrize("content, message", [
    (torch.zeros(3), "not a dict"),
    (_good(), None),
    (_with(offsets=torch.tensor([0, 7, 5])), "offsets are not increasing"),
    (_with(offsets=torch.tensor([0, 5, 13])), "offsets are not increasing"),
    (_with(labels=torch.tensor([0, 1, 2])), "tensor lengths"),
    (_with(crc32=torch.tensor([0, 1], dtype=torch.int32)), "crc32 is not a 1-D"),
    (_with(data=torch.zeros(3, 4, dtype=torch.uint8)), "data is not a 1-D"),
    (_with(raw_lengths=torch.tensor([5, 8])), "stored and raw lengths differ"),
    (_with(layout="array"), "layout is 'array'"),
    (_with(format_version=4), "format version 4"),
    (_with(format_version=2), "no dataset_id"),
    (_with(format_version=2, dataset_id="d", keys=torch.zeros(0, dtype=torch.uint8)), "key_blocks is not"),
    (_with(num_samples="2"), "num_samples"),
    (_with(crc32=torch.tensor([-1, 0])), "CRCs out of range"),
])
def test_malformed_contents_are_refused(tmp_path: Path, content, message) -> None:
    path = tmp_path / "s.pt"
    torch.save(content, str(path))
    if message is None:            # the unchanged control opens
        reader = FMT.open_reader(str(path), SCHEMA)
        assert len(reader) == 2
        reader.close()
        return
    with pytest.raises(CorruptShardError, match=message) as caught:
        FMT.open_reader(str(path), SCHEMA)
    assert str(path) in str(caught.value)


class Sneaky:
    """Not a plain container: weights_only loading must refuse it."""


def test_pickled_objects_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.pt"
    torch.save(_with(extra=Sneaky()), str(path))
    with pytest.raises(CorruptShardError, match="not a readable .pt shard") as caught:
        FMT.open_reader(str(path), SCHEMA)
    assert str(path) in str(caught.value)


def test_compressed_length_claims_are_checked_before_inflating(tmp_path: Path) -> None:
    schema = SampleSchema(kind="image", compression="gzip")
    stored = zlib.compress(b"a" * 100)
    shard = _with(compression="gzip", num_samples=1, data=torch.frombuffer(bytearray(stored), dtype=torch.uint8),
                  offsets=torch.tensor([0, len(stored)]), labels=torch.tensor([0]),
                  crc32=torch.tensor([zlib.crc32(b"a" * 100)]))
    for claim, message in ((10 ** 12, "cannot hold"), (99, "does not inflate to its recorded 99 bytes")):
        path = tmp_path / f"claim{claim}.pt"
        torch.save(dict(shard, raw_lengths=torch.tensor([claim])), str(path))
        reader = FMT.open_reader(str(path), schema)
        with pytest.raises(CorruptShardError, match=message):
            reader.read(0)
        reader.close()


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    for path in (empty, tmp_path / "missing.pt"):
        with pytest.raises(CorruptShardError) as caught:
            FMT.open_reader(str(path), SCHEMA)
        assert str(path) in str(caught.value)
