"""A sample's record, as the writer of fields makes it and a shard hands it to the column writers.

A record is one flat list per sample, not an Encoded per column (those are made only where a
format asks for one): each column's payload in column order, then their CRC32s, then the sample's
key, the columns of its absent optional fields (None when every field is present) and its
estimated bytes in the shard. A shard hands a run of records to each column writer as one
EncodedRows: the column's payloads, presence labels, CRC32s and the run's keys.
"""
from __future__ import annotations

import zlib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..codecs.fields import ABSENT, PRESENT, FieldEncoder
from ..errors import SampleError
from ..formats import ShardFormat
from ..records import Encoded, EncodedRows, Payload, payload_nbytes
from ..schema import SampleSchema

Record = List[Any]
#: Per column, known stored sizes -> the format's estimate; cleared past this many sizes.
MAX_KNOWN_SIZES = 4096


class SampleSizes:
    """What a sample adds to a shard's files, by the format's estimate for each column of its
    stored size (payload and key), remembered per column and size: the format is asked once
    per size, not per sample."""

    def __init__(self, fmt: ShardFormat, schemas: Dict[str, SampleSchema]) -> None:
        self._fmt = fmt
        self._schemas = list(schemas.values())
        self._known: List[Dict[int, int]] = [{} for _ in self._schemas]
        self._lookups = [known.get for known in self._known]

    def __call__(self, payloads: Sequence[Payload], key: Optional[str]) -> int:
        extra = len(key or "")
        total = 0
        for lookup, payload in zip(self._lookups, payloads):      # bytes, or an array (make_record)
            size = lookup((len(payload) if type(payload) is bytes else payload.nbytes) + extra)  # type: ignore
            if size is None:
                return self._learn(payloads, extra)
            total += size
        return total

    def _learn(self, payloads: Sequence[Payload], extra: int) -> int:
        """The estimate of a sample with a stored size not seen before in its column: the format
        is asked for each such size, and its answer remembered."""
        total = 0
        for schema, known, payload in zip(self._schemas, self._known, payloads):
            stored = payload_nbytes(payload) + extra
            if stored not in known:
                if len(known) > MAX_KNOWN_SIZES:
                    known.clear()
                known[stored] = int(self._fmt.sample_bytes(schema, np.array([stored]))[0])
            total += known[stored]
        return total


def make_record(payloads: Record, key: Optional[str], absent: Optional[Tuple[int, ...]], nbytes: int) -> Record:
    """A sample's record from its columns' payloads (bytes or C-contiguous arrays, whose buffer
    is the stored bytes, so zlib reads them as they are stored); the list `payloads` becomes it."""
    payloads += list(map(zlib.crc32, payloads))
    payloads += (key, absent, nbytes)
    return payloads


def encode_record(encoders: Dict[str, FieldEncoder], sample: Mapping[str, Any], key: str,
                  sizes: Optional[SampleSizes]) -> Record:
    """A sample's record, its values encoded by their fields' encoders (the schema's, in order);
    SampleError naming the key and the field."""
    if not encoders.keys() >= sample.keys():
        unknown = next(name for name in sample if name not in encoders)
        raise SampleError(f"field {unknown!r} is not in the schema ({', '.join(encoders)})", path=f"sample {key!r}")
    payloads: Record = []
    absent: Optional[Tuple[int, ...]] = None
    for name, encoder in encoders.items():
        value = sample.get(name)
        try:
            if value is None:
                if not encoder.optional:
                    raise SampleError("is missing (a required field)" if name not in sample else "is None "
                                      "(a required field)")
                absent = (absent or ()) + tuple(range(len(payloads), len(payloads) + len(encoder.absent())))
                payloads += encoder.absent()
            else:
                payloads += encoder.encode(value)
        except SampleError as exc:
            raise SampleError(f"field {name!r} ({encoder.spec.type}) {exc.problem}", path=f"sample {key!r}") from None
    return make_record(payloads, key, absent, sizes(payloads, key) if sizes is not None else 0)


def stored_record(values: Sequence[Encoded], sizes: Optional[SampleSizes]) -> Record:
    """The record of a sample copied from another dataset: each column's stored value (payload,
    presence, CRC32 as read and checked there) and the key they share."""
    payloads: Record = [value.payload for value in values]
    key = values[0].key if values else None
    absent = tuple(column for column, value in enumerate(values) if value.label == ABSENT) or None
    nbytes = sizes(payloads, key) if sizes is not None else 0
    return payloads + [value.crc32 for value in values] + [key, absent, nbytes]


def record_nbytes(record: Record) -> int:
    """A record's estimated bytes in the shard."""
    return int(record[-1])


def column_runs(records: List[Record], schemas: Sequence[SampleSchema]) -> List[Sequence[Encoded]]:
    """Each column's run of the records, for append_many (stored as append() of each value would
    store them): the runs share the keys; labels are presence."""
    width = len(schemas)
    keys = [record[-3] for record in records]
    flagged = [(row, record[-2]) for row, record in enumerate(records) if record[-2]]
    runs = []
    for column, schema in enumerate(schemas):
        labels = np.full(len(records), PRESENT, dtype=np.int64)
        for row, absent in flagged:
            if column in absent:
                labels[row] = ABSENT
        runs.append(column_run([record[column] for record in records], labels,
                               [record[width + column] for record in records], keys, schema))
    return runs


def column_run(payloads: List[Payload], labels: np.ndarray, crcs: List[int], keys: List[Optional[str]],
               schema: SampleSchema) -> Sequence[Encoded]:
    """One column's values of consecutive samples: a block of rows for a fixed-shape array column,
    a list of byte strings otherwise; an Encoded per value when their arrays do not stack into rows."""
    if not schema.is_array:
        return EncodedRows(payloads, labels, crcs, keys)
    try:
        rows = np.stack(payloads)
    except (ValueError, TypeError):     # append() of each names what does not fit
        return [Encoded(*value) for value in zip(payloads, labels.tolist(), crcs, keys)]
    return EncodedRows(rows, labels, crcs, keys)
