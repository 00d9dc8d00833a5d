"""A standalone Spark cluster for the tests: one Master and one Worker (2 cores, 1 GiB)
started with `spark-class` from the installed pyspark wheel, bound to 127.0.0.1 on free
ports, their logs and the worker's folders in a temp dir. One per test run, stopped at its
end (`stop` ends only the two processes it started)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from tests.polling import eventually_sync

SPARK_HOME = Path(pyspark.__file__).parent
# The daemons and executors only schedule and carry small results: the quick compiler and a
# small heap start them sooner on a shared CI machine.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
START_TIMEOUT = 90.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Cluster:
    folder: Path
    master_url: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf_dir(self) -> Path:
        """SPARK_CONF_DIR for a driver on this cluster (small executors, errors-only logs)."""
        return self.folder / "conf"

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(SPARK_HOME),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.folder),
            SPARK_CONF_DIR=str(self.conf_dir),
            SPARK_DAEMON_MEMORY="256m",
            SPARK_DAEMON_JAVA_OPTS=JVM_OPTIONS,
        )
        return env

    def start(self) -> None:
        self.conf_dir.mkdir()
        (self.conf_dir / "spark-defaults.conf").write_text(
            "spark.executor.memory 512m\n"
            f"spark.executor.extraJavaOptions {JVM_OPTIONS}\n"
            "spark.ui.enabled false\n"
        )
        port = free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        master += ["--port", str(port), "--webui-port", str(free_port())]
        self._launch("master", master, f"Starting Spark master at {self.master_url}")
        worker = ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
        worker += ["--cores", "2", "--memory", "1g", "--webui-port", str(free_port())]
        worker += ["--work-dir", str(self.folder / "work"), self.master_url]
        self._launch("worker", worker, "Successfully registered with master")

    def _launch(self, name: str, argv: list[str], ready: str) -> None:
        log = self.folder / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,
            )
        self.processes.append(process)

        def started() -> bool:
            if ready in log.read_text(errors="replace"):
                return True
            if process.poll() is not None:
                raise RuntimeError(not_started(name, log))
            return False

        try:
            eventually_sync(started, f"the Spark {name} started", START_TIMEOUT, interval=0.1)
        except AssertionError as late:
            raise RuntimeError(not_started(name, log)) from late

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()


def not_started(name: str, log: Path) -> str:
    """Why a Spark daemon is not up: the end of its log."""
    tail = log.read_text(errors="replace")[-3000:]
    return f"the Spark {name} did not start ({log}):\n{tail}"
