"""What a stretch of work cost a Postgres server on this host, per job: write transactions,
WAL bytes, and CPU (this process's, and the whole host's). Plain asyncpg and /proc, so a
peer's script imports it from its own virtualenv, as it imports peerlib.py
(bench/studies/pg_costs.py, bench/peers/pgqueuer/costs.py).

Write transactions: the server's next transaction id before and after (an id is given to
each transaction that writes, committed or not; read-only ones take none, and reading it
takes none). WAL bytes: the WAL position before and after. Host CPU: busy time of every
core from /proc/stat, so the server's processes are counted even when they exit before the
end; on a quiet host, host CPU less this process's CPU is the server's share.
"""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["per_job", "snapshot"]

TICKS = os.sysconf("SC_CLK_TCK")
_STATE = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_lsn()"


def _host_busy_s() -> float:
    """Seconds of CPU the host's cores spent on anything but idle and I/O wait."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / TICKS


async def snapshot(conn: Any) -> dict[str, float]:
    """The counters now, read on `conn` (an asyncpg connection to the server measured)."""
    xid, lsn = await conn.fetchrow(_STATE)
    wal = await conn.fetchval("SELECT $1::pg_lsn - '0/0'::pg_lsn", lsn)
    return {
        "xid": float(xid),
        "wal": float(wal),
        "host_cpu": _host_busy_s(),
        "own_cpu": time.process_time(),
        "wall": time.perf_counter(),
    }


def per_job(before: dict[str, float], after: dict[str, float], jobs: int) -> dict[str, float]:
    """Per job between two snapshots: write transactions, WAL bytes, CPU µs (host, this
    process, and the rest: the server on a quiet host), and the rate."""
    host = (after["host_cpu"] - before["host_cpu"]) / jobs * 1e6
    own = (after["own_cpu"] - before["own_cpu"]) / jobs * 1e6
    return {
        "jobs_per_s": round(jobs / (after["wall"] - before["wall"])),
        "write_tx_per_job": round((after["xid"] - before["xid"]) / jobs, 3),
        "wal_bytes_per_job": round((after["wal"] - before["wal"]) / jobs),
        "host_cpu_us_per_job": round(host, 1),
        "client_cpu_us_per_job": round(own, 1),
        "rest_cpu_us_per_job": round(host - own, 1),
    }
