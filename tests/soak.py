"""The fault scenarios' size, for `make soak-stores`.

A scenario reads its size through `scaled(n)`: `n` at `PSYQ_SOAK_SCALE=1` (CI's size), ten
times `n` under `make soak-stores` (PSYQ_SOAK_SCALE=10), and prints its outcome with
`report`, one line that `pytest -s` shows:

    soak live move, buffered file handed over: jobs 6000, kills 30, lost 0, ran twice 0, 95.2 s
"""

from __future__ import annotations

import os

__all__ = ["SCALE", "report", "scaled"]

SCALE = float(os.environ.get("PSYQ_SOAK_SCALE", "1"))


def scaled(n: float) -> int:
    """`n` times the soak scale, at least 1."""
    return max(1, round(n * SCALE))


def report(scenario: str, seconds: float, **figures: object) -> None:
    """Print the scenario's figures (lost, ran twice, ...) and its time, on one line."""
    shown = ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in figures.items())
    print(f"\nsoak {scenario}: {shown}, {seconds:.1f} s", flush=True)
