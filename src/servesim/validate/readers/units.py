"""Units as aiperf and genai-perf label their metrics ({"unit": "ms", "avg": ...})."""

from __future__ import annotations

from servesim.errors import ServesimError

TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3, "seconds": 1e3}


def to_ms(value: float | None, unit: str, where: str) -> float | None:
    if value is None:
        return None
    factor = TO_MS.get(str(unit).strip().lower())
    if factor is None:
        raise ServesimError(f"{where}: unit {unit!r} is not a time unit servesim reads (ns, us, ms, s)")
    return float(value) * factor
