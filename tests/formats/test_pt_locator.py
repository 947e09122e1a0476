""".pt format version 3: readers map a shard's tensors through the locator in the archive's comment,
with the same results as torch.load, and refuse a locator that is damaged or points outside the archive."""
from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

import shardkit
from shardkit.errors import CorruptShardError
from shardkit.formats import get_format
from shardkit.formats.locating import gaps_crc32
from shardkit.formats.pt import PTReader
from shardkit.formats.pt_locator import PTLocator, read_locator
from tests.faults.crafting import reseal
from tests.formats.shard_helpers import payload_bytes, trace_peaks

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
V3 = sorted(path for path in GOLDEN.glob("pt-v3*") if (path / "manifest.json").is_file())


@pytest.mark.parametrize("golden", V3, ids=[path.name for path in V3])
def test_located_reads_equal_torch_load_reads_for_every_layout(golden: Path) -> None:
    ds = shardkit.open_dataset(golden, decode=None)
    schema = ds.manifest.schema
    for entry in ds.manifest.shards:
        path = str(golden / entry.path)
        fast, slow = PTReader(path, schema), PTReader(path, schema, located=False)
        assert fast._map is not None                   # opened without unpickling
        assert (len(fast), fast.dataset_id, fast.labels().tolist()) == \
            (len(slow), slow.dataset_id, slow.labels().tolist())
        for index in range(len(slow)):
            one, other = fast.read(index), slow.read(index)
            assert payload_bytes(one.payload) == payload_bytes(other.payload)
            assert (one.label, one.crc32, fast.key(index)) == (other.label, other.crc32, slow.key(index))
        fast.close()
        slow.close()
    ds.close()


def locator_of(path: Path) -> "tuple[PTLocator, int]":
    with open(path, "rb") as handle:
        found = read_locator(handle.fileno(), str(path), path.stat().st_size)
    assert found is not None
    return found


def rewrite_locator(path: Path, edit: Callable[[PTLocator], None], meta_flip: int = 0) -> None:
    """Change the locator as a crafted file would: its CRC32s and the archive's comment length made
    right (meta_flip: then made wrong again, as a stale locator's would be)."""
    locator, comment = locator_of(path)
    archive = bytearray(path.read_bytes()[:-comment])
    edit(locator)
    size = len(locator.encode())
    struct.pack_into("<H", archive, len(archive) - 2, size)
    locator.file_size = len(archive) + size
    locator.meta_crc32 = gaps_crc32(archive, locator.tables.values(), 0, len(archive)) ^ meta_flip
    path.write_bytes(bytes(archive) + locator.encode())


def golden_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "pt-v3"
    shutil.copytree(GOLDEN / "pt-v3", dst)
    return dst


def past_end(locator: PTLocator) -> None:
    locator.tables["labels"] = (locator.file_size - 8, locator.tables["labels"][1])


def overlap(locator: PTLocator) -> None:
    locator.tables["crc32"] = (locator.tables["labels"][0], locator.tables["crc32"][1])


def count_off(locator: PTLocator) -> None:
    locator.fields["num_samples"] += 1


def bad_count(locator: PTLocator) -> None:
    locator.fields["num_samples"] = "5"


CRAFTED = {"past_end": (past_end, "past the end"), "overlap": (overlap, "overlap"),
           "count": (count_off, "bytes for"), "count_type": (bad_count, "num_samples")}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_locator_is_refused_naming_the_shard(tmp_path: Path, case: str) -> None:
    edit, message = CRAFTED[case]
    dst = golden_copy(tmp_path)
    rewrite_locator(dst / "shards" / "shard-00000.pt", edit)
    reseal(dst)
    ds = shardkit.open_dataset(dst, decode=None)
    with pytest.raises(CorruptShardError, match=message) as caught:
        ds[0]
    assert "shard-00000.pt: corrupt .pt shard: locator" in str(caught.value)


#: Edits of a fixed-shape shard's tensors (bytes its locator does not cover): (tensor, sample, value,
#: what the refusal says); sample None adds value to every entry. Offsets shifted by one make two
#: lengths differ from the raw ones; all of them shifted keep every length right.
TABLE_EDITS = {"raw_length": ("raw_lengths", 1, 9, "array payloads are not 8 bytes"),
               "negative_raw_length": ("raw_lengths", 0, -8, "negative lengths"),
               "offset_shifted": ("offsets", 2, 17, "stored and raw lengths differ"),
               "first_offset": ("offsets", 0, 4, "offsets are not increasing"),
               "every_offset": ("offsets", None, 8, "offsets are not increasing"),
               "crc_too_wide": ("crc32", 0, 1 << 33, "CRCs out of range"),
               "negative_crc": ("crc32", 1, -1, "CRCs out of range")}


@pytest.mark.parametrize("case", sorted(TABLE_EDITS))
def test_fixed_shape_tables_that_disagree_are_refused_on_open(tmp_path: Path, case: str) -> None:
    """A located reader checks a table shard's offsets, lengths and CRCs before a read (in one
    pass when they are right): a damaged entry is refused, naming the shard and what is wrong."""
    tensor, sample, value, message = TABLE_EDITS[case]
    dst = tmp_path / "pt-v3-tabular"
    shutil.copytree(GOLDEN / "pt-v3-tabular", dst)
    schema = shardkit.open_dataset(dst).manifest.schema
    assert schema.is_array and schema.compression == "none" and schema.sample_nbytes == 8
    shard = dst / "shards" / "shard-00000.pt"
    locator, _ = locator_of(shard)
    begin, size = locator.tables[tensor]
    data = bytearray(shard.read_bytes())
    table = np.frombuffer(data, dtype="<i8", count=size // 8, offset=begin)
    if sample is None:
        table += value
    else:
        table[sample] = value
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError, match=message) as caught:
        PTReader(str(shard), schema)
    assert "shard-00000.pt: corrupt .pt shard" in str(caught.value)


