"""The Redis servers the cluster table starts (`--backend redis-cluster`): one redis-server,
and a local Redis Cluster of 3 primaries, each node on free ports of 127.0.0.1, no
persistence, the same binary and settings, stopped when the block ends. Both run beside
each other for the whole run, so each row is measured on both within minutes."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.harness.processes import free_port, stop, wait_for_port

PRIMARIES = 3


@dataclass(frozen=True)
class RedisNodes:
    """What was started: psyq's URL, each node's port and pid (the primaries)."""

    url: str
    ports: list[int]
    pids: list[int]

    @property
    def cluster(self) -> bool:
        return self.url.startswith("redis+cluster://")

    def peer_env(self) -> dict[str, str]:
        """A peer's environment: REDIS_URL (the first node), and on a cluster every
        primary as REDIS_CLUSTER=host:port,... (bench/peers/bullmq/bench.mjs)."""
        env = {"REDIS_URL": f"redis://127.0.0.1:{self.ports[0]}/0"}
        if self.cluster:
            env["REDIS_CLUSTER"] = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return env


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not on the PATH (apt-get install redis-server)")
    return path


def node_command(folder: Path, port: int, cluster: bool) -> list[str]:
    args = [binary("redis-server"), "--port", str(port), "--bind", "127.0.0.1"]
    args += ["--dir", str(folder), "--save", "", "--appendonly", "no"]
    if cluster:  # the bus port chosen too: the default, port + 10000, may not exist
        args += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf"]
        args += ["--cluster-port", str(free_port())]
    return args


@contextlib.contextmanager
def redis_nodes(folder: Path, cluster: bool) -> Iterator[RedisNodes]:
    """One redis-server, or a cluster of PRIMARIES nodes (`redis-cli --cluster create`,
    waited for until every node says cluster_state:ok), until the block ends."""
    count = PRIMARIES if cluster else 1
    ports = [free_port() for _ in range(count)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            home = folder / f"redis-{port}"
            home.mkdir()
            proc = subprocess.Popen(
                node_command(home, port, cluster),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(proc)
            wait_for_port(port, proc)
        scheme = "redis"
        if cluster:
            create_cluster(ports)
            scheme = "redis+cluster"
        yield RedisNodes(f"{scheme}://127.0.0.1:{ports[0]}/0", ports, [p.pid for p in procs])
    finally:
        for proc in procs:
            stop(proc)


def create_cluster(ports: list[int], timeout: float = 30) -> None:
    nodes = [f"127.0.0.1:{port}" for port in ports]
    cli = binary("redis-cli")
    create = [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"]
    subprocess.run(create, check=True, capture_output=True, timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        infos = [
            subprocess.run([cli, "-p", str(port), "cluster", "info"], capture_output=True).stdout
            for port in ports
        ]
        if all(b"cluster_state:ok" in info for info in infos):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the Redis Cluster on ports {ports} was not ok within {timeout} s")
