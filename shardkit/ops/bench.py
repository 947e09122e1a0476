"""bench(): how fast a dataset loads on this machine, per DataLoader worker count, and which to use.

Each setting reads the dataset through a DataLoader with a ShardAwareSampler (epoch after
epoch, without restarting workers) and is timed from its first batch for `seconds`. The
time to that first batch (worker start, shard opening) is reported apart.
"""
from __future__ import annotations

import dataclasses
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from ..errors import CorruptShardError, UsageError

#: Side of the square images are resized to with decode on, so that a batch stacks.
DECODE_SIDE = 224
#: A setting within this fraction of the best rate counts as good as the best.
GOOD_ENOUGH = 0.05


@dataclass
class BenchResult:
    """One DataLoader setting as measured."""

    num_workers: int
    samples: int
    batches: int
    seconds: float
    samples_per_s: float
    mb_per_s: float
    first_batch_s: float

    def to_dict(self) -> Dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("seconds", "samples_per_s", "mb_per_s", "first_batch_s"):
            data[key] = round(data[key], 3)
        return data


@dataclass
class BenchReport:
    """Every setting's numbers and the recommended one; to_dict() is the CLI's --json."""

    dst: str
    format: str
    num_samples: int
    bytes_per_sample: float
    decode: bool
    collate: str
    reads: str
    batch_size: int
    seconds: float
    cpus: int
    results: List[BenchResult] = field(default_factory=list)
    recommended_num_workers: Optional[int] = None
    recommendation: str = ""

    def to_dict(self) -> Dict[str, Any]:
        data = dataclasses.asdict(self)
        data["bytes_per_sample"] = round(self.bytes_per_sample, 1)
        data["results"] = [result.to_dict() for result in self.results]
        return data


def parse_worker_counts(text: str) -> List[int]:
    """"0,1,2,4" -> [0, 1, 2, 4]; UsageError for anything else."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or any(count < 0 for count in counts):
        raise UsageError(f"invalid --num-workers {text!r}: give counts of 0 or more separated by commas, e.g. 0,1,2,4")
    return counts


def bench(dst: "str | os.PathLike[str]", num_workers: Sequence[int] = (0, 1, 2, 4), batch_size: int = 256,
          decode: bool = False, seconds: float = 5.0, quiet: bool = True,
          on_result: Optional[Callable[[BenchResult], None]] = None) -> BenchReport:
    """Measure samples/s and MB/s of DST for each worker count and recommend one.

    decode=False reads the stored payloads (decode=None) and batches them with shardkit.collate_raw
    (one buffer per batch: a worker hands over a handle, not 256 pickled byte strings).
    decode=True decodes each image with Pillow, resizes it to DECODE_SIDE x DECODE_SIDE and
    makes a CHW uint8 tensor, so batches stack as in training; fixed-shape samples (raw mode,
    CSV) become tensors as they are. Shards are checked (quick verify) before anything is timed.
    """
    counts = [int(count) for count in num_workers]
    if not counts or any(count < 0 for count in counts):
        raise UsageError(f"num_workers must be counts of 0 or more, not {list(num_workers)!r}")
    if batch_size < 1:
        raise UsageError(f"batch size must be at least 1, not {batch_size}")
    if not seconds > 0:
        raise UsageError(f"seconds must be positive, not {seconds}")
    dst = os.fspath(dst)
    dataset, stacked, reads = _open(dst, decode)
    report = BenchReport(dst=dst, format=dataset.manifest.format_name, num_samples=len(dataset),
                         bytes_per_sample=dataset.manifest.total_bytes / max(1, len(dataset)), decode=decode,
                         collate="stack" if stacked else "raw", reads=reads, batch_size=batch_size, seconds=seconds,
                         cpus=_cpus())
    for count in counts:
        result = _measure(dataset, count, batch_size, stacked, seconds, report.bytes_per_sample, quiet)
        report.results.append(result)
        if on_result is not None:
            on_result(result)
    report.recommended_num_workers, report.recommendation = _recommend(report, _stored_note(dataset.manifest.schema))
    return report


def _stored_note(schema: Any) -> str:
    """What the stored-bytes numbers mean for training: encoded images still need decoding in the
    loader; fixed-shape samples (table rows, raw images) are read as they are used."""
    if schema.kind == "image" and not schema.is_array:
        return "for stored bytes only: decoding in the loader needs more workers, measure it with --decode"
    what = "table rows" if schema.kind == "tabular" else "raw images"
    return (f"{what} are stored as fixed-shape arrays and read without decoding: training reads at about "
            "this rate, plus what your transform costs")


def _open(dst: str, decode: bool) -> "tuple[Any, bool, str]":
    """The dataset to time, whether its batches stack into tensors (else lists), and what a sample is."""
    from ..read.dataset import open_dataset
    from ..manifest import load_manifest
    from .verification import verify
    manifest = load_manifest(dst)
    schema = manifest.schema
    # Shards missing, resized or miscounted would fail mid-run inside a worker; stray files would not.
    problems = [problem for problem in verify(dst, mode="quick").problems if problem.kind != "extra"]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CorruptShardError(f"{problems[0].message}{more}; see shardkit verify {dst}")
    if not manifest.num_samples:
        raise UsageError("holds no samples to read", path=dst)
    if not decode:
        if schema.is_array:
            return open_dataset(dst, decode=None), True, "stored arrays, stacked"
        return open_dataset(dst, decode=None), False, "stored bytes, one RawBatch per batch"
    if schema.kind == "image" and not schema.is_array:
        return (open_dataset(dst, decode="pil", transform=ResizeToTensor(DECODE_SIDE)), True,
                f"decoded to 3x{DECODE_SIDE}x{DECODE_SIDE} uint8 tensors, stacked")
    return open_dataset(dst, decode="tensor"), True, "decoded to tensors, stacked"


class ResizeToTensor:
    """PIL image -> side x side bilinear resize -> CHW uint8 tensor (picklable for spawn)."""

    def __init__(self, side: int) -> None:
        self.side = side

    def __call__(self, image: Any) -> Any:
        import numpy as np
        import torch
        from PIL import Image
        small = image.resize((self.side, self.side), Image.Resampling.BILINEAR)
        return torch.from_numpy(np.asarray(small).copy()).permute(2, 0, 1)


class _Epochs:
    """A sampler that runs epoch after epoch of ShardAwareSampler (so workers never restart)."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[int]:
        epoch = 0
        while True:
            self.sampler.set_epoch(epoch)
            yield from self.sampler
            epoch += 1


