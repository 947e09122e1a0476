"""What a Writer writes, apart from the samples: its options and the schema, their fingerprint (the
dataset's identity, and what a resumed run must match), and the fields a user declares."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Tuple

from ..codecs.fields import column_schemas
from ..errors import UsageError
from ..schema import FieldSpec, SampleSchema, check_fields
from .conversion_plan import plan_identity
from .journal import Journal
from .session import creation_time


@dataclass(frozen=True)
class WriterPlan:
    """A Writer's options, checked: the format, how shards are cut, the order, the part."""

    format: str
    samples_per_shard: Optional[int]
    max_bytes: Optional[int]
    order: str
    seed: int
    shuffle_buffer: int                 # 0: source order
    part: Optional[Tuple[int, int]]
    key_field: Optional[str]

    @property
    def part_index(self) -> Optional[int]:
        return None if self.part is None else self.part[0]

    def fingerprint(self, schema: Optional[SampleSchema], with_part: bool = True) -> str:
        """Digest of what the output depends on besides the samples (the schema too, once known);
        without the part's index it names the whole plan, which every part shares (merge)."""
        options = asdict(self)
        options["part"] = self.part if with_part or self.part is None else [None, self.part[1]]
        record = {"writer": options, "schema": None if schema is None else schema.to_dict()}
        return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()

    def dataset_id(self, schema: Optional[SampleSchema]) -> str:
        """The identity stamped into every file: the same for every part of one plan."""
        return plan_identity(self.fingerprint(schema, with_part=False))

    @staticmethod
    def column_schemas(schema: SampleSchema) -> Dict[str, SampleSchema]:
        return column_schemas(schema)

    def record(self, journal: Journal, schema: SampleSchema) -> str:
        """Record the plan (options, schema, creation time) for a resumed run; the creation time."""
        created = creation_time()
        journal.write_plan({"fingerprint": self.fingerprint(None), "created": created, "schema": schema.to_dict()})
        return created

    def check_resume(self, previous: Dict[str, Any], fields: Optional[Tuple[FieldSpec, ...]],
                     dst: str) -> Optional[Tuple[FieldSpec, ...]]:
        """The fields of the interrupted run (its recorded schema), once its options are these and
        `fields`, when given, are its fields; UsageError otherwise."""
        if previous.get("fingerprint") != self.fingerprint(None):
            raise UsageError("the options differ from the interrupted run's; resume with the same ones, or use "
                             "overwrite=True to start over", path=dst)
        try:
            recorded = SampleSchema.from_dict(dict(previous["schema"])).fields
        except (UsageError, TypeError, ValueError, KeyError):
            raise UsageError("the interrupted run's plan record is damaged; use overwrite=True to start over",
                             path=dst) from None
        if fields is not None and tuple(fields) != tuple(recorded):
            raise UsageError("the fields differ from the interrupted run's; resume with the same ones", path=dst)
        return recorded


def fields_of(fields: Any) -> Optional[Tuple[FieldSpec, ...]]:
    """The fields a user declares: None (inferred from the first sample), a list of FieldSpec (or
    of their dicts), or a dict of name -> a type name, a dict of the spec's keys, or a FieldSpec."""
    if fields is None:
        return None
    if isinstance(fields, dict):
        specs = []
        for name, spec in fields.items():
            if isinstance(spec, FieldSpec):
                if spec.name != name:
                    raise UsageError(f"field {name!r} is declared with the FieldSpec of {spec.name!r}")
                specs.append(spec)
            elif isinstance(spec, str):
                specs.append(FieldSpec(name, spec))
            elif isinstance(spec, dict):
                specs.append(FieldSpec.from_dict({"name": name, **spec}))
            else:
                raise UsageError(f"field {name!r}: declare it by a type name, a dict or a FieldSpec, "
                                 f"not {type(spec).__name__}")
        return check_fields(specs)
    if isinstance(fields, (list, tuple)):
        return check_fields([spec if isinstance(spec, FieldSpec) else FieldSpec.from_dict(spec) for spec in fields])
    raise UsageError(f"fields must be a dict, a list of FieldSpec or None, not {type(fields).__name__}")
