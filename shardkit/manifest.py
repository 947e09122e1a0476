"""Manifest and ShardEntry: the dataset's table of contents, saved last and atomically."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .errors import ForeignShardError, ManifestError, NotADatasetError, UsageError
from .field_files import FieldFiles
from .integrity import HASH_ALGORITHM, PathLike, atomic_write_json
from .sample_table import check_entry
from .schema import FIELDS_KIND, SampleSchema
from .shard_table import (MIN_SAMPLE_BYTES, SHARDS_DIR, ShardEntry, ShardTable, canonical_text, check_relative_path,
                          check_shard_count, plain_columns)

MANIFEST_NAME = "manifest.json"
SKIPPED_NAME = "skipped.jsonl"
#: source.summary keys that count what the written shards hold (summed over the parts by merge);
#: every other key describes the whole scan of SRC and is the same in every part.
RUN_SUMMARY_KEYS = ("converted", "skipped", "bytes", "detected", "samples_per_class")
#: Newest version of the manifest layout itself that this shardkit reads (formats/manifest.schema.json).
MANIFEST_VERSION = 2
#: The layout of datasets of named fields (each field's files per shard, formats/fields.md); datasets
#: of one payload per sample are written in layout 1, as they always were.
FIELDS_MANIFEST_VERSION = 2
#: Largest manifest.json read (a million shards take about 250 MB): a larger file is refused
#: before it is parsed, which would cost several times its size in memory.
MAX_MANIFEST_BYTES = 256 << 20
#: Most characters of a class name (a folder name, a label value); a manifest is untrusted input.
MAX_NAME_CHARS = 1 << 16

__all__ = ["MANIFEST_NAME", "MANIFEST_VERSION", "RUN_SUMMARY_KEYS", "SHARDS_DIR", "SKIPPED_NAME", "Manifest",
           "ShardEntry", "ShardTable", "check_relative_path", "load_manifest", "manifest_path", "parse_manifest"]


@dataclass
class Manifest:
    """Everything a reader needs: format, schema, classes, shards with their checksums."""

    format_name: str
    format_version: int
    schema: SampleSchema
    #: ShardTable; a list of ShardEntry given here or assigned later is turned into one
    shards: ShardTable
    classes: List[str] = field(default_factory=list)
    source: Dict[str, Any] = field(default_factory=dict)
    format_options: Dict[str, Any] = field(default_factory=dict)
    created: str = ""
    shardkit_version: str = ""
    part: Optional[Dict[str, int]] = None
    #: {"kind": "shuffled", "seed": N} or {"kind": "source"}; None: written before the order was recorded
    #: (always source order then)
    order: Optional[Dict[str, Any]] = None
    #: Identity stamped into every shard (format versions with one); None in older datasets.
    dataset_id: Optional[str] = None
    #: {"path": "sample_table.bin", "size": N, "sha256": HEX} (sample_table.py); None: no sample table
    #: (a dataset written before there was one, or of shards without label and CRC32 tables).
    sample_table: Optional[Dict[str, Any]] = None
    #: A dataset of named fields (schema kind "fields", manifest version 2): each column's shard
    #: files and sample table; `shards` then holds the shards as units (FieldFiles.units). None:
    #: one payload per sample (version 1).
    fields: Optional[FieldFiles] = None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "shards" and not isinstance(value, ShardTable):
            value = ShardTable.from_entries(value)
        super().__setattr__(name, value)

    @property
    def num_samples(self) -> int:
        """Total samples over all shards."""
        return int(self.shards.num_samples.sum())

    @property
    def total_bytes(self) -> int:
        """Total shard bytes on disk."""
        return int(self.shards.sizes.sum())

    def to_dict(self) -> Dict[str, Any]:
        """The manifest as written, including its own checksum."""
        body = {
            "manifest_version": 1 if self.fields is None else FIELDS_MANIFEST_VERSION,
            "format": {"name": self.format_name, "version": self.format_version},
            "format_options": self.format_options,
            "shardkit_version": self.shardkit_version,
            "created": self.created,
            "source": self.source,
            "schema": self.schema.to_dict(),
            "classes": list(self.classes),
            "num_samples": self.num_samples,
            "hash_algorithm": HASH_ALGORITHM,
            "shards": self.shards.to_dicts() if self.fields is None else self.fields.shard_dicts(),
        }
        if self.fields is not None and self.fields.sample_tables:
            body["sample_tables"] = self.fields.table_dicts()
        if self.dataset_id is not None:
            body["dataset_id"] = self.dataset_id
        if self.part is not None:
            body["part"] = dict(self.part)
        if self.order is not None:
            body["order"] = dict(self.order)
        if self.sample_table is not None:
            body["sample_table"] = dict(self.sample_table)
        body["manifest_sha256"] = _body_checksum(body)
        return body

    @classmethod
    def from_dict(cls, data: Dict[str, Any], *, where: str = MANIFEST_NAME) -> "Manifest":
        """Parse and check a manifest dict: version gate, self-checksum, consistent shards."""
        if not isinstance(data, dict):
            raise ManifestError("not a JSON object", path=where)
        if "manifest_version" not in data:
            raise ManifestError("missing manifest_version", path=where)
        version = data["manifest_version"]
        if not isinstance(version, int) or isinstance(version, bool):
            raise ManifestError("manifest_version must be a whole number, not "
                                f"{type(version).__name__} {version!r}", path=where)
        if version < 1:
            raise ManifestError(f"manifest_version {version} is invalid (versions start at 1)", path=where)
        if version > MANIFEST_VERSION:
            raise ManifestError(f"manifest version {version} is newer than this shardkit reads "
                                f"({MANIFEST_VERSION}); upgrade shardkit", path=where)
        body = {key: value for key, value in data.items() if key != "manifest_sha256"}
        check_shard_count(body.get("shards"), where)
        columns = plain_columns(body.get("shards"))
        if data.get("manifest_sha256") != _body_checksum(body, columns):
            raise ManifestError("manifest content does not match its manifest_sha256 "
                                "(a value was edited or damaged; spacing and key order do not matter)", path=where)
        try:
            fmt = data["format"]
            schema = _schema(data["schema"], version, where)
            files = None if version == 1 else FieldFiles.from_manifest(
                data["shards"], data.get("sample_tables"), [c for spec in schema.fields for c in spec.columns], where)
            manifest = cls(
                format_name=str(fmt["name"]), format_version=int(fmt["version"]),
                schema=schema, fields=files,
                shards=files.units() if files is not None else ShardTable.from_dicts(data["shards"])
                if columns is None else ShardTable.from_columns(columns),
                classes=_class_names(data.get("classes", []), where),
                source=dict(data.get("source", {})), format_options=dict(data.get("format_options", {})),
                created=str(data.get("created", "")), shardkit_version=str(data.get("shardkit_version", "")),
                part=data.get("part"), order=data.get("order"),
                dataset_id=None if data.get("dataset_id") is None else str(data["dataset_id"]))
        except ManifestError as exc:
            exc.path = exc.path or where        # a shard entry's own check does not know the file
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"malformed manifest ({type(exc).__name__}: {exc})", path=where) from None
        manifest.check_consistency(where)
        if data.get("sample_table") is not None and version == 1:
            manifest.sample_table = check_entry(data["sample_table"], manifest.num_samples, where)
        return manifest

    def check_consistency(self, where: str = MANIFEST_NAME) -> None:
        """Each shard's count within what its size holds (MIN_SAMPLE_BYTES a sample, plus the row
        of an uncompressed fixed-shape sample, which every format stores as it is), the total
        within MAX_SAMPLES, shard indices contiguous and shard paths unique (in each column of a
        dataset of fields too, each column's file an ordinary shard)."""
        schema = self.schema
        rows = schema.sample_nbytes if schema.is_array and schema.compression == "none" else 0
        self.shards.check_consistency(where, MIN_SAMPLE_BYTES + min(rows, 1 << 62))
        for table in (self.fields.columns.values() if self.fields is not None else ()):
            table.check_consistency(where)

    def shard_files(self) -> List[Tuple[str, int, str]]:
        """(path, size, sha256) of every shard file: each shard's, or each column's of each shard."""
        tables = [self.shards] if self.fields is None else list(self.fields.columns.values())
        return [item for table in tables for item in zip(table.paths, table.sizes.tolist(), table.sha256s)]

    def table_files(self) -> List[Dict[str, Any]]:
        """The manifest entries (path, size, sha256) of its sample tables: none, the dataset's, or
        each column's."""
        if self.fields is not None:
            return list(self.fields.sample_tables.values())
        return [] if self.sample_table is None else [self.sample_table]

    def field_view(self, column: str, schema: SampleSchema) -> "Manifest":
        """The manifest of one column of a dataset of fields as a dataset of its own: its files,
        its sample table, and `schema`, the storage schema of its files (field_views.py), so that
        every reader, check and verify of a dataset of one payload applies to it unchanged."""
        assert self.fields is not None
        return Manifest(format_name=self.format_name, format_version=self.format_version, schema=schema,
                        shards=self.fields.columns[column], source=self.source,
                        format_options=self.format_options, created=self.created,
                        shardkit_version=self.shardkit_version, part=self.part, order=self.order,
                        dataset_id=self.dataset_id, sample_table=self.fields.sample_tables.get(column))

    def check_identity(self, shard_id: Optional[str], path: str, shard: int) -> None:
        """Raise ForeignShardError unless a shard carries this dataset's identity (a shard of an older
        format version carries none and is taken as it is, as is any shard of an older dataset)."""
        if self.dataset_id is not None and shard_id != self.dataset_id:
            raise ForeignShardError(path, shard, str(shard_id), self.dataset_id)

    def save(self, dst: PathLike) -> None:
        """Write DST/manifest.json atomically (it marks the dataset complete)."""
        atomic_write_json(Path(dst) / MANIFEST_NAME, self.to_dict())


def _class_names(names: Any, where: str) -> List[str]:
    """The manifest's class names: a list of strings of at most MAX_NAME_CHARS each."""
    if not isinstance(names, list):
        raise ManifestError(f"classes must be a list, not {type(names).__name__}", path=where)
    texts = [str(name) for name in names]
    if any(len(text) > MAX_NAME_CHARS for text in texts):
        raise ManifestError(f"a class name is longer than {MAX_NAME_CHARS} characters", path=where)
    return texts


def _schema(data: Any, version: int, where: str) -> SampleSchema:
    """The manifest's schema: of named fields in layout 2, of one payload in layout 1."""
    try:
        schema = SampleSchema.from_dict(data)
    except UsageError as exc:
        raise ManifestError(f"malformed schema ({exc})", path=where) from None
    if (schema.kind == FIELDS_KIND) != (version == FIELDS_MANIFEST_VERSION):
        raise ManifestError(f"manifest_version {version} does not hold a schema of kind {schema.kind!r}", path=where)
    return schema


def _body_checksum(body: Dict[str, Any], columns: Optional[Dict[str, List[Any]]] = None) -> str:
    """sha256 of the body's canonical JSON (sorted keys, no spaces, ASCII); columns: the shards as
    plain_columns gave them, whose text is built faster than json.dumps would (same bytes)."""
    if columns is None:
        canonical = _canonical(body)
    else:       # the same text json.dumps writes for an object: sorted "key":value pairs
        pairs = [_canonical(key) + ":" + (canonical_text(columns) if key == "shards" else _canonical(value))
                 for key, value in sorted(body.items())]
        canonical = "{" + ",".join(pairs) + "}"
    return hashlib.sha256(canonical.encode()).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def manifest_path(dst: PathLike) -> Path:
    """DST/manifest.json."""
    return Path(dst) / MANIFEST_NAME


def load_manifest(dst: PathLike) -> Manifest:
    """Read DST/manifest.json; NotADatasetError if there is none, ManifestError if it is bad (also
    a link, a special file or one over MAX_MANIFEST_BYTES: it is opened O_NOFOLLOW inside DST)."""
    path = manifest_path(dst)
    if not os.path.isdir(dst):
        raise NotADatasetError("no such dataset directory", path=str(dst))
    try:
        text = _read_manifest_file(dst, path)
    except FileNotFoundError:
        raise NotADatasetError(f"not a shardkit dataset (no {MANIFEST_NAME}; "
                               "an unfinished conversion can continue with --resume)", path=str(dst)) from None
    except OSError as exc:
        raise ManifestError(f"cannot read manifest ({exc})", path=str(path)) from None
    return parse_manifest(text, str(path))


def parse_manifest(text: bytes, where: str) -> Manifest:
    """A manifest from the bytes of a manifest.json (where: its path or URL, for messages), with
    every check load_manifest makes (at most MAX_MANIFEST_BYTES); ManifestError if it is bad."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"has {len(text)} bytes, more than the {MAX_MANIFEST_BYTES} a manifest may have",
                            path=where)
    try:
        data = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"cannot read manifest ({exc})", path=where) from None
    except RecursionError:
        raise ManifestError("cannot read manifest (nested too deeply)", path=where) from None
    return Manifest.from_dict(data, where=where)


def _read_manifest_file(dst: PathLike, path: Path) -> bytes:
    """The bytes of DST/manifest.json, opened relative to DST without following a link, once fstat
    shows a regular file of at most MAX_MANIFEST_BYTES (judged before anything is read);
    ManifestError otherwise, FileNotFoundError when there is none."""
    folder = os.open(dst, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(MANIFEST_NAME, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0), dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ManifestError("is a symbolic link; shardkit reads only a regular file inside the dataset",
                                path=str(path)) from None
        raise
    finally:
        os.close(folder)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ManifestError("is not a regular file", path=str(path))
        if info.st_size > MAX_MANIFEST_BYTES:
            raise ManifestError(f"has {info.st_size} bytes, more than the {MAX_MANIFEST_BYTES} a manifest may have",
                                path=str(path))
        return handle.read(MAX_MANIFEST_BYTES + 1)