def test_a_fixed_shape_data_tensor_shorter_than_its_rows_is_refused(tmp_path: Path) -> None:
    """A locator (CRC32s right) whose data tensor is one row short of what the offsets say."""
    dst = tmp_path / "pt-v3-tabular"
    shutil.copytree(GOLDEN / "pt-v3-tabular", dst)
    shard = dst / "shards" / "shard-00000.pt"

    def shorten(locator: PTLocator) -> None:
        offset, size = locator.tables["data"]
        locator.tables["data"] = (offset, size - 8)
    rewrite_locator(shard, shorten)
    with pytest.raises(CorruptShardError, match="offsets are not increasing within the data"):
        PTReader(str(shard), shardkit.open_dataset(dst).manifest.schema)


@pytest.mark.parametrize("back", [1, 9, 20, 30])
def test_a_flipped_locator_byte_is_refused(tmp_path: Path, back: int) -> None:
    shard = golden_copy(tmp_path) / "shards" / "shard-00000.pt"
    data = bytearray(shard.read_bytes())
    data[-back - 8] ^= 0x10         # inside the trailer or the JSON before it (the magic is the last 8 bytes)
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError, match=r"shard-00000.pt: corrupt .pt shard: locator"):
        PTReader(str(shard), shardkit.open_dataset(GOLDEN / "pt-v3").manifest.schema)


def test_an_archive_rewritten_by_torch_reads_through_torch_load(tmp_path: Path) -> None:
    """torch.save over the shard keeps no locator: the shard reads through torch.load, as version 2."""
    dst = golden_copy(tmp_path)
    shard = dst / "shards" / "shard-00000.pt"
    content = torch.load(shard, weights_only=True)
    content["labels"] = 1 - content["labels"]
    with open(shard, "wb") as handle:
        torch.save(content, handle)
    reseal(dst)
    ds = shardkit.open_dataset(dst, decode=None)
    assert [ds[i][1] for i in range(3)] == content["labels"][:3].tolist()
    assert ds.shard_cache.reader(0)._map is None


def test_a_locator_of_other_archive_bytes_is_not_used(tmp_path: Path) -> None:
    """Bytes outside the tables (zip headers, the pickle) differ from those the locator was written
    for: the shard opens through torch.load, which sees what the archive holds."""
    dst = golden_copy(tmp_path)
    shard = dst / "shards" / "shard-00000.pt"
    rewrite_locator(shard, lambda locator: None, meta_flip=1)
    reseal(dst)
    ds = shardkit.open_dataset(dst, decode=None)
    assert ds.shard_cache.reader(0)._map is None and len(ds.shard_cache.reader(0)) == ds.manifest.shards[0].num_samples


def test_verify_deep_reports_a_locator_that_disagrees_with_the_archive(tmp_path: Path) -> None:
    dst = golden_copy(tmp_path)
    shard = dst / "shards" / "shard-00000.pt"

    def swap(locator: PTLocator) -> None:          # same sizes, so every range check passes
        locator.tables["labels"], locator.tables["crc32"] = locator.tables["crc32"], locator.tables["labels"]
    rewrite_locator(shard, swap)
    reseal(dst)
    report = shardkit.verify(str(dst), mode="deep")
    assert any("locator disagrees with the archive" in problem.message for problem in report.problems)


@pytest.mark.parametrize("golden", ["pt-v3", "pt-v3-raw-gzip", "pt-v2", "pt-v1"])
def test_peek_gives_the_count_and_identity_a_reader_gives(golden: str) -> None:
    ds = shardkit.open_dataset(GOLDEN / golden, decode=None)
    fmt = get_format("pt")
    for number, entry in enumerate(ds.manifest.shards):
        reader = ds.shard_cache.reader(number)
        assert fmt.peek(str(GOLDEN / golden / entry.path), ds.manifest.schema, {}) == (len(reader), reader.dataset_id)
    ds.close()


def test_sealing_a_shard_holds_no_copy_of_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer seals the archive through a map of it: a 24 MB shard is sealed holding well under
    a megabyte of Python memory (reading it whole held the shard's size again), and it still opens
    through its locator with the same rows."""
    import numpy as np

    from shardkit.formats import pt_writer
    from shardkit.records import Encoded
    from shardkit.schema import SampleSchema
    schema = SampleSchema(kind="tabular", layout="array", dtype="float32", shape=(64,))
    rows = np.arange(100_000 * 64, dtype=np.float32).reshape(100_000, 64)
    writer = get_format("pt").open_writer(str(tmp_path / "big.pt"), schema, {}, "id")
    writer.append_many([Encoded.make(row) for row in rows])
    sealed = trace_peaks(pt_writer, "seal", monkeypatch)
    writer.close()
    assert (tmp_path / "big.pt").stat().st_size > 24_000_000 and sealed[0] < 1 << 20
    reader = PTReader(str(tmp_path / "big.pt"), schema)
    assert reader._map is not None                      # the locator describes the sealed file
    assert np.array_equal(np.asarray(reader.read(99_999).payload), rows[-1])
    reader.close()
