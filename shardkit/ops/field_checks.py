"""verify --deep's checks of a dataset of named fields across its columns: each variable-shape
array's stored shape (its `<name>.shape` file) fits the bytes stored for it, and both files agree
on which samples hold a value. Each column's own checks are verify's checks of a shard."""
from __future__ import annotations

import os
from typing import List

from ..codecs.field_decode import check_variable
from ..errors import CorruptShardError, SampleError
from ..field_views import column_views
from ..formats import READ_FAILURES, get_format, open_checked, recorded_options
from ..manifest import Manifest
from ..schema import SHAPE_SUFFIX
from .shard_checks import Problem


def variable_shapes(dst: str, manifest: Manifest) -> List[Problem]:
    """Problems of the variable-shape arrays of every shard, each naming its data file and sample."""
    fmt = get_format(manifest.format_name)
    options = recorded_options(fmt, manifest, dst)
    problems: List[Problem] = []
    for spec in (spec for spec in manifest.schema.fields if spec.variable):
        views = column_views(manifest, [spec.name, spec.name + SHAPE_SUFFIX])
        data_view, shape_view = views.values()
        for shard in range(len(manifest.shards)):
            path = data_view.shards.paths[shard]
            try:
                data, shapes = (open_checked(fmt, view, dst, shard, options) for view in (data_view, shape_view))
            except CorruptShardError:
                continue        # reported by that column's own checks
            try:
                problems.extend(_shard_shapes(spec, data, shapes, os.path.join(dst, path), path))
            finally:
                data.close()
                shapes.close()
    return problems


def _shard_shapes(spec, data, shapes, where: str, shard: str) -> List[Problem]:  # type: ignore[no-untyped-def]
    problems = []
    for index in range(len(data)):
        try:
            value, shape = data.read(index), shapes.read(index)
            if value.label != shape.label:
                raise SampleError(f"its {spec.name}.shape file says {'absent' if shape.label else 'present'}, "
                                  f"its data file {'absent' if value.label else 'present'}")
            if not value.label:
                check_variable(spec, value.payload, shape.payload)
        except (SampleError, *READ_FAILURES) as exc:
            problems.append(Problem("sample", f"{where}: sample {index}: field {spec.name!r}: {exc}", shard=shard,
                                    index=index))
    return problems
