"""Tables appended to a dataset (convert --append, and repair of an append): NEW_SRC's rows are
encoded with the dataset's recorded encoding, never one inferred from the new files.

The manifest records what decides a row's bytes: the stored columns (names, order, types), the
vector dtype, the label column and its kind, every category vocabulary and the label classes. An
appended file must hold the same columns (their order in the file may differ); a vocabulary (or
the classes) that was collected from the data grows at its end, with the new values sorted among
themselves, so no stored code changes; one that --schema gave stays fixed (values outside it make
their rows bad, as in the conversion)."""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from ...codecs.tabular import Column
from ...errors import UsageError
from .files import TableFile
from .types import SchemaOverrides

#: Column name -> the recorded vocabulary (or classes) that new values extend at the end.
Bases = Dict[str, Tuple[str, ...]]


def recorded_encoding(manifest: Any, given: SchemaOverrides) -> Tuple[SchemaOverrides, Bases]:
    """The overrides that fix every column's type, the dtype and the label kind as `manifest`
    records them, and the vocabularies that may grow (those --schema, `given`, did not fix)."""
    schema = manifest.schema
    columns: Dict[str, Column] = {}
    bases: Bases = {}
    for entry in schema.columns:
        name, kind = entry["name"], entry["type"]
        vocabulary = tuple(entry.get("vocabulary", ())) if kind == "category" else None
        fixed = given.columns.get(name)
        if kind == "category" and (fixed is None or fixed.vocabulary is None):
            bases[name], vocabulary = vocabulary or (), None
        columns[name] = Column(name, kind, vocabulary)
    label, kind = schema.codec.get("label_column"), schema.codec.get("label_type")
    classes = None
    if label is not None and kind == "int":
        columns[label] = Column(label, "int")
    elif label is not None:
        declared = given.columns.get(label)
        if given.classes is not None or (declared is not None and declared.vocabulary is not None):
            classes = list(manifest.classes)
        else:
            columns[label], bases[label] = Column(label, "category"), tuple(manifest.classes)
    return SchemaOverrides(columns, str(schema.codec.get("dtype", schema.dtype)), classes), bases


def recorded_columns(stored: Sequence[str], manifest: Any, files: List[TableFile]) -> List[str]:
    """The dataset's stored columns, in its order, when the files hold exactly those (after the
    dataset's --columns / --drop-columns); a one-line UsageError naming the first file otherwise."""
    recorded = [entry["name"] for entry in manifest.schema.columns]
    if set(stored) != set(recorded):
        missing = [name for name in recorded if name not in stored]
        extra = [name for name in stored if name not in recorded]
        what = "; ".join(part for part in (f"missing {', '.join(map(repr, missing))}" if missing else "",
                                           f"extra {', '.join(map(repr, extra))}" if extra else "") if part)
        raise UsageError(f"columns differ from the dataset's ({what}); an append takes tables of the dataset's "
                         f"columns ({', '.join(recorded)})", path=files[0].name)
    return recorded


def check_column_types(files: List[TableFile], columns: Sequence[Column]) -> None:
    """UsageError for a typed file (Parquet, Arrow) whose column holds floating point numbers
    where the dataset stores integers: its values would not be the dataset's type."""
    kinds = {column.name: column.type for column in columns}
    for item in files:
        for name, stored_type in zip(item.head.header, item.types or ()):
            if kinds.get(name) == "int" and str(stored_type) in ("halffloat", "float", "double"):
                raise UsageError(f"column {name!r} holds {stored_type} values; the dataset stores it as int "
                                 "(an append keeps the dataset's column types)", path=item.name)


def grown(name: str, base: Sequence[str], values: Sequence[str], label: bool) -> Tuple[List[str], str]:
    """The vocabulary (label: the classes) of column `name` after an append: base, then the values it
    lacks, sorted; and the warning that says what was added ("" when nothing was)."""
    known = set(base)
    added = sorted(value for value in values if value not in known)
    if not added:
        return list(base), ""
    what = ("class" if label else "value") + ("es" if label and len(added) > 1 else "s" if len(added) > 1 else "")
    where = "labels" if label else "codes"
    shown = ", ".join(map(repr, added[:5])) + (" ..." if len(added) > 5 else "")
    return list(base) + added, (f"column {name!r}: {len(added)} new {what} added at the end"
                                f"{'' if label else ' of its vocabulary'} ({where} {len(base)}.."
                                f"{len(base) + len(added) - 1}): {shown}")


__all__ = ["Bases", "check_column_types", "grown", "recorded_columns", "recorded_encoding"]
