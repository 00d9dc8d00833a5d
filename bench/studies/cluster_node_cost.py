"""What Redis itself spends per command in cluster mode, beside one server: the floor
under the cluster table's "Redis CPU per job per node" column (issue 55).

    python -m bench.studies.cluster_node_cost [--requests 200000] [--rounds 3]

Starts a private redis-server and a private 3-primary Redis Cluster (bench/harness/
redis_nodes.py: the same binary and settings) and runs the same commands with
`redis-benchmark` (pipelined 20 deep, one connection) on the one server and on the primary
that owns the keys' hash tag: plain commands a job's life uses, and one Lua script running
twelve of them (every psyq and BullMQ call is such a script). Printed per row: Redis's CPU
per command (INFO cpu, user + system, in microseconds) on each side and cluster / one,
medians of `--rounds` rounds, the sides taking turns. No psyq code runs: what differs is
Redis's own work in cluster mode.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import tempfile
from pathlib import Path

from redis import Redis
from redis.crc import key_slot

from bench.harness.redis_nodes import binary, redis_nodes

TAG = "{bench}"
SCRIPT = (  # twelve commands over one tag's keys, as a job's add, take and settle make
    "local id = redis.call('INCR', KEYS[1]) "
    "local key = KEYS[1] .. ':' .. id "
    "redis.call('HSET', key, 'name', 'j', 'data', ARGV[1], 'ts', id) "
    "redis.call('LPUSH', KEYS[1] .. ':wait', id) "
    "redis.call('XADD', KEYS[1] .. ':ev', 'MAXLEN', '~', '1000', '*', 'event', 'waiting') "
    "local got = redis.call('RPOPLPUSH', KEYS[1] .. ':wait', KEYS[1] .. ':active') "
    "redis.call('SET', key .. ':lock', 'token', 'PX', 30000) "
    "redis.call('HINCRBY', key, 'attemptsStarted', 1) "
    "redis.call('LREM', KEYS[1] .. ':active', -1, got) "
    "redis.call('DEL', key .. ':lock') "
    "redis.call('ZADD', KEYS[1] .. ':done', id, id) "
    "redis.call('HSET', key, 'finishedOn', id) "
    "redis.call('XADD', KEYS[1] .. ':ev', 'MAXLEN', '~', '1000', '*', 'event', 'completed') "
    "return got"
)
ROWS: dict[str, tuple[list[str], int]] = {  # row -> (command, Redis commands it runs)
    "HSET": (["HSET", f"{TAG}h:__rand_int__", "f", "v"], 1),
    "LPUSH + RPOP": (["LPUSH", f"{TAG}l", "x"], 1),
    "ZADD": (["ZADD", f"{TAG}z", "__rand_int__", "m:__rand_int__"], 1),
    "XADD": (["XADD", f"{TAG}s", "MAXLEN", "~", "1000", "*", "e", "v"], 1),
    "a script of 12": (["EVAL", SCRIPT, "1", f"{TAG}job", "x" * 60], 13),
}


def cpu_us(port: int) -> float:
    with Redis(port=port) as client:
        info = client.info("cpu")
    return float(info["used_cpu_user"] + info["used_cpu_sys"]) * 1e6


def owner(ports: list[int]) -> int:
    """The primary whose slots hold TAG's keys."""
    slot = key_slot(TAG.encode())
    with Redis(port=ports[0]) as client:
        for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return int(primary[1])
    raise RuntimeError(f"no primary holds slot {slot}")


def per_command(port: int, command: list[str], counted: int, requests: int) -> float:
    """Redis CPU µs per command of `requests` pipelined runs of `command`."""
    before = cpu_us(port)
    args = [binary("redis-benchmark"), "-p", str(port), "-n", str(requests), "-P", "20"]
    args += ["-c", "1", "-r", "100000", "-q", *command]
    subprocess.run(args, check=True, capture_output=True)
    if command[0] == "LPUSH":  # the pushed list drained again, so the row is push + pop
        subprocess.run([*args[: -len(command)], "RPOP", f"{TAG}l"], check=True, capture_output=True)
        requests *= 2
    with Redis(port=port) as client:
        client.flushall()
    return (cpu_us(port) - before) / (requests * counted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    found: dict[str, dict[str, list[float]]] = {row: {"one": [], "cluster": []} for row in ROWS}
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        one = stack.enter_context(redis_nodes(folder, False))
        clustered = stack.enter_context(redis_nodes(folder, True))
        ports = {"one": one.ports[0], "cluster": owner(clustered.ports)}
        for _ in range(options.rounds):
            for row, (command, counted) in ROWS.items():
                for side, port in ports.items():
                    cost = per_command(port, command, counted, options.requests)
                    found[row][side].append(cost)
    print("| row | Redis CPU µs per command: one server | cluster primary | cluster / one |")
    print("|---|---:|---:|---:|")
    for row, sides in found.items():
        one_us, cluster_us = (statistics.median(sides[s]) for s in ("one", "cluster"))
        print(f"| {row} | {one_us:.3f} | {cluster_us:.3f} | {cluster_us / one_us:.2f}x |")


if __name__ == "__main__":
    main()
