"""Summaries of repeated rounds, written once: a figure's median with its range, and each
figure's median over rounds of rows (a round: row name -> figure name -> value)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

Rows = dict[str, dict[str, float]]


def spread(values: Iterable[float]) -> tuple[float, float, float]:
    """(median, lowest, highest) of `values`."""
    found = list(values)
    return statistics.median(found), min(found), max(found)


def row_medians(rounds: list[Rows]) -> Rows:
    """Each figure's median over the rounds that have its row (a row the first round has;
    a round may miss a row, e.g. a peer that failed in it)."""
    out: Rows = {}
    for row in rounds[0]:
        present = [one[row] for one in rounds if row in one]
        out[row] = {name: statistics.median(r[name] for r in present) for name in present[0]}
    return out
