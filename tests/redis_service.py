"""A redis-server for the tests: one per test run, started from PATH on a free port in a temp
dir (no persistence), killed at exit; likewise a local 3-node Redis Cluster. Suites
register the fixtures by importing them."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.polling import eventually_sync

__all__ = [
    "FailoverCluster",
    "RedisProcess",
    "SentinelGroup",
    "failover_cluster",
    "free_ports",
    "redis_binary",
    "redis_cluster",
    "redis_process",
    "redis_server",
    "sentinel_group",
    "wait_port",
]


def redis_binary(name: str) -> str:
    """The path of `name` (redis-server, redis-cli) on PATH; else the test fails saying what
    to install, or is skipped with that reason when PSYQ_REQUIRE_SERVICES=0."""
    path = shutil.which(name)
    if path is not None:
        return path
    reason = f"{name} is not on the PATH (apt-get install redis-server)"
    if os.environ.get("PSYQ_REQUIRE_SERVICES", "1") != "0":
        pytest.fail(f"{reason}; or set PSYQ_REQUIRE_SERVICES=0 to skip these tests")
    pytest.skip(reason)


class RedisProcess:
    """A redis-server of one test alone on a free port, restartable on the same port and
    directory (append-only file, fsync always, so what it acknowledged survives a restart).
    `extra` adds arguments (a replica's `--replicaof`, a sentinel's `--sentinel`)."""

    def __init__(self, folder: Path, extra: tuple[str, ...] = (), port: int = 0) -> None:
        self.binary = redis_binary("redis-server")
        self.folder = folder
        self.extra = extra
        self.port = port or free_ports(1)[0]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [self.binary, *self.extra, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--dir", str(self.folder), "--save", "", "--appendonly", "yes"]
        args += ["--appendfsync", "always"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server with `sig` (SIGTERM: a clean shutdown; SIGKILL: a crash)."""
        if self.proc is not None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def redis_process(tmp_path: Path) -> Iterator[RedisProcess]:
    """A started `RedisProcess` of this test alone, killed at its end."""
    server = RedisProcess(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop(signal.SIGKILL)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """Start one redis-server from PATH for the whole run (on first use), on a free port."""
    started: list[tuple[subprocess.Popen[bytes], str]] = []

    def start(binary: str) -> str:
        if not started:
            folder = tmp_path_factory.mktemp("redis")
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder)]
            args += ["--save", "", "--appendonly", "no"]
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            started.append((proc, f"redis://127.0.0.1:{port}/0"))
            wait_port(port)
        return started[0][1]

    yield start
    for proc, _ in started:
        proc.kill()
        proc.wait()


def wait_port(port: int, timeout: float = 10) -> None:
    def accepts() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
        except OSError:
            return False
        return True

    eventually_sync(accepts, f"a server listening on port {port}", timeout)


CLUSTER_NODES = 3


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Callable[[], str]]:
    """`start()` -> the URL of a local 3-node Redis Cluster (`redis+cluster://...`), started
    on first use and shared by the whole run: redis-server processes on free ports with no
    persistence, their cluster files in a temp dir removed at the end (or the URL in
    PSYQ_TEST_REDIS_CLUSTER_URL). Skips (saying why) when redis-server or redis-cli is not
    on PATH."""
    started: list[str] = []
    procs: list[subprocess.Popen[bytes]] = []
    folder = tempfile.mkdtemp(prefix="psyq-redis-cluster-")

    def start() -> str:
        if not started and os.environ.get("PSYQ_TEST_REDIS_CLUSTER_URL"):
            started.append(os.environ["PSYQ_TEST_REDIS_CLUSTER_URL"])
        if not started:
            server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
            if server is None or cli is None:
                pytest.skip("a Redis Cluster test needs redis-server and redis-cli on PATH")
            ports = free_ports(2 * CLUSTER_NODES)
            for port, bus_port in zip(ports[::2], ports[1::2], strict=True):
                procs.append(_start_cluster_node(server, port, bus_port, folder))
            _create_cluster(cli, ports[::2])
            started.append(f"redis+cluster://127.0.0.1:{ports[0]}/0")
        return started[0]

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
    shutil.rmtree(folder, ignore_errors=True)


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1 (held open together while chosen)."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def _start_cluster_node(
    binary: str, port: int, bus_port: int, folder: str, *extra: str
) -> subprocess.Popen[bytes]:
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", folder]
    args += ["--save", "", "--appendonly", "no", "--cluster-enabled", "yes"]
    args += ["--cluster-config-file", f"nodes-{port}.conf", "--cluster-port", str(bus_port)]
    args += extra
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc


