"""The image test's helpers: the build (`scripts/image build`, as `make image` runs it), the
engine it chose (`scripts/image engine ...`: docker, or podman with the script's own
settings), containers started on the host's network, and docs/operations.md's compose file.

A machine where neither docker nor podman can run (the script exits 3 saying what is
missing) skips the test with that reason; PSYQ_REQUIRE_SERVICES=1 (CI) makes it a failure."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "image"
CANNOT_RUN = 3  # scripts/image: no engine, or a tool the Debian base needs is missing


def engine(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The engine the script picks, with `args`; its output as text."""
    return subprocess.run(
        [str(SCRIPT), "engine", *args], capture_output=True, text=True, timeout=timeout
    )


def build(tag: str) -> float:
    """Build `tag` as `make image` does; the seconds it took. Skips (or fails, under
    PSYQ_REQUIRE_SERVICES=1) where no container can run here."""
    env = {**os.environ, "PSYQ_IMAGE_PIP": sys.executable}
    began = time.monotonic()
    done = subprocess.run(
        [str(SCRIPT), "build", tag], capture_output=True, text=True, env=env, timeout=900
    )
    took = time.monotonic() - began
    print(done.stderr[-2000:])
    if done.returncode == CANNOT_RUN:
        reason = done.stderr.strip().splitlines()[-1]
        if os.environ.get("PSYQ_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{reason} (PSYQ_REQUIRE_SERVICES=1)")
        pytest.skip(reason)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    return took


def remove(tag: str, volume: str) -> None:
    engine("image", "rm", "-f", tag)
    engine("volume", "rm", "-f", volume)


def compose_service(name: str) -> dict[str, Any]:
    """The service `name` of docs/operations.md's compose file."""
    text = (ROOT / "docs" / "operations.md").read_text("utf-8")
    block = re.search(r"### docker compose\n+```yaml\n(.*?)```", text, re.S)
    assert block is not None, "docs/operations.md has no compose file"
    safe_load: Callable[[str], Any] = importlib.import_module("yaml").safe_load
    service: dict[str, Any] = safe_load(block.group(1))["services"][name]
    return service


def status(url: str) -> int:
    """The HTTP status of GET `url` (0: nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status)
    except OSError:
        return 0


@dataclass
class Container:
    """A container of the image on the host's network: `port` and `health` are the psyq://
    and probe ports it was told to listen on (free ones on 127.0.0.1)."""

    name: str
    port: int
    health: int

    def probe(self, path: str) -> int:
        return status(f"http://127.0.0.1:{self.health}{path}")

    def running(self) -> bool:
        shown = engine("inspect", "--format", "{{.State.Running}}", self.name)
        return shown.stdout.strip() == "true"

    def exec(self, *args: str) -> subprocess.CompletedProcess[str]:
        return engine("exec", self.name, *args)

    def terminate(self, grace: int) -> int:
        """SIGTERM, then its exit status once it stopped (SIGKILL after `grace` s)."""
        stopped = engine("stop", "--time", str(grace), self.name, timeout=grace + 30)
        assert stopped.returncode == 0, stopped.stderr
        waited = engine("wait", self.name)
        return int(waited.stdout.strip().splitlines()[-1])

    def logs(self) -> str:
        shown = engine("logs", self.name)
        return shown.stdout + shown.stderr

    def remove(self) -> None:
        engine("rm", "-f", self.name)


def start(tag: str, name: str, volume: str, env: dict[str, str], argv: list[str]) -> None:
    """Start `name` from `tag`, detached, on the host's network, `volume` on /data."""
    envs = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    args = ["run", "-d", "--name", name, "--network", "host", "-v", f"{volume}:/data"]
    started = engine(*args, *envs, tag, *argv)
    assert started.returncode == 0, started.stderr
