"""Each column of a dataset of named fields as a dataset of one payload: its manifest view, with
the storage schema of its files, so that every reader, check and operation of single-field shards
applies to each column unchanged (docs/architecture.md, "Samples of named fields")."""
from __future__ import annotations

from typing import Dict, Optional, Sequence

from .codecs.fields import column_schemas
from .errors import UsageError
from .manifest import Manifest


def column_views(manifest: Manifest, columns: Optional[Sequence[str]] = None) -> Dict[str, Manifest]:
    """column -> the manifest of that column alone, for every column of a dataset of fields (or
    those named, in that order)."""
    if manifest.fields is None:
        raise UsageError("not a dataset of named fields")
    schemas = column_schemas(manifest.schema)
    names = list(schemas) if columns is None else list(columns)
    return {name: manifest.field_view(name, schemas[name]) for name in names}
