"""PT shards' constants shared by the writer and the reader (formats/pt.md)."""
from __future__ import annotations

FORMAT_NAME = "pt"
FORMAT_VERSION = 3