def _create_cluster(cli: str, ports: list[int], timeout: float = 20, replicas: int = 0) -> None:
    """Assign the slots over `ports` (`replicas` replicas per primary) and wait until every
    node reports the cluster ok."""
    nodes = [f"127.0.0.1:{port}" for port in ports]
    subprocess.run(
        [cli, "--cluster", "create", *nodes, "--cluster-replicas", str(replicas), "--cluster-yes"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=timeout,
    )
    eventually_sync(
        lambda: all(b"cluster_state:ok" in _cluster_info(cli, port) for port in ports),
        f"the Redis Cluster on ports {ports} ok",
        timeout,
        interval=0.05,
    )


def _cluster_info(cli: str, port: int) -> bytes:
    return subprocess.run(
        [cli, "-p", str(port), "cluster", "info"], capture_output=True, timeout=5
    ).stdout


class FailoverCluster:
    """A Redis Cluster of one test alone: 3 primaries with a replica each, on free ports, a
    short `cluster-node-timeout` (1000 ms) so a replica takes over soon after its primary dies."""

    NODE_TIMEOUT_MS = 1000

    def __init__(self, folder: Path) -> None:
        self.server, self.cli = redis_binary("redis-server"), redis_binary("redis-cli")
        self.folder = str(folder)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.url = ""  # once started

    @property
    def seed(self) -> int:
        """The port of the node the URL names (the first started)."""
        return next(iter(self.procs))

    def primaries(self) -> list[int]:
        """The ports of the primaries serving slots, as the first live node sees them."""
        out = subprocess.run(
            [self.cli, "-p", str(next(iter(self.procs))), "cluster", "nodes"],
            capture_output=True,
            timeout=5,
        ).stdout.decode()
        return [
            int(fields[1].split("@")[0].rsplit(":", 1)[1])
            for fields in (line.split() for line in out.splitlines())
            if "master" in fields[2] and "fail" not in fields[2] and len(fields) > 8
        ]

    def start(self) -> str:
        ports = free_ports(12)
        timeout = ("--cluster-node-timeout", str(self.NODE_TIMEOUT_MS))
        for port, bus_port in zip(ports[::2], ports[1::2], strict=True):
            folder = Path(self.folder, str(port))  # a replica's sync writes its own files
            folder.mkdir()
            node = _start_cluster_node(self.server, port, bus_port, str(folder), *timeout)
            self.procs[port] = node
        _create_cluster(self.cli, ports[::2], replicas=1)
        self._wait_synced(ports[0])
        return f"redis+cluster://127.0.0.1:{ports[0]}/0"

    def _wait_synced(self, port: int, timeout: float = 20) -> None:
        """Wait until every node is online (each replica's first sync is over)."""
        eventually_sync(
            lambda: self._shards(port).count("\nonline") >= len(self.procs),
            "every node of the cluster online",
            timeout,
            interval=0.05,
        )

    def _shards(self, asking: int) -> str:
        return subprocess.run(
            [self.cli, "-p", str(asking), "cluster", "shards"], capture_output=True, timeout=5
        ).stdout.decode()

    def primary_of(self, slot: int, asking: int) -> int:
        """The port of the primary serving `slot`, as the node on `asking` sees it."""
        return _primary_in_shards(self._shards(asking), slot)

    def replica_of(self, slot: int, asking: int) -> int:
        """The port of a replica in the shard serving `slot` (0: none)."""
        return _replica_in_shards(self._shards(asking), slot)

    def replication_offset(self, port: int) -> int:
        """How far into its shard's replication stream the node on `port` is: on a primary,
        what it has written; on a replica, what it has received of that."""
        out = subprocess.run(
            [self.cli, "-p", str(port), "info", "replication"], capture_output=True, timeout=5
        ).stdout.decode()
        for line in out.splitlines():
            key, _, value = line.strip().partition(":")
            if key == "master_repl_offset":
                return int(value)
        return -1  # not answering (yet)

    def take_over(self, replica: int) -> None:
        """Make `replica` its shard's primary now (CLUSTER FAILOVER TAKEOVER: no vote)."""
        subprocess.run(
            [self.cli, "-p", str(replica), "cluster", "failover", "takeover"],
            capture_output=True,
            timeout=5,
        )

    def kill(self, port: int) -> None:
        proc = self.procs.pop(port)
        proc.kill()
        proc.wait()

    def stop(self) -> None:
        for port in list(self.procs):
            self.kill(port)


def _primary_in_shards(out: str, slot: int) -> int:
    """The port of the healthy primary of `slot` in redis-cli's CLUSTER SHARDS output
    (one value a line: slots, then nodes' fields), 0 when none serves it yet."""
    lines = [line.strip() for line in out.splitlines()]
    port = 0
    for index, line in enumerate(lines):
        if line == "slots" and index + 2 < len(lines):
            ranges = _slot_ranges(lines, index + 1)
            serving = any(low <= slot <= high for low, high in ranges)
        elif line == "port":
            node_port = int(lines[index + 1])
        elif line == "role" and lines[index + 1] == "master" and serving:
            health = lines[lines.index("health", index) + 1]
            if health == "online":
                port = node_port
    return port


def _replica_in_shards(out: str, slot: int) -> int:
    lines = [line.strip() for line in out.splitlines()]
    serving, node_port = False, 0
    for index, line in enumerate(lines):
        if line == "slots":
            serving = any(low <= slot <= high for low, high in _slot_ranges(lines, index + 1))
        elif line == "port":
            node_port = int(lines[index + 1])
        elif line == "role" and lines[index + 1] == "replica" and serving:
            return node_port
    return 0


def _slot_ranges(lines: list[str], start: int) -> list[tuple[int, int]]:
    numbers = []
    for line in lines[start:]:
        if not line.isdigit():
            break
        numbers.append(int(line))
    return list(zip(numbers[::2], numbers[1::2], strict=False))


@pytest.fixture
def failover_cluster(tmp_path: Path) -> Iterator[FailoverCluster]:
    cluster = FailoverCluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()


class SentinelGroup:
    """A primary, a replica and three Sentinels (quorum 2, `down-after-milliseconds`
    500) of one test alone, on 127.0.0.1 and free ports: `url()` names them all."""

    SERVICE = "mymaster"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        ports = free_ports(5)
        sync = ("--repl-diskless-sync-delay", "0")  # a replica's first sync at once
        self.primary = self._node("primary", ports[0], sync)
        replica_of = ("--replicaof", "127.0.0.1", str(ports[0]))
        self.replica = self._node("replica", ports[1], (*sync, *replica_of))
        self.sentinel_ports = ports[2:]
        self.sentinels: list[subprocess.Popen[bytes]] = []

    def _node(self, name: str, port: int, extra: tuple[str, ...]) -> RedisProcess:
        folder = self.folder / name
        folder.mkdir()
        return RedisProcess(folder, extra, port)

    def start(self) -> None:
        self.primary.start()
        self.replica.start()
        self.wait_synced(self.replica)
        for port in self.sentinel_ports:
            self.sentinels.append(self._start_sentinel(port))
        for port in self.sentinel_ports:
            wait_port(port)

    def _start_sentinel(self, port: int) -> subprocess.Popen[bytes]:
        folder = self.folder / f"sentinel-{port}"
        folder.mkdir()
        conf = folder / "sentinel.conf"  # Sentinel rewrites its file: one each
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
            f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.primary.port} 2\n"
            f"sentinel down-after-milliseconds {self.SERVICE} 500\n"
            f"sentinel failover-timeout {self.SERVICE} 3000\n"
        )
        binary = self.primary.binary
        return subprocess.Popen(
            [binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def wait_synced(self, replica: RedisProcess, timeout: float = 20) -> None:
        """Wait until `replica`'s link to its primary is up (its first sync is over)."""
        cli = redis_binary("redis-cli")
        info = [cli, "-p", str(replica.port), "info", "replication"]
        eventually_sync(
            lambda: (
                b"master_link_status:up"
                in subprocess.run(info, capture_output=True, timeout=5).stdout
            ),
            f"the replica on port {replica.port} synced",
            timeout,
            interval=0.05,
        )

    def url(self, query: str = "") -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.SERVICE}/0{query}"

    def primary_port(self) -> int:
        """The primary's port as every Sentinel names it, none of them failing over (0:
        not so yet). A Sentinel still failing over turns the old primary back into a
        primary when it comes back, so it is started again only once they all agree."""
        named = {self._primary_seen_by(port) for port in self.sentinel_ports}
        return named.pop() if len(named) == 1 else 0

    def _primary_seen_by(self, port: int) -> int:
        """The port of the primary the Sentinel on `port` names, once no failover of its
        is under way (0 before)."""
        cli = redis_binary("redis-cli")
        ask = [cli, "-p", str(port), "sentinel"]
        fields = subprocess.run([*ask, "master", self.SERVICE], capture_output=True, timeout=5)
        lines = fields.stdout.decode().split()
        flags = lines[lines.index("flags") + 1] if "flags" in lines else ""
        if flags != "master":  # s_down, o_down, failover_in_progress, ...
            return 0
        return int(lines[lines.index("port") + 1])

    def stop(self) -> None:
        for proc in self.sentinels:
            proc.kill()
            proc.wait()
        self.primary.stop(signal.SIGKILL)
        self.replica.stop(signal.SIGKILL)


@pytest.fixture
def sentinel_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    group = SentinelGroup(tmp_path)
    try:
        group.start()
        yield group
    finally:
        group.stop()
