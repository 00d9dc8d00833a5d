"""The runner's table: one row per workload, psyq's figure, then per peer its figure
and psyq vs that peer; with several rounds, medians and each ratio's range."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from bench.harness.figures import spread

ROWS = [
    ("add one by one (jobs/s)", "add_single", True),
    ("add_bulk (jobs/s)", "add_bulk", True),
    ("processing c10 (jobs/s)", "c10", True),
    ("processing c100 (jobs/s)", "c100", True),
    ("flows added (trees of 1+10/s)", "flows.added", True),
    ("flows processed (trees of 1+10/s)", "flows.processed", True),
    ("add-to-start p50 (ms)", "latency.p50", False),
    ("add-to-start p99 (ms)", "latency.p99", False),
    ("memory per waiting job (bytes)", "bytes_per_waiting_job", False),
]


def pick(figures: dict[str, Any], key: str) -> float | None:
    """The figure at `key` ("a.b"), or None when that side has no such row."""
    value: Any = figures
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return float(value)


def fmt(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3f}"


def ratio(mine: float, theirs: float, higher_is_better: bool) -> str:
    """psyq vs peer, > 1 when psyq is better; n/a when either side has no figure."""
    if math.isnan(mine) or math.isnan(theirs):
        return "n/a"
    numerator, denominator = (mine, theirs) if higher_is_better else (theirs, mine)
    return f"{numerator / denominator:.2f}x" if denominator else "inf"


def table(
    psyq_figures: dict[str, Any],
    peers: dict[str, dict[str, Any] | str],
    mine_runs: list[dict[str, Any]] | None = None,
    peer_runs: dict[str, list[dict[str, Any] | str]] | None = None,
) -> str:
    """Rows of workload, psyq, then per peer its figure and psyq vs that peer (ratio > 1
    means psyq is better). With several rounds the ratio cell is the median of the rounds'
    ratios, then their range."""
    header = ["workload", "psyq"]
    for peer in peers:
        header += [peer, f"psyq vs {peer}"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for label, key, higher_is_better in ROWS:
        mine = pick(psyq_figures, key)
        assert mine is not None
        cells = [label, fmt(mine)]
        for peer, figures in peers.items():
            theirs = None if isinstance(figures, str) else pick(figures, key)
            if theirs is None:
                cells += ["n/a", "n/a"]
                continue
            runs = (peer_runs or {}).get(peer, [])
            if mine_runs is None or len(mine_runs) < 2 or len(runs) != len(mine_runs):
                cells += [fmt(theirs), ratio(mine, theirs, higher_is_better)]
                continue
            cells += [fmt(theirs), paired_ratios(mine_runs, runs, key, higher_is_better)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_ratios(
    mine_runs: list[dict[str, Any]],
    runs: list[dict[str, Any] | str],
    key: str,
    higher_is_better: bool,
) -> str:
    """`median (low-high)` of each round's psyq-vs-peer ratio."""
    found = []
    for mine, theirs in zip(mine_runs, runs, strict=True):
        a = pick(mine, key)
        b = None if isinstance(theirs, str) else pick(theirs, key)
        if a is None or b is None or math.isnan(a) or math.isnan(b) or not (a and b):
            return "n/a"
        found.append(a / b if higher_is_better else b / a)
    middle, low, high = spread(found)
    return f"{middle:.2f}x ({low:.2f}-{high:.2f}x)"


def peer_notes(peers: dict[str, dict[str, Any] | str]) -> list[str]:
    """Notes under the table: why a peer is n/a, and what each peer says about its rows."""
    notes: list[str] = []
    for peer, figures in peers.items():
        if isinstance(figures, str):
            notes.append(f"{peer}: n/a — {figures}")
        else:
            notes += [str(note) for note in figures.get("notes", [])]
    return notes


def median_figures(runs: list[dict[str, Any] | str]) -> dict[str, Any] | str:
    """Each figure's median over the runs (a peer that failed in any run: its reason)."""
    failed = [run for run in runs if isinstance(run, str)]
    if failed:
        return failed[0]
    return medians_of([run for run in runs if not isinstance(run, str)])


def medians_of(done: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each row's figure, its median over runs that all finished (the first run's other
    values kept)."""
    if len(done) == 1:
        return done[0]
    merged: dict[str, Any] = dict(done[0])
    for _, key, _ in ROWS:
        values = [value for value in (pick(run, key) for run in done) if value is not None]
        if values:
            place(merged, key, statistics.median(values))
    return merged


def place(figures: dict[str, Any], key: str, value: float) -> None:
    """Set the figure at `key` ("a.b"), copying the nested dict it sits in."""
    *path, last = key.split(".")
    for part in path:
        figures[part] = figures = dict(figures[part])
    figures[last] = value
