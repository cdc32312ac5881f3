"""The planner's inputs measured by a session instead of assumed (``worldpager plan --timing-from LOG``).

Owns ``measured_inputs(log)``: from a session log (``engine.runtime.telemetry``), the chunk time the planner
should use — the median over the chunks after the first (chunk 0 warms the process up) of ``wall_ms``
less the time the chunk waited on memory (``stall_ms``) and was stopped (``paused_ms``): a chunk's wall
time without stalls, as ``--wall-ms`` takes it — and the process baseline its host pool measured
(``host_baseline_bytes`` in the header, absent for sessions without a pool). The chunk time is the
measuring machine's: it stands for the planned one only on the same kind of machine and model.
No torch; the only I/O is reading the log.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ConfigError
from engine.runtime.telemetry import read_log


@dataclass(frozen=True)
class MeasuredInputs:
    chunk_s: float
    chunks: int                      # chunk records the median is over
    model: str | None
    host_baseline: int | None


def measured_inputs(log: Path, flag: str = "--timing-from") -> MeasuredInputs:
    """What ``log`` measured (see the module docstring); one ``ConfigError`` line when it cannot say."""
    try:
        records = read_log(Path(log))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{flag} {log}: not a readable session log ({type(exc).__name__}: {exc})") from None
    header = records[0] if records and isinstance(records[0], dict) else {}
    if header.get("type") != "header":
        raise ConfigError(f"{flag} {log}: not a session log (its first line is not a header)")
    times = [_unstalled_ms(r) for r in records[1:]
             if isinstance(r, dict) and r.get("type") == "chunk" and r.get("chunk", 0) >= 1]
    times = [t for t in times if t is not None]
    if not times:
        raise ConfigError(f"{flag} {log}: no chunk after the first was logged; measure a session of at "
                          f"least 2 chunks")
    baseline = header.get("host_baseline_bytes")
    model = (header.get("config") or {}).get("model") if isinstance(header.get("config"), dict) else None
    return MeasuredInputs(statistics.median(times) / 1e3, len(times), model,
                          baseline if isinstance(baseline, int) and not isinstance(baseline, bool) else None)


def _unstalled_ms(record: dict) -> float | None:
    values = [record.get(k, 0.0) for k in ("wall_ms", "stall_ms", "paused_ms")]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    wall, stall, paused = values
    return max(wall - stall - paused, 0.0) if wall > 0 else None
