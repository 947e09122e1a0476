"""One shard of a dataset of named fields: one file per column, each written by the format's own
writer on a temporary name and committed by the sink as any shard is (fsync, rename, sha256, its
done record); the shard's own done record, listing every file, comes once all are committed."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..formats import ShardFormat, ShardWriter
from ..formats.base import FormatOptions
from ..integrity import hash_shard_file, temp_path
from ..manifest import SHARDS_DIR
from ..runtime.fault_points import kill_point
from ..schema import SampleSchema
from .field_records import Record, column_runs, record_nbytes
from .journal import Journal
from .plan import ShardTask
from .sink import ShardResult, WrittenShard, write_failure

#: The done record of a whole shard of fields: DST/.shardkit/done/<stem>.fields.json, and its keys.
RECORD_SUFFIX = ".fields"
RECORD_KEYS = {"shard", "stem", "num_samples", "files", "emitted", "end", "skipped"}
#: Samples a shard holds before handing them to its column writers, a run per column: a format
#: packs a run in one loop (keys, labels and CRC32s at once), not a call per sample and column.
COLUMN_RUN = 512


@dataclass(frozen=True)
class ColumnTask(ShardTask):
    """The file of one column of a shard: its done record is named after both."""

    column: str = ""
    stem: str = ""

    @property
    def name(self) -> str:
        return f"{self.stem}.{self.column}"


def shard_stem(number: int, part: Optional[int]) -> str:
    """shard-00000, or for part 3 of a dataset written in parts, part-00003-shard-00000."""
    return f"shard-{number:05d}" if part is None else f"part-{part:05d}-shard-{number:05d}"


def column_path(stem: str, column: str, extension: str) -> str:
    """shards/<stem>.<column><ext>, relative to DST."""
    return f"{SHARDS_DIR}/{stem}.{column}{extension}"


class FieldShard:
    """A shard being written: add() each sample's record (field_records.py), then close() gives
    the written files, ready to commit."""

    def __init__(self, dst: str, fmt: ShardFormat, schemas: Dict[str, SampleSchema], number: int, stem: str,
                 dataset_id: str, writer_options: FormatOptions) -> None:
        self.dst, self.fmt, self.schemas, self.number, self.stem = dst, fmt, schemas, number, stem
        self.count = 0
        self.nbytes = len(schemas) * fmt.fixed_bytes
        self._files: Dict[str, Path] = {}
        self._writers: Dict[str, ShardWriter] = {}
        self._pending: List[Record] = []
        try:
            for column, schema in schemas.items():
                final = Path(dst) / column_path(stem, column, fmt.extension)
                self._files[column] = temp_path(final)
                self._writers[column] = fmt.open_writer(str(self._files[column]), schema, writer_options, dataset_id)
        except Exception as exc:  # noqa: BLE001 - any library's failure to create a file
            self.abort()
            raise write_failure(final, self._task(column), exc) from None

    def _task(self, column: str) -> ColumnTask:
        return ColumnTask(self.number, 0, self.count, column=column, stem=self.stem)

    def add(self, record: Record) -> None:
        """Append one sample's record; the column writers get it in the next run."""
        self._pending.append(record)
        self.count += 1
        self.nbytes += record_nbytes(record)
        if len(self._pending) >= COLUMN_RUN:
            self._hand_over()

    def _hand_over(self) -> None:
        """Give the samples held so far to the column writers, a run per column."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        runs = column_runs(pending, list(self.schemas.values()))
        for (column, writer), run in zip(self._writers.items(), runs):
            try:
                writer.append_many(run)
            except Exception as exc:  # noqa: BLE001 - a write failure names the file
                raise write_failure(Path(self.dst) / column_path(self.stem, column, self.fmt.extension),
                                    self._task(column), exc) from None

    def close(self) -> Dict[str, WrittenShard]:
        """Finish every file (not yet durable): column -> its WrittenShard, for the sink to commit."""
        try:
            self._hand_over()
        except BaseException:
            self.abort()
            raise
        written = {}
        for column, writer in self._writers.items():
            final = Path(self.dst) / column_path(self.stem, column, self.fmt.extension)
            tmp = self._files[column]
            try:
                writer.close()
                size = tmp.stat().st_size
            except Exception as exc:  # noqa: BLE001 - see add()
                self.abort()
                raise write_failure(final, self._task(column), exc) from None
            kill_point("shard-written", str(final))     # tests only: killed with this file not yet committed
            result = ShardResult(shard=self.number, path=column_path(self.stem, column, self.fmt.extension),
                                 num_samples=self.count, size=size, sha256="")
            written[column] = WrittenShard(self.dst, self._task(column), tmp, final, result)
        self._writers = {}
        return written

    def abort(self) -> None:
        """Drop the shard: its writers released, its temporary files removed."""
        for writer in self._writers.values():
            writer.abort()
        self._writers, self._pending = {}, []
        for tmp in self._files.values():
            tmp.unlink(missing_ok=True)


def shard_record(number: int, stem: str, results: Dict[str, ShardResult], emitted: int, end: Optional[int],
                 skipped: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The done record of a whole shard: its files (in column order), its count, and where the
    input stood when it was sealed (`emitted`: inputs that had left the shuffle buffer, samples and
    skipped inputs alike; `end`: the input's length once it had ended) with the inputs skipped
    since the shard before (each with its position in the input)."""
    files = {column: {"path": result.path, "size": result.size, "sha256": result.sha256}
             for column, result in results.items()}
    count = next(iter(results.values())).num_samples
    return {"shard": number, "stem": stem, "num_samples": count, "files": files, "emitted": emitted, "end": end,
            "skipped": skipped}


def kept_record(dst: str, journal: Journal, number: int, stem: str, columns: List[str],
                extension: str) -> Optional[Dict[str, Any]]:
    """The done record of shard `number` when --resume may keep the shard: well-formed, naming
    exactly this shard's files, each a regular file inside DST whose sha256 still matches; else None.
    The journal is untrusted like the rest of DST."""
    record = journal.read_done(stem + RECORD_SUFFIX)
    if not isinstance(record, dict) or set(record) != RECORD_KEYS or not isinstance(record["skipped"], list) \
            or not all(isinstance(item, dict) and type(item.get("position")) is int for item in record["skipped"]):
        return None
    files = record["files"]
    numbers = [record["shard"], record["num_samples"], record["emitted"]]
    if record["shard"] != number or record["stem"] != stem or not isinstance(files, dict) \
            or sorted(files) != sorted(columns) or any(type(value) is not int or value < 0 for value in numbers) \
            or not (record["end"] is None or (type(record["end"]) is int and record["end"] >= record["emitted"])):
        return None
    for column, item in files.items():
        if not isinstance(item, dict) or item.get("path") != column_path(stem, column, extension) \
                or type(item.get("size")) is not int or not isinstance(item.get("sha256"), str):
            return None
        try:
            if hash_shard_file(Path(dst) / item["path"], dst, item["size"]) != item["sha256"]:
                return None
        except (OSError, ValueError):
            return None
    return record
