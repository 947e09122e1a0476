"""Writer and write(): samples of named fields from Python -> a dataset of field shards, with the
guarantees of convert (docs/fields.md, "The writer").

Each sample is checked against the schema (given, or inferred from the first sample) and encoded
as it is written; it waits in the shuffle buffer (writing/shuffle.py), then goes to the open shard,
one file per column (writing/field_shard.py). A full shard's files are committed in background
threads (commit.py: fsync, rename, sha256, a done record each), then the shard's own done record;
close() writes the sample tables and, last, the manifest. A crash leaves the sealed shards, which
Writer(..., resume=True) keeps, telling how many leading inputs to skip (`resumed_samples`).
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ..codecs.fields import FieldEncoder, infer_field
from ..errors import SampleError, UsageError
from ..formats import get_format
from ..manifest import Manifest
from ..records import Encoded
from ..schema import FieldSpec, SampleSchema
from ..units import parse_part, parse_size
from .commit import CommitPipeline
from .field_records import Record, SampleSizes, encode_record, record_nbytes, stored_record
from .field_shard import RECORD_SUFFIX, FieldShard, kept_record, shard_record, shard_stem
from .journal import claim_destination, remove_stale_temps
from .shuffle import ShuffleBuffer
from .sink import ShardResult
from .writer_plan import WriterPlan, fields_of
from .writer_finish import Finished, finish_dataset

#: Samples the shuffle buffer holds by default (docs/fields.md, "Order").
DEFAULT_SHUFFLE_BUFFER = 1000
DEFAULT_SHARD_SIZE = "256MB"
#: What a skipped input leaves in the shuffle buffer: it keeps its position, and writes nothing.
HOLE = object()


class Writer:
    """`with shardkit.Writer(DST, fields=...) as writer: writer.write({...})`: a dataset of named
    fields at DST, written when the block ends (close()). See docs/fields.md for every option."""

    def __init__(self, dst: "str | os.PathLike[str]", fields: Any = None, *, format: str = "hdf5",
                 samples_per_shard: Optional[int] = None, shard_size: "str | int | None" = None,
                 order: str = "shuffled", seed: int = 0, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
                 part: "Tuple[int, int] | str | None" = None, key_field: Optional[str] = None,
                 resume: bool = False, overwrite: bool = False, source: Optional[Dict[str, Any]] = None,
                 recorded_order: Optional[Dict[str, Any]] = None, onto: Optional[Manifest] = None) -> None:
        self.dst = os.fspath(dst)
        self._started = time.monotonic()
        self.plan = WriterPlan(format=get_format(format).name, samples_per_shard=_positive(samples_per_shard),
                               max_bytes=_shard_bytes(shard_size, samples_per_shard), order=_order(order),
                               seed=_seed(seed), shuffle_buffer=_buffer(shuffle_buffer, order),
                               part=_part(part), key_field=key_field)
        self._fmt = get_format(self.plan.format)
        #: what the manifest records of where the samples came from, and (a caller that ordered them
        #: itself: convert's seeded permutation of a tree's items) of their order
        self._source = dict(source or {"kind": "python"})
        self._recorded_order = recorded_order
        #: the dataset these shards continue (an append, a repair): numbered after its shards, with its identity
        self._first, self._identity = (len(onto.shards), onto.dataset_id) if onto is not None else (0, None)
        self._journal = claim_destination(self.dst, overwrite=overwrite, resume=resume)
        try:
            self._start(fields_of(fields), resume)
        except BaseException:
            self._journal.unlock()
            raise

    def _start(self, fields: Optional[Tuple[FieldSpec, ...]], resume: bool) -> None:
        self._schema: Optional[SampleSchema] = None
        self._encoders: Dict[str, FieldEncoder] = {}
        self._shard: Optional[FieldShard] = None
        self._kept: List[Dict[str, Any]] = []
        self._committing: Dict[str, Dict[str, Any]] = {}      # stem -> shard awaiting its columns' commits
        self._records: List[Dict[str, Any]] = []              # done records of the shards written now
        self._skipped: List[Dict[str, Any]] = []              # skipped since the last sealed shard
        self._scan_skips: List[Dict[str, Any]] = []           # found before any input (noted again on resume)
        self._kept_skips: List[Dict[str, Any]] = []
        self._emitted = 0                                     # inputs out of the buffer (samples and skips)
        self._end: Optional[int] = None
        self._pipeline = CommitPipeline()
        self.report: Any = None
        previous = self._journal.read_plan() if resume else None
        if previous is not None:
            fields = self.plan.check_resume(previous, fields, self.dst)
            self.created = str(previous["created"])
        else:
            self._journal.clear_done()
            self.created = ""
        self.buffer, self.resumed_samples = ShuffleBuffer(self.plan.shuffle_buffer, self.plan.seed), 0
        if fields is not None:
            self._set_schema(SampleSchema.of_fields(fields))
        if previous is not None and self._schema is not None:
            self._resume()
        remove_stale_temps(self.dst)

    # ---- the schema ---------------------------------------------------------------------
    def _set_schema(self, schema: SampleSchema) -> None:
        """Fix the schema (given, inferred or recorded), then record the plan for --resume."""
        self._schema = schema
        self._encoders = {spec.name: FieldEncoder(spec) for spec in schema.fields}
        for encoder in self._encoders.values():
            self._fmt.check(encoder.schema)
        if self.plan.key_field is not None and self.plan.key_field not in self._encoders:
            raise UsageError(f"key_field {self.plan.key_field!r} is not one of the fields")
        self._columns = self.plan.column_schemas(schema)
        self._sizes = SampleSizes(self._fmt, self._columns) if self.plan.max_bytes is not None else None
        if not self.created:
            self.created = self.plan.record(self._journal, schema)

    @property
    def schema(self) -> Optional[SampleSchema]:
        """The samples' schema (None before the first sample when it is inferred)."""
        return self._schema

    def _resume(self) -> None:
        """Keep the shards sealed before the crash (the longest run of shards from the first whose
        files are all intact) and put the shuffle buffer back where it stood after them."""
        assert self._schema is not None
        columns = list(self._columns)
        number = self._first
        while True:
            stem = shard_stem(number, self.plan.part_index)
            record = kept_record(self.dst, self._journal, number, stem, columns, self._fmt.extension)
            if record is None:
                break
            self._kept.append(record)
            number += 1
        self._journal.clear_done()
        for record in self._kept:
            self._journal.write_done(record["stem"] + RECORD_SUFFIX, record)
        last: Dict[str, Any] = self._kept[-1] if self._kept else {"emitted": 0, "end": None}
        self.buffer, self.resumed_samples = ShuffleBuffer.resumed(self.plan.shuffle_buffer, self.plan.seed,
                                                                  last["emitted"], last["end"])
        self._emitted, self._end = last["emitted"], last["end"]
        self._kept_skips = [item for record in self._kept for item in record["skipped"]
                            if item["position"] < self.resumed_samples]

    # ---- writing ------------------------------------------------------------------------
    def write(self, sample: Mapping[str, Any], key: Optional[str] = None) -> None:
        """Add one sample: a dict of field name -> value (an optional field may be missing or
        None). key: the sample's key (default: key_field's value, else its position in the input)."""
        position = self.buffer.arrivals
        if type(sample) is not dict and not isinstance(sample, Mapping):
            raise SampleError(f"a sample is a dict of fields, not {type(sample).__name__}",
                              path=f"sample {position}")
        if key is None:
            key = self._key_of(sample, position)
        if self._schema is None:
            self._set_schema(SampleSchema.of_fields([_inferred(name, value, key) for name, value in sample.items()]))
        if self._committing:        # a shard committed by now gets its done record now, not at the next seal
            self._collect(self._pipeline.poll())
        leaving = self.buffer.push(self._encode(sample, key))
        if leaving is not None:
            self._emit(leaving)

    def copy(self, record: Mapping[str, Encoded]) -> None:
        """Add one sample as another dataset of the same schema stores it: its value of every column
        (payload, presence, CRC32, key), checked when read, written as it is (a re-shard's copy)."""
        columns = list(self._columns) if self._schema is not None else []
        if not columns or list(record) != columns:
            raise UsageError("a copied sample needs a value of every column of the writer's schema (given when "
                             f"the writer is made), in order: {', '.join(columns) or 'none given'}")
        if self._committing:
            self._collect(self._pipeline.poll())
        self._push(stored_record(list(record.values()), self._sizes))

    def skip(self, path: str, reason: str, at_scan: bool = False) -> None:
        """Note an input that could not become a sample (listed in skipped.jsonl): it keeps its
        position in the input, so a resumed run skips it with the others. at_scan: a file the scan
        left out, which has no position (a resumed run notes it again)."""
        if at_scan:
            self._scan_skips.append({"path": path, "reason": reason})
            return
        self._skipped.append({"path": path, "reason": reason, "position": self.buffer.arrivals})
        self._push(HOLE)

    @property
    def skipped(self) -> int:
        """Inputs skipped so far (those of the kept shards too)."""
        return len(self._scan_skips) + len(self._kept_skips) + len(self._skipped) + sum(
            len(record["skipped"]) for record in self._records) + sum(
            len(waiting["skipped"]) for waiting in self._committing.values())

    def _key_of(self, sample: Mapping[str, Any], position: int) -> str:
        if self.plan.key_field is not None and sample.get(self.plan.key_field) is not None:
            return str(sample[self.plan.key_field])
        return str(position) if self.plan.part is None else f"{self.plan.part[0]}/{position}"

    def _encode(self, sample: Mapping[str, Any], key: str) -> Record:
        """The sample's record (field_records.py); SampleError naming the key and the field."""
        return encode_record(self._encoders, sample, key, self._sizes)

    def _push(self, item: Any) -> None:
        leaving = self.buffer.push(item)
        if leaving is not None:
            self._emit(leaving)

    def _emit(self, record: Any) -> None:
        """A sample (or a skipped input's hole) leaves the buffer: into the open shard, sealed when full."""
        if record is HOLE:
            self._emitted += 1
            return
        shard = self._shard or self._open_shard()
        if shard.count and self.plan.max_bytes is not None and \
                shard.nbytes + record_nbytes(record) > self.plan.max_bytes:
            self._seal()
            shard = self._open_shard()
        shard.add(record)
        self._emitted += 1
        if self.plan.samples_per_shard is not None and shard.count >= self.plan.samples_per_shard:
            self._seal()

    @property
    def sealed(self) -> int:
        """The number after the last shard sealed (kept, committed or being committed)."""
        return self._first + len(self._kept) + len(self._records) + len(self._committing)

    def _open_shard(self) -> FieldShard:
        if self._shard is None:
            self._shard = FieldShard(self.dst, self._fmt, self._columns, self.sealed,
                                     shard_stem(self.sealed, self.plan.part_index), self._dataset_id(),
                                     self._fmt.writer_options())
        return self._shard

    def _dataset_id(self) -> str:
        return self._identity or self.plan.dataset_id(self._schema)

    def _seal(self) -> None:
        """Close the open shard's files and hand them to the commit threads."""
        shard, self._shard = self._shard, None
        if shard is None or not shard.count:
            if shard is not None:
                shard.abort()
            return
        written = shard.close()
        self._committing[shard.stem] = {"number": shard.number, "emitted": self._emitted, "end": self._end,
                                        "skipped": self._skipped, "results": {},
                                        "columns": {item.result.path: column for column, item in written.items()}}
        self._skipped = []
        for item in written.values():
            self._collect(self._pipeline.submit(item))

    def _collect(self, results: List[ShardResult]) -> None:
        """Note committed files; a shard all of whose files are committed gets its done record."""
        for result in results:
            stem = result.path.rsplit("/", 1)[-1].split(".", 1)[0]
            waiting = self._committing[stem]
            waiting["results"][waiting["columns"][result.path]] = result
            if len(waiting["results"]) == len(self._columns):
                del self._committing[stem]
                ordered = {column: waiting["results"][column] for column in self._columns}
                record = shard_record(waiting["number"], stem, ordered, waiting["emitted"], waiting["end"],
                                      waiting["skipped"])
                self._journal.write_done(stem + RECORD_SUFFIX, record)
                self._records.append(record)

    # ---- the end ------------------------------------------------------------------------
    def close(self) -> Any:
        """Write what is left, the sample tables and, last, the manifest; the ConvertReport."""
        if self.report is not None:
            return self.report
        try:
            if self._schema is None:
                raise UsageError("no sample was written; a dataset needs at least one", path=self.dst)
            self._end = self.buffer.arrivals
            for record in self.buffer.drain():
                self._emit(record)
            self._seal()
            self._collect(self._pipeline.finish())
            records = sorted(self._kept + self._records, key=lambda record: record["shard"])
            skipped = self._scan_skips + self._kept_skips + [item for record in self._records
                                                             for item in record["skipped"]]
            self.report = finish_dataset(Finished(self.dst, self._fmt, self._schema, self.plan, records,
                                                  skipped, self.created, self._source, len(self._kept),
                                                  self._started, self._recorded_order, self._dataset_id()))
            self._journal.remove()
        finally:
            self._pipeline.__exit__(None, None, None)
            self._journal.unlock()
        return self.report

    def abort(self) -> None:
        """Stop without a manifest: the sealed shards stay for resume=True, the rest is removed."""
        try:
            if self._shard is not None:
                self._shard.abort()
                self._shard = None
            try:
                self._collect(self._pipeline.finish())
            except Exception:  # noqa: BLE001 - the first error is the one the caller sees
                pass
            self._pipeline.__exit__(None, None, None)
            remove_stale_temps(self.dst)
        finally:
            self._journal.unlock()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write(samples: Iterable[Mapping[str, Any]], dst: "str | os.PathLike[str]", fields: Any = None,
          **options: Any) -> Any:
    """Write an iterable of samples (dicts of named fields) as a dataset at DST: Writer's options;
    with resume=True the inputs the kept shards account for are skipped. The ConvertReport."""
    import itertools
    with Writer(dst, fields, **options) as writer:
        for sample in itertools.islice(samples, writer.resumed_samples, None):
            writer.write(sample)
    return writer.report


