"""What verify checks of one shard, from its file to every sample (--deep), as a list of problems.

The file is opened once, as a regular file inside DST (integrity.open_regular): that descriptor is
hashed (full, deep) and given to the format's peek (quick) or reader (full, deep).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

from ..codecs.decode import check_stored
from ..errors import CorruptSampleError, CorruptShardError, SampleError
from ..formats import READ_FAILURES, ShardReader, get_format, recorded_options
from ..integrity import NotAShardFile, WrongSize, hash_open_file, open_regular
from ..manifest import Manifest
from ..sample_table import TableRows, shard_mismatch


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset, located as precisely as possible."""

    kind: str       # manifest | missing | extra | size | count | checksum | structure | identity | table | sample
    message: str
    shard: Optional[str] = None
    index: Optional[int] = None
    key: Optional[str] = None       # the damaged sample's source key, when it can still be read

    def to_dict(self) -> Dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


class ShardCheck:
    """The problems found in one shard of a manifest, each naming its file (and sample, with the
    sample's key once a reader can tell it)."""

    def __init__(self, dst: str, manifest: Manifest, number: int, table: Optional[TableRows] = None) -> None:
        self.dst, self.manifest, self.number = dst, manifest, number
        #: The sample table open for full and deep checks (None: quick, none, or it cannot be opened).
        self.table = table
        self.entry = manifest.shards[number]
        self.path = os.path.join(dst, self.entry.path)
        self.problems: List[Problem] = []
        self.reader: Optional[ShardReader] = None
        self.samples = 0

    def problem(self, kind: str, message: str, index: Optional[int] = None) -> None:
        key = _key_of(self.reader, index) if index is not None else None
        if key is not None:
            message = message.replace(f"sample {index} ", f"sample {index} (key {key!r}) ", 1)
        self.problems.append(Problem(kind, f"{self.path}: {message}", shard=self.entry.path, index=index, key=key))

    def run(self, mode: str) -> Tuple[List[Problem], int]:
        """Check the shard (mode: quick, full or deep); (problems, samples checked one by one)."""
        entry = self.entry
        try:
            fd: Optional[int] = open_regular(self.path, self.dst, entry.size)
        except WrongSize as exc:
            self.problem("size", f"{exc.size} bytes, manifest says {entry.size} (truncated, extended or replaced)")
            fd = None       # not hashed; its structure is still looked at, by path
        except NotAShardFile as exc:
            self.problem("structure", f"{exc.problem}; shards are read only as regular files inside DST")
            return self.problems, 0
        except OSError:
            self.problem("missing", "shard is missing")
            return self.problems, 0
        try:
            if mode in ("full", "deep") and fd is not None:
                self.hash(fd)
            self.structure(mode, fd)
        finally:
            if fd is not None:
                os.close(fd)
            if self.reader is not None:
                self.reader.close()
        return self.problems, self.samples

    def hash(self, fd: int) -> None:
        try:
            if hash_open_file(fd, self.path, self.entry.size) != self.entry.sha256:
                self.problem("checksum", "sha256 does not match the manifest (the file's bytes changed)")
        except (OSError, ValueError) as exc:
            self.problem("checksum", f"cannot be hashed ({exc})")

    def structure(self, mode: str, fd: Optional[int]) -> None:
        """Count and identity (quick: as the shard records them, cheaply; else through a reader with
        its structural checks), then with deep the format library's own view and every sample."""
        manifest = self.manifest
        fmt = get_format(manifest.format_name)
        options = recorded_options(fmt, manifest, self.dst)
        try:
            if mode == "quick":
                count, dataset_id = fmt.peek(self.path, manifest.schema, options, fd)
            else:
                self.reader = fmt.open_reader(self.path, manifest.schema, options, fd)
                count, dataset_id = len(self.reader), self.reader.dataset_id
        except CorruptShardError as exc:
            self.problem("structure", exc.after_file())
            return
        except READ_FAILURES as exc:       # a library error the format's own checks did not catch
            self.problem("structure", f"cannot be opened ({type(exc).__name__}: {exc})")
            return
        try:
            manifest.check_identity(dataset_id, self.path, self.number)
        except CorruptShardError as exc:
            self.problem("identity", exc.after_file())
            return
        if count != self.entry.num_samples:
            self.problem("count", f"holds {count} samples, manifest says {self.entry.num_samples}")
        elif self.reader is not None and manifest.sample_table is not None:
            self.against_sample_table(self.reader)
        if self.reader is not None and mode == "deep":
            try:
                mismatch = fmt.cross_check(self.path, manifest.schema, options, fd)
            except CorruptShardError as exc:
                mismatch = exc.after_file()
            if mismatch:
                self.problem("structure", mismatch)
            self.every_sample(self.reader)

    def against_sample_table(self, reader: ShardReader) -> None:
        """The shard's own labels and CRC32s against the dataset's sample table (full, deep)."""
        if self.table is None:
            return      # the table file itself is reported once, by verify
        labels, crcs = self.table.read(self.entry.first_index, self.entry.num_samples)
        problem = shard_mismatch(reader.tables(), labels, crcs, 0)
        if problem:
            self.problem("table", f"{problem} ({self.table.name})")

    def every_sample(self, reader: ShardReader) -> None:
        """--deep: each sample's record, CRC32, label range and that it decodes."""
        manifest = self.manifest
        classes = len(manifest.classes) if manifest.schema.labeled else 0
        for index in range(len(reader)):
            self.samples += 1
            try:
                encoded = reader.read(index)
            except CorruptSampleError as exc:
                self.problem("sample", f"sample {exc.index}: {exc.problem}", exc.index)
                continue
            except READ_FAILURES as exc:
                self.problem("sample", f"sample {index} cannot be read ({exc})", index)
                continue
            if not encoded.crc_ok():
                self.problem("sample", f"sample {index} fails its CRC32 check", index)
                continue
            if classes and not 0 <= encoded.label < classes:
                self.problem("sample", f"sample {index} has label {encoded.label}, outside the {classes} classes",
                             index)
            try:
                check_stored(manifest.schema, encoded, manifest.source)
            except SampleError as exc:
                self.problem("sample", f"sample {index} does not decode ({exc})", index)


def check_shard(dst: str, manifest: Manifest, number: int, mode: str,
                table: Optional[TableRows] = None) -> Tuple[List[Problem], int]:
    """Problems found in shard `number`, and how many samples were checked one by one (table: the
    sample table held open for many shards by open_table_rows, else opened for this one)."""
    if table is not None:
        return ShardCheck(dst, manifest, number, table).run(mode)
    table = open_table_rows(dst, manifest, mode)
    try:
        return ShardCheck(dst, manifest, number, table).run(mode)
    finally:
        if table is not None:
            table.close()


def open_table_rows(dst: str, manifest: Manifest, mode: str) -> Optional[TableRows]:
    """The sample table open for a batch of full or deep checks; None where they read none (quick,
    no table) or it cannot be opened (verify reports the table itself, once)."""
    if mode == "quick" or manifest.sample_table is None:
        return None
    try:
        return TableRows(dst, manifest.sample_table)
    except CorruptShardError:
        return None


def _key_of(reader: Any, index: int) -> Optional[str]:
    """The source key of a sample for a problem report (None when the key table cannot say)."""
    try:
        return None if reader is None else reader.key(index)
    except READ_FAILURES:
        return None