def _measure(dataset: Any, workers: int, batch_size: int, stacked: bool, seconds: float,
             bytes_per_sample: float, quiet: bool) -> BenchResult:
    import torch.utils.data

    from ..read.batches import collate_raw
    from ..read.cache import worker_init_fn
    from ..runtime.progress import Progress
    from ..read.sampler import ShardAwareSampler
    sampler = _Epochs(ShardAwareSampler(dataset, shuffle=True, seed=0, num_replicas=1, rank=0))
    labeled_stack = stacked and dataset.schema.labeled     # default collate gives [samples, labels]
    samples = batches = 0
    started = time.perf_counter()
    first = last = 0.0
    unknown_total: Any = None       # the run lasts `seconds`, however many samples that is
    with Progress(unknown_total, f"bench num_workers={workers}", quiet=quiet) as bar, warnings.catch_warnings():
        # torch warns when workers outnumber CPUs (the report says so itself) and when it wraps
        # a read-only array (a zero-copy sample) in a tensor; workers inherit these filters.
        warnings.filterwarnings("ignore", message=".*worker processes in total.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*NumPy array is not writable.*", category=UserWarning)
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                                             collate_fn=None if stacked else collate_raw,
                                             worker_init_fn=worker_init_fn if workers else None)
        iterator = iter(loader)
        try:
            for batch in iterator:
                last = time.perf_counter()
                if not first:
                    first = last                # the clock starts once the first batch is in
                    continue
                count = len(batch[0]) if labeled_stack else len(batch)
                samples += count
                batches += 1
                bar.advance(count, int(count * bytes_per_sample))
                if last - first >= seconds and batches >= 2:
                    break
        finally:
            del iterator                        # shuts its worker processes down now
    elapsed = max(last - first, 1e-9)
    rate = samples / elapsed
    return BenchResult(num_workers=workers, samples=samples, batches=batches, seconds=elapsed, samples_per_s=rate,
                       mb_per_s=rate * bytes_per_sample / 1e6, first_batch_s=first - started)


def _recommend(report: BenchReport, stored_note: str = "") -> "tuple[Optional[int], str]":
    """The fewest workers within GOOD_ENOUGH of the best rate, as a DataLoader line (with
    stored_note when the stored samples were read, not decoded)."""
    if not report.results:
        return None, ""
    best = max(result.samples_per_s for result in report.results)
    choice = min((r for r in report.results if r.samples_per_s >= best * (1 - GOOD_ENOUGH)),
                 key=lambda r: r.num_workers)
    workers = choice.num_workers
    options = f"batch_size={report.batch_size}, num_workers={workers}"
    if report.collate == "raw":
        options += ", collate_fn=shardkit.collate_raw"
    if workers:
        options += ", persistent_workers=True, worker_init_fn=shardkit.worker_init_fn"
    text = (f"DataLoader(ds, {options}, sampler=shardkit.ShardAwareSampler(ds)) "
            f"at {choice.samples_per_s:,.0f} samples/s, {choice.mb_per_s:,.1f} MB/s, batched "
            "(the DataLoader reads each batch with ds.__getitems__, one pass per shard: keep batch_size)")
    if choice.samples_per_s < best:
        text += f" (more workers gained under {GOOD_ENOUGH:.0%})"
    if workers > report.cpus:
        text += f"; note: more workers than the {report.cpus} CPUs here"
    if not report.decode and stored_note:
        text += f"; {stored_note}"
    return workers, text


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # not on Linux
        return os.cpu_count() or 1


__all__ = ["BenchReport", "BenchResult", "bench", "parse_worker_counts"]
