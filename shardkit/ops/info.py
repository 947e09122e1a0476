"""info(): what a dataset holds, from its manifest alone (fast: no shard is opened)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..manifest import load_manifest
from ..units import format_size


def info(dst: str) -> Dict[str, Any]:
    """A summary dict of DST: format, samples, shards, bytes, schema, classes, source."""
    manifest = load_manifest(dst)
    data = {
        "dst": dst,
        "format": manifest.format_name,
        "format_version": manifest.format_version,
        "shardkit_version": manifest.shardkit_version,
        "created": manifest.created,
        "num_samples": manifest.num_samples,
        "num_shards": len(manifest.shards),
        "bytes": manifest.total_bytes,
        "schema": manifest.schema.to_dict(),
        "classes": manifest.classes,
        "source": manifest.source,
        "part": manifest.part,
        "order": manifest.order or {"kind": "source"},
        "sample_table": manifest.sample_table,
    }
    data["samples_per_class"] = samples_per_class(data)
    if manifest.fields is not None:
        data["fields"] = field_summary(manifest)
    return data


def field_summary(manifest: Any) -> List[Dict[str, Any]]:
    """Each field of a dataset of named fields: its spec and the bytes of its files (with a variable
    array's shape files), and whether each column keeps a sample table."""
    out = []
    for spec in manifest.schema.fields:
        tables = manifest.fields.sample_tables
        out.append({**spec.to_dict(), "bytes": sum(int(manifest.fields.columns[column].sizes.sum())
                                                   for column in spec.columns),
                    "files": len(spec.columns) * len(manifest.shards),
                    "sample_tables": [tables[column]["path"] for column in spec.columns if column in tables]})
    return out


def samples_per_class(data: Dict[str, Any]) -> Optional[List[int]]:
    """Samples of each class, in label order, as recorded at conversion; None for a dataset
    written before shardkit recorded them."""
    counts = data["source"].get("summary", {}).get("samples_per_class")
    if not isinstance(counts, dict):
        return None
    return [int(counts.get(name, 0)) for name in data["classes"]]


def _seed_text(order: Dict[str, Any]) -> str:
    if "seed" not in order:
        return ""
    buffer = f", buffer of {order['buffer']} samples" if "buffer" in order else ""
    return f" (seed {order['seed']}{buffer})"


def _sample_line(schema: Dict[str, Any]) -> str:
    codec = ", ".join(f"{key}={value}" for key, value in schema.get("codec", {}).items())
    return (f"sample       {schema['kind']} / {schema['layout']}"
            + (f" {schema['dtype']}{tuple(schema['shape'])}" if schema["layout"] == "array" else "")
            + (f" ({codec})" if codec else "") + f", compression {schema['compression']}")


def _field_lines(fields: List[Dict[str, Any]]) -> List[str]:
    """One line per field: name, type and what the type says, whether optional, bytes on disk."""
    lines = [f"fields       {len(fields)}"]
    for field in fields:
        facts = [f"{key} {value}" for key, value in field.items()
                 if key in ("mode", "size", "dtype", "shape", "compression")]
        if "classes" in field:
            facts.append(f"{len(field['classes'])} classes")
        lines.append(f"  {field['name']:<10} {field['type']:<6} {format_size(field['bytes']):>10}"
                     + (", optional" if field["optional"] else "") + "".join(f", {fact}" for fact in facts))
    return lines


def _with_counts(data: Dict[str, Any]) -> List[str]:
    counts = samples_per_class(data)
    if counts is None:
        return list(data["classes"])
    return [f"{name} ({count})" for name, count in zip(data["classes"], counts)]


def render_info(data: Dict[str, Any]) -> str:
    """The human-readable form printed by `shardkit info`."""
    schema = data["schema"]
    lines = [
        f"dataset      {data['dst']}",
        f"format       {data['format']} v{data['format_version']} (shardkit {data['shardkit_version']})",
        f"samples      {data['num_samples']} in {data['num_shards']} shards, {format_size(data['bytes'])}",
        *(_field_lines(data["fields"]) if "fields" in data else [_sample_line(schema)]),
        f"labels       {'yes' if schema.get('labeled') or data['classes'] else 'no'}; {len(data['classes'])} classes"
        + (f": {', '.join(_with_counts(data)[:10])}{' ...' if len(data['classes']) > 10 else ''}"
           if data["classes"] else ""),
        f"created      {data['created']}",
        f"order        {data['order']['kind']}" + _seed_text(data["order"]),
        "sample table " + (f"{data['sample_table']['path']}, {format_size(data['sample_table']['size'])}"
                           if data.get("sample_table") else "one per field (sample_table.<field>.bin)"
                           if "fields" in data else "none (labels and CRC32s are read from each shard)"),
    ]
    summary = data["source"].get("summary", {})
    if summary:
        lines.append(f"source       {data['source'].get('kind')} {data['source'].get('path', '')}".rstrip())
        facts = [f"{k.replace('_', ' ')} {v}" for k, v in summary.items()
                 if isinstance(v, (int, dict)) and v != {} and k != "samples_per_class"]
        lines.append("             " + ", ".join(facts))
    if data.get("part"):
        lines.append(f"part         {data['part']['index']}/{data['part']['count']}")
    return "\n".join(lines)
