"""Export to Parquet -> report on a known history; enqueue from files and DataFrames."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import ExportPage, JobRecord
from psyq.cli.main import main
from psyq_migrate import MigrateError, QueuePlan
from psyq_migrate.figures import TimelinePoint, build_report, build_timeline, choose_interval
from psyq_migrate.history import enqueue_dataframe, export_history
from psyq_migrate.rendering import write_html

T0 = 1_700_000_000_000


def charge(i: int) -> JobRecord:
    """Job i of 100: finished at an even step over exactly two minutes, waited i ms, ran 10*i
    ms; every tenth failed (the first six for a timeout, the last four declined)."""
    finished = T0 + round((i - 1) * 120_000 / 99)
    started = finished - 10 * i
    failed = i % 10 == 0
    return JobRecord(
        id=str(i),
        queue="shop",
        name="charge",
        data="{}",
        opts={},
        timestamp=started - i,
        processed_on=started,
        finished_on=finished,
        attempts_made=1,
        attempts_started=1,
        failed_reason=("timeout" if i <= 60 else "card declined") if failed else None,
        returnvalue=None if failed else "null",
        state="failed" if failed else "completed",
    )


def waiting(i: int) -> JobRecord:
    return JobRecord(str(i), "shop", "email", "{}", {}, T0, state="waiting")


async def write_history(url: str) -> None:
    backend = await open_backend(url)
    try:
        jobs = [charge(i) for i in range(1, 101)] + [waiting(i) for i in range(101, 104)]
        await backend.import_jobs("shop", ExportPage(jobs=jobs, logs={}, next_cursor=None))
    finally:
        await release_backend(backend)


@pytest.mark.timeout(120)  # three reports (Spark jobs, charts) and maybe the session's start
def test_export_then_report_gives_the_known_figures(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/history.db"
    asyncio.run(write_history(url))
    out = tmp_path / "history"
    assert export_history(url, out, spark) == 103
    columns = spark.read.parquet(str(out)).columns
    assert {"id", "queue", "name", "state", "wait_ms", "run_ms", "failed_reason"} <= set(columns)

    charge_figures, email = build_report(out, spark)
    assert (charge_figures.queue, charge_figures.name, charge_figures.jobs) == (
        "shop",
        "charge",
        100,
    )
    assert (charge_figures.completed, charge_figures.failed) == (90, 10)
    assert charge_figures.throughput_per_minute == 50.0  # 100 finished over two minutes
    assert charge_figures.wait_ms == (50, 95, 99)
    assert charge_figures.run_ms == (500, 950, 990)
    assert charge_figures.failure_rate == 0.1
    assert charge_figures.top_reasons == [("timeout", 6), ("card declined", 4)]
    assert (email.name, email.jobs, email.wait_ms, email.run_ms) == ("email", 3, None, None)
    assert email.failure_rate is None and email.throughput_per_minute == 0.0

    chart = tmp_path / "chart.png"
    assert main(["report", str(out), "--chart", str(chart)]) == 0
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert main(["report", str(out)]) == 0  # the default chart goes into the folder ...
    assert (out / "report.png").read_bytes().startswith(b"\x89PNG")
    assert main(["report", str(out)]) == 0  # ... and is not read as history next time
    printed = capsys.readouterr().out
    assert "50/95/99" in printed and "timeout (6)" in printed and "10.0%" in printed


MINUTE = 60_000
B0 = T0 - T0 % MINUTE  # 22:13 UTC: charge 1..33 finish in it, 34..83 in the next, 84..100 after


@pytest.mark.timeout(120)  # two timelines, a report and their charts
def test_the_timeline_counts_each_minute_and_names_the_failures(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/history.db"
    asyncio.run(write_history(url))
    out = tmp_path / "history"
    export_history(url, out, spark)

    timeline = build_timeline(out, spark)
    assert timeline.interval_ms == MINUTE
    assert timeline.points == {  # the waiting emails never finished: not in it
        "shop": [
            TimelinePoint(B0, 33, 3, (17, 32, 33), (170, 320, 330)),
            TimelinePoint(B0 + MINUTE, 50, 5, (58, 81, 83), (580, 810, 830)),
            TimelinePoint(B0 + 2 * MINUTE, 17, 2, (92, 100, 100), (920, 1000, 1000)),
        ]
    }
    assert timeline.reasons == {"shop": [("timeout", 6), ("card declined", 4)]}
    wider = build_timeline(out, spark, interval_ms=5 * MINUTE)
    # five-minute intervals from the epoch: 22:10 to 22:15 holds charge 1..83
    assert [(p.start_ms, p.finished, p.failed) for p in wider.points["shop"]] == [
        (B0 - 3 * MINUTE, 83, 8),
        (B0 + 2 * MINUTE, 17, 2),
    ]
    assert wider.per_minute(83) == 16.6

    page = tmp_path / "page.html"
    write_html(build_report(out, spark), timeline, page, "shop <history>")
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "<title>shop &lt;history&gt;</title>" in text
    assert text.count("<svg") == 1  # the chart, inline
    for outside in ("<script", "src=", "<link", "@import", "url(http", 'href="http'):
        assert outside not in text  # self-contained: nothing fetched
    assert '<td class="text">timeout</td><td>6</td>' in text
    assert '<td class="text">card declined</td><td>4</td>' in text
    for start, finished, failed, wait in (
        ("22:13", "33.0", "3.0", "17/32/33"),
        ("22:14", "50.0", "5.0", "58/81/83"),
        ("22:15", "17.0", "2.0", "92/100/100"),
    ):
        row = f'<td class="text">2023-11-14 {start}</td><td>{finished}</td><td>{failed}</td>'
        assert row + f"<td>{wait}</td>" in text
    assert "<td>50/95/99</td>" in text  # the per name table, as printed

    assert main(["report", str(out), "--interval", "1"]) == 0
    assert (out / "report.html").read_text().count("<svg") == 1
    assert (out / "report.png").read_bytes().startswith(b"\x89PNG")
    printed = capsys.readouterr().out
    assert "top failure reasons" in printed and "report.html" in printed


def test_the_interval_grows_with_the_span() -> None:
    assert choose_interval(0, 239 * MINUTE) == MINUTE
    assert choose_interval(0, 240 * MINUTE) == 5 * MINUTE
    assert choose_interval(0, 7 * 24 * 60 * MINUTE) == 60 * MINUTE
    assert choose_interval(0, 10**12) == 24 * 60 * MINUTE


def test_export_refuses_an_existing_folder_and_leaves_nothing_half_written(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/history.db"
    asyncio.run(write_history(url))
    (tmp_path / "taken").mkdir()
    with pytest.raises(MigrateError, match="taken"):
        export_history(url, tmp_path / "taken", spark)
    with pytest.raises(psyq.PsyqError, match="bogus"):
        export_history("bogus://x", tmp_path / "new", spark)
    assert not (tmp_path / "new").exists()
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())


async def jobs_of(url: str, queue: str) -> list[psyq.Job]:
    async with psyq.Queue(queue, connection=url) as target:
        return await target.get_jobs(["waiting"], asc=True)


def test_enqueue_a_csv_file_twice_adds_each_row_once(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "orders.csv"
    rows.write_text("id,name,amount,customer\no-1,bill,12.5,ann\no-2,bill,3,bob\no-3,refund,7,cy\n")
    url = f"sqlite:///{tmp_path}/jobs.db"
    argv = ["enqueue", "--from", str(rows), "--to", url, "--queue", "orders"]
    assert main(argv) == 0
    assert main(argv) == 0  # ids make a rerun skip what is there
    printed = capsys.readouterr()
    assert "enqueued 3 rows" in printed.out
    assert "enqueued 3/3 rows (orders)" in printed.err  # progress, off a terminal
    jobs = asyncio.run(jobs_of(url, "orders"))
    assert [(job.id, job.name, job.data) for job in jobs] == [
        ("o-1", "bill", {"amount": 12.5, "customer": "ann"}),
        ("o-2", "bill", {"amount": 3.0, "customer": "bob"}),
        ("o-3", "refund", {"amount": 7.0, "customer": "cy"}),
    ]


def test_enqueue_a_dataframe_with_a_data_column(spark: SparkSession, tmp_path: Path) -> None:
    frame = spark.createDataFrame(
        [(f'{{"n": {i}}}', '{"priority": 2}') for i in range(40)], "data string, opts string"
    )
    url = f"sqlite:///{tmp_path}/jobs.db"
    assert enqueue_dataframe(frame, url, "batch", name="work") == 40

    async def counts() -> dict[str, int]:
        async with psyq.Queue("batch", connection=url) as target:
            return await target.get_job_counts("waiting", "prioritized")

    assert asyncio.run(counts()) == {"waiting": 0, "prioritized": 40}


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (
            ["enqueue", "--from", "missing.csv", "--to", "sqlite:///j.db", "--queue", "q"],
            "missing.csv",
        ),
        (["enqueue", "--from", "rows.txt", "--to", "sqlite:///j.db", "--queue", "q"], "rows.txt"),
        (["report", "no-such-folder"], "no-such-folder"),
        (["enqueue", "--from", "fake.parquet", "--to", "sqlite:///j.db", "--queue", "q"], "fake"),
        (["enqueue", "--from", "rows.csv", "--to", "memory://", "--queue", "q"], "memory://"),
        (["export", "sqlite:///nope.db", "--out", "history"], "nope.db"),
    ],
)
def test_pipeline_bad_input_exits_2_naming_the_value(
    spark: SparkSession,
    argv: list[str],
    named: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.txt").write_text("name\nx\n")
    (tmp_path / "rows.csv").write_text("name\nx\n")
    (tmp_path / "fake.parquet").write_text("not parquet")
    assert main(argv) == 2
    assert named in capsys.readouterr().err


class Steps:
    """An observer recording the plan's total and every step."""

    def __init__(self) -> None:
        self.total = 0
        self.steps: list[int] = []

    def planned(self, plans: list[QueuePlan]) -> None:
        self.total = sum(plan.total for plan in plans)

    def moved(self, queue: str, jobs: int) -> None:
        self.steps.append(jobs)


def test_enqueue_into_a_file_keeps_the_row_order_in_at_most_ten_steps(
    spark: SparkSession, tmp_path: Path
) -> None:
    frame = spark.range(0, 60, 1, 12).selectExpr(  # 12 partitions of 5 rows, in order
        "concat('r', lpad(cast(id AS string), 2, '0')) AS id", "'{}' AS data"
    )
    ordered = [f"r{i:02d}" for i in range(60)]
    url = f"sqlite:///{tmp_path}/jobs.db"
    steps = Steps()
    assert enqueue_dataframe(frame, url, "rows", name="n", observer=steps) == 60
    assert steps.total == 60 and sum(steps.steps) == 60 and 1 < len(steps.steps) <= 10
    assert [job.id for job in asyncio.run(jobs_of(url, "rows"))] == ordered
