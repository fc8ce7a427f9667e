"""JSON output of the report and the diff."""

from __future__ import annotations

import math


def finite_json(data):
    """JSON has no infinity or NaN: such values (a what-if with nothing left to limit the rate) become null."""
    if isinstance(data, dict):
        return {k: finite_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite_json(v) for v in data]
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data
