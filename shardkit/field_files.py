"""The files of a dataset of named fields (manifest version 2, formats/fields.md): for each stored
column (a field, or a variable-shape array's `<name>.shape`) one ordinary single-field shard file
per shard, with its path, size and sha256, and the column's own sample table. A shard's columns
share its sample count and first index.

Each column's files are parsed as a version-1 shard list is (ShardTable), so every check of a shard
entry (safe paths, whole numbers, contiguous indices) holds for each column."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .errors import ManifestError
from .sample_table import check_entry
from .shard_table import ShardTable

#: The keys of one shard of a version-2 manifest, and of each of its files.
SHARD_KEYS = {"num_samples", "first_index", "files"}
FILE_KEYS = {"path", "size", "sha256"}
#: A column's name: a field's, or a variable-shape array's `<name>.shape` (a regular expression).
COLUMN_NAME = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}(\.shape)?"
#: The sample table of a column: sample_table.<column>.bin, or sample_table-<samples>.<column>.bin as
#: an append writes it (a reader of the manifest before keeps the table it opened).
_TABLE_NAME = re.compile(rf"sample_table(-[0-9]+)?\.{COLUMN_NAME}\.bin\Z")


def table_name(column: str, num_samples: Optional[int] = None) -> str:
    """The file name of a column's sample table (written by an append to num_samples samples)."""
    return f"sample_table.{column}.bin" if num_samples is None else f"sample_table-{num_samples}.{column}.bin"


def is_table_name(name: str) -> bool:
    """Whether a file name in DST is a column's sample table (shardkit wrote it)."""
    return bool(_TABLE_NAME.match(name))


@dataclass
class FieldFiles:
    """Each column's shard files (a ShardTable per column, in column order) and sample tables."""

    columns: Dict[str, ShardTable]
    #: column -> its sample table's manifest entry; a column whose shards keep no label and CRC32
    #: tables (LMDB records) has none
    sample_tables: Dict[str, Dict[str, Any]]

    @property
    def first(self) -> ShardTable:
        return next(iter(self.columns.values()))

    def units(self) -> ShardTable:
        """The shards as units: counts and first indices, each shard's total size over its files,
        and its first column's path to name it by (no single file has that size; no sha256)."""
        first = self.first
        sizes = np.sum([table.sizes for table in self.columns.values()], axis=0, dtype=np.int64)
        return ShardTable(list(first.paths), first.num_samples, first.first_index,
                          np.asarray(sizes, dtype=np.int64).reshape(len(first)), [""] * len(first))

    def shard_dicts(self) -> List[Dict[str, Any]]:
        """The manifest's "shards" list."""
        first = self.first
        return [{"num_samples": int(first.num_samples[shard]), "first_index": int(first.first_index[shard]),
                 "files": {column: {"path": table.paths[shard], "size": int(table.sizes[shard]),
                                    "sha256": table.sha256s[shard]} for column, table in self.columns.items()}}
                for shard in range(len(first))]

    def table_dicts(self) -> Dict[str, Dict[str, Any]]:
        """The manifest's "sample_tables" object."""
        return {column: dict(entry) for column, entry in self.sample_tables.items()}

    def paths(self) -> List[str]:
        """Every file of every column."""
        return [path for table in self.columns.values() for path in table.paths]

    @classmethod
    def from_manifest(cls, shards: Any, tables: Any, columns: Sequence[str], where: str) -> "FieldFiles":
        """Parse a version-2 manifest's "shards" and "sample_tables" for these columns; ManifestError
        naming the manifest for anything malformed or unsafe."""
        if not isinstance(shards, list):
            raise ManifestError(f"shards must be a list, not {type(shards).__name__}", path=where)
        entries: Dict[str, List[Dict[str, Any]]] = {column: [] for column in columns}
        for number, shard in enumerate(shards):
            if not isinstance(shard, dict) or set(shard) != SHARD_KEYS or not isinstance(shard["files"], dict):
                raise ManifestError(f"shard {number} must hold exactly {', '.join(sorted(SHARD_KEYS))}", path=where)
            if set(shard["files"]) != set(columns):
                raise ManifestError(f"shard {number} lists the files of {sorted(shard['files'])}, not of the "
                                    f"fields' columns {sorted(columns)}", path=where)
            for column in columns:
                item = shard["files"][column]
                if not isinstance(item, dict) or set(item) != FILE_KEYS:
                    raise ManifestError(f"shard {number}: the {column} file must hold exactly path, size and "
                                        "sha256", path=where)
                entries[column].append({**item, "num_samples": shard["num_samples"],
                                        "first_index": shard["first_index"]})
        try:
            parsed = {column: ShardTable.from_dicts(items) for column, items in entries.items()}
        except ManifestError as exc:
            exc.path = exc.path or where
            raise
        files = cls(parsed, _tables(tables, columns, len(shards) and int(parsed[columns[0]].num_samples.sum()),
                                    where))
        paths = files.paths()
        if len(set(paths)) != len(paths):
            raise ManifestError("names one file for two columns or shards", path=where)
        return files


def _tables(tables: Any, columns: Sequence[str], num_samples: int, where: str) -> Dict[str, Dict[str, Any]]:
    """The checked sample table entries of a version-2 manifest (each of its column's name)."""
    if tables is None:
        return {}
    if not isinstance(tables, dict) or not set(tables) <= set(columns):
        raise ManifestError("sample_tables must map columns of the fields to their tables", path=where)
    return {column: check_entry(entry, num_samples, where, names=(table_name(column), table_name(column, num_samples)))
            for column, entry in tables.items() if column in columns}
