"""SampleSchema: what one sample is, recorded in the manifest so readers need no flags."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any, Dict, List, Optional, Tuple

#: Payload layouts a format must store: variable-length bytes, or a fixed-shape array.
LAYOUT_BYTES = "bytes"
LAYOUT_ARRAY = "array"
COMPRESSIONS = ("none", "gzip", "lzf")


@dataclass(frozen=True)
class SampleSchema:
    """The shape of every sample in a dataset: kind, payload layout, codec and compression."""

    kind: str                                   # "image" | "tabular"
    layout: str = LAYOUT_BYTES                  # "bytes" | "array"
    dtype: str = "uint8"                        # array element type (layout "array")
    shape: Tuple[int, ...] = ()                 # array shape (layout "array")
    labeled: bool = True
    codec: Dict[str, Any] = field(default_factory=dict)   # e.g. {"image_mode": "passthrough"}
    compression: str = "none"
    compression_level: Optional[int] = None
    columns: List[Dict[str, Any]] = field(default_factory=list)  # tabular: name, type, vocabulary

    @property
    def is_array(self) -> bool:
        """True when every payload is a fixed-shape array rather than bytes."""
        return self.layout == LAYOUT_ARRAY

    @cached_property
    def sample_nbytes(self) -> int:
        """Bytes of one fixed-shape array sample (0 for bytes layout); computed once per schema,
        since every array read checks a length against it."""
        if not self.is_array:
            return 0
        import numpy as np
        count = 1
        for dim in self.shape:
            count *= int(dim)
        return count * np.dtype(self.dtype).itemsize

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON-ready dict."""
        data = asdict(replace(self, columns=[]))
        # columns hold names and string lists only: copied directly (asdict deep-copies each vocabulary entry)
        data["columns"] = [{key: list(value) if isinstance(value, (list, tuple)) else value
                            for key, value in column.items()} for column in self.columns]
        data["shape"] = list(self.shape)
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "SampleSchema":
        """Inverse of to_dict."""
        data = dict(data)
        data["shape"] = tuple(data.get("shape", ()))
        return cls(**data)
