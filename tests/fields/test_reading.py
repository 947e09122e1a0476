"""Reading a dataset of named fields: only the fields asked for are touched, decode per field,
tuples and transforms, batches, samplers, ShardStream and its resume, the collate functions."""
from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import shardkit
from shardkit.errors import CorruptSampleError, UsageError

from .conftest import png_bytes

FIELDS = {"image": "image", "caption": "text", "label": {"type": "label", "classes": ["a", "b"]},
          "boxes": {"type": "array", "dtype": "float32", "shape": [None, 4]}, "meta": {"type": "json"}}


def samples(count: int = 30) -> List[Dict[str, Any]]:
    return [{"image": png_bytes(n), "caption": f"caption {n}", "label": n % 2,
             "boxes": np.full((n % 3, 4), n, np.float32), "meta": {"n": n}} for n in range(count)]


@pytest.fixture
def dataset(tmp_path: Path, fmt: str) -> Path:
    shardkit.write(samples(), tmp_path / "ds", FIELDS, format=fmt, samples_per_shard=8, order="source")
    return tmp_path / "ds"


def mapped_files() -> str:
    with open("/proc/self/maps") as maps:
        text = maps.read()
    return text + "\n".join(os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                            if os.path.exists(f"/proc/self/fd/{fd}"))


def test_one_field_reads_only_its_own_files(dataset: Path) -> None:
    """The other fields' files and tables are removed: reading the caption, every shard hashed
    (verify_checksums="full"), still works, and nothing of theirs is open or mapped.
    Mutation: FieldsDataset reading every column, not those asked for, fails this test."""
    for path in list((dataset / "shards").iterdir()) + list(dataset.glob("sample_table.*.bin")):
        if ".caption." not in path.name:
            path.unlink()
    with shardkit.open_dataset(dataset, fields=("caption",), verify_checksums="full") as ds:
        assert [ds[i] for i in range(len(ds))] == [(f"caption {n}",) for n in range(30)]
        assert [one[0] for one in ds.__getitems__(list(range(30)))] == [f"caption {n}" for n in range(30)]
        assert list(ds.field_caches) == ["caption"]
    with shardkit.open_dataset(dataset, fields=("caption",)) as ds:
        assert ds.__getitems__([0, 29]) == [("caption 0",), ("caption 29",)]
        assert ds.field_caches["caption"].info().open
        held = [line for line in mapped_files().splitlines() if str(dataset) in line]   # this dataset's only
        assert any(".caption." in line for line in held)
        for other in ("image", "label", "boxes", "meta"):
            assert not any(f".{other}." in line for line in held)


def shard_files_open(dataset: Path) -> int:
    """The dataset's shard files that descriptors of this process are open on."""
    folder = str(dataset / "shards")
    links = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
             if os.path.exists(f"/proc/self/fd/{fd}")]
    return len({link for link in links if link.startswith(folder)})


def test_every_fields_files_count_against_one_max_open_shards(dataset: Path) -> None:
    """Six columns (image, caption, label, boxes, boxes.shape, meta) of four shards, read across
    the shards with max_open_shards=6: at no time more than 6 files open, every column's together.
    Mutation: giving each column's cache the whole max_open_shards fails this test."""
    with shardkit.open_dataset(dataset, max_open_shards=6, decode=None) as ds:
        assert ds.max_open_shards == 6 and ds.shard_cache.capacity == 6
        most = 0
        for index in [shard * 8 + local for local in range(2) for shard in range(4)]:
            assert ds[index]["caption"] == f"caption {index}".encode()
            infos = ds.shard_cache.info().values()
            most = max(most, sum(len(set(info.open) | set(info.placed)) for info in infos))
            assert shard_files_open(dataset) <= 6
        assert most == 6
    with shardkit.open_dataset(dataset, fields=("caption",), max_open_shards=2) as ds:
        assert [ds[i] for i in (0, 8, 16, 24)] == [(f"caption {n}",) for n in (0, 8, 16, 24)]
        assert len(ds.field_caches["caption"].info().open) == 2
    with pytest.raises(UsageError, match="max_open_shards"):
        shardkit.open_dataset(dataset, max_open_shards=0)


def test_decode_per_field_and_as_stored(dataset: Path) -> None:
    ds = shardkit.open_dataset(dataset, decode={"image": "tensor", "boxes": "tensor"})
    sample = ds[4]
    with Image.open(io.BytesIO(png_bytes(4))) as image:
        want = torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1)
    assert torch.equal(sample["image"], want)
    assert torch.equal(sample["boxes"], torch.full((1, 4), 4.0)) and sample["meta"] == {"n": 4}
    assert (sample["label"], sample["caption"]) == (0, "caption 4")
    stored = shardkit.open_dataset(dataset, decode=None)[4]
    assert stored["image"] == png_bytes(4) and stored["caption"] == b"caption 4" and stored["meta"] == b'{"n":4}'
    assert np.array_equal(stored["label"], [0]) and bytes(stored["boxes"]) == np.full((1, 4), 4, np.float32).tobytes()


def shout(sample: tuple) -> tuple:
    """A transform that pickles (a DataLoader's spawned workers need it to)."""
    label, caption, key = sample
    return caption.upper(), label, key


def test_tuples_keys_transforms_and_batches(dataset: Path) -> None:
    ds = shardkit.open_dataset(dataset, fields=("label", "caption"), return_key=True, transform=shout)
    assert ds[9] == ("CAPTION 9", 1, "9") and ds.key(9) == "9"
    batch = [3, 17, 3, 29, 0, 8, 9, -1]
    assert ds.__getitems__(batch) == [ds[i] for i in batch]
    as_dict = shardkit.open_dataset(dataset, decode="numpy", transform=lambda sample: sorted(sample))
    assert as_dict[0] == sorted(FIELDS)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy[12] == ds[12]


