"""Tabular sources: delimited text, JSON Lines, Parquet and Arrow files, read with Apache Arrow."""
from __future__ import annotations

from .files import holds_table_tree, is_table_path
from .source import TabularSource

__all__ = ["TabularSource", "holds_table_tree", "is_table_path"]