def _inferred(name: str, value: Any, key: str) -> FieldSpec:
    try:
        return infer_field(name, value)
    except (SampleError, UsageError) as exc:
        raise SampleError(f"field {name!r}: {exc.problem}", path=f"sample {key!r} (the first, whose fields make "
                          "the schema)") from None


def _positive(value: Optional[int]) -> Optional[int]:
    if value is not None and (type(value) is not int or value < 1):
        raise UsageError(f"samples_per_shard must be a whole number of at least 1, not {value!r}")
    return value


def _shard_bytes(shard_size: "str | int | None", samples_per_shard: Optional[int]) -> Optional[int]:
    if shard_size is None and samples_per_shard is not None:
        return None
    return parse_size(DEFAULT_SHARD_SIZE if shard_size is None else shard_size)


def _order(order: str) -> str:
    if order not in ("shuffled", "source"):
        raise UsageError(f"order must be shuffled or source, not {order!r}")
    return order


def _seed(seed: int) -> int:
    if type(seed) is not int or not 0 <= seed < 2 ** 63:
        raise UsageError(f"seed must be a whole number from 0 to 2**63-1, not {seed!r}")
    return seed


def _buffer(size: int, order: str) -> int:
    if type(size) is not int or size < 1:
        raise UsageError(f"shuffle_buffer must be a whole number of at least 1, not {size!r}")
    return size if order == "shuffled" else 0


def _part(part: "Tuple[int, int] | str | None") -> Optional[Tuple[int, int]]:
    if part is None:
        return None
    index, count = parse_part(part) if isinstance(part, str) else tuple(part)
    if not (type(index) is int and type(count) is int and 0 <= index < count):
        raise UsageError(f"part must be (I, N) with 0 <= I < N, not {part!r}")
    return index, count