def test_a_damaged_field_value_is_named(dataset: Path) -> None:
    """Each field's files are read with the checks of any shard: a flipped byte in a caption is a
    CorruptSampleError naming the caption's file, when checksums are checked."""
    ds = shardkit.open_dataset(dataset, fields=("caption",))
    path = dataset / ds.manifest.fields.columns["caption"].paths[0]
    data = bytearray(path.read_bytes())
    spots = [spot for spot in range(len(data)) if data.startswith(b"caption 3", spot)]
    assert spots
    for spot in spots:          # every copy: LMDB may keep an old page of it
        data[spot + 8] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSampleError) as caught:
        shardkit.open_dataset(dataset, fields=("caption",), verify_checksums=True)[3]
    assert "caption" in str(caught.value) and "sample 3" in str(caught.value)


def test_loaders_samplers_and_collate(dataset: Path) -> None:
    ds = shardkit.open_dataset(dataset, decode={"image": "tensor"})
    sampler = shardkit.ShardAwareSampler(ds, seed=1)
    loader = DataLoader(ds, batch_size=7, sampler=sampler, num_workers=2, collate_fn=shardkit.collate_fields,
                        worker_init_fn=shardkit.worker_init_fn)
    seen: List[str] = []
    for batch in loader:
        assert batch["image"].shape[1:] == (3, 7, 9) and batch["image"].dtype == torch.uint8
        assert batch["label"].dtype == torch.int64 and isinstance(batch["boxes"], list)
        seen.extend(batch["caption"])
    assert sorted(seen) == sorted(f"caption {n}" for n in range(30))


def test_collate_fields_stacks_lists_and_pads() -> None:
    batch = [{"n": 1, "x": 0.5, "v": np.ones(2, np.float32), "b": np.ones((1, 2), np.float32), "t": "a"},
             {"n": 2, "x": 1.0, "v": np.zeros(2, np.float32), "b": np.ones((3, 2), np.float32), "t": None}]
    out = shardkit.collate_fields(batch)
    assert torch.equal(out["n"], torch.tensor([1, 2])) and out["x"].dtype == torch.float64
    assert out["v"].shape == (2, 2) and isinstance(out["b"], list) and out["t"] == ["a", None]
    padded = shardkit.collate_fields(batch, pad=-1)["b"]
    assert padded.shape == (2, 3, 2) and padded[0, 1:].eq(-1).all() and padded[1].eq(1).all()
    numbers, texts = shardkit.collate_fields([(1, "a"), (2, "b")])
    assert numbers.tolist() == [1, 2] and texts == ["a", "b"]


def test_collate_raw_takes_stored_images_with_labels(dataset: Path) -> None:
    ds = shardkit.open_dataset(dataset, fields=("image", "label"), decode={"image": None})
    batch = DataLoader(ds, batch_size=5, collate_fn=shardkit.collate_raw).__iter__().__next__()
    assert [bytes(batch[i].numpy()) for i in range(5)] == [png_bytes(n) for n in range(5)]
    assert batch.labels.tolist() == [0, 1, 0, 1, 0]


def test_the_stream_reads_every_sample_and_resumes(dataset: Path) -> None:
    def stream() -> Any:
        return shardkit.ShardStream(dataset, fields=("caption",), batch_size=4, shuffle_buffer=5, seed=2)
    whole = [list(batch[0]) for batch in DataLoader(stream(), batch_size=4)]
    assert sorted(sum(whole, [])) == sorted(f"caption {n}" for n in range(30))
    resumed = stream()
    resumed.load_state_dict(stream().state_dict(batches_seen=3))
    assert [list(batch[0]) for batch in DataLoader(resumed, batch_size=4)] == whole[3:]


def test_wrong_fields_and_datasets_are_usage_errors(dataset: Path, dataset_dir: Path) -> None:
    with pytest.raises(UsageError, match="no field 'nope'.*image, caption"):
        shardkit.open_dataset(dataset, fields=("nope",))
    with pytest.raises(UsageError, match="decode names 'image'"):
        shardkit.open_dataset(dataset, fields=("caption",), decode={"image": "pil"})
    with pytest.raises(UsageError, match="sequence of field names"):
        shardkit.open_dataset(dataset, fields="caption")
    with pytest.raises(UsageError, match="open_dataset"):
        shardkit.ShardDataset(dataset)
    with pytest.raises(UsageError, match="fields= applies to datasets of named fields"):
        shardkit.open_dataset(dataset_dir, fields=("image",))


def test_mixed_datasets_of_fields_tag_each_sample_with_its_source(dataset: Path) -> None:
    """MixedDataset takes datasets of fields as it takes any: a dict gains "__source__", a tuple
    its source number last, and each sample is its source's own."""
    captions = shardkit.open_dataset(dataset, fields=("caption", "meta"))
    whole = shardkit.open_dataset(dataset, decode=None)
    mixed = shardkit.MixedDataset([captions, whole], [1, 1], num_samples=12)
    order = list(mixed.sampler)
    for index, sample in zip(order, mixed.__getitems__(order)):
        source, local = mixed.locate(index)
        if source == 0:
            assert sample == (f"caption {local}", {"n": local}, 0)
        else:
            assert sample["__source__"] == 1 and sample["caption"] == f"caption {local}".encode()
    assert {mixed.locate(index)[0] for index in order} == {0, 1}
