"""The container image (Dockerfile): it builds from the repository and its `psyq` runs
there, as a user that is not root. Docker must reach the base image: on a machine where it
cannot (no engine, no registry), the build test is skipped, saying which."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def _base_image() -> str:
    python = re.search(r"^ARG PYTHON=(\S+)", DOCKERFILE, re.M)
    assert python is not None
    return f"python:{python.group(1)}-slim"


def _docker_or_skip() -> str:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI on PATH: the image cannot be built here")
    if subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("no Docker engine answers: the image cannot be built here")
    base = _base_image()
    have = subprocess.run([docker, "image", "inspect", base], capture_output=True, timeout=30)
    if have.returncode != 0:
        pulled = subprocess.run([docker, "pull", base], capture_output=True, timeout=300)
        if pulled.returncode != 0:
            reason = pulled.stderr.decode(errors="replace").strip()[-300:]
            pytest.skip(f"the base image {base} is not available ({reason})")
    return docker


def test_the_image_installs_the_server_extra_as_a_user_that_is_not_root() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "server" in extras["optional-dependencies"]
    assert '"psyq[server]"' in DOCKERFILE
    users = re.findall(r"^USER (\S+)", DOCKERFILE, re.M)
    assert users and users[-1] not in ("root", "0")


@pytest.mark.timeout(900)  # a first build downloads every wheel
def test_the_image_builds_and_runs_psyq() -> None:
    docker = _docker_or_skip()
    tag = f"psyq-test:{uuid.uuid4().hex[:8]}"
    build = subprocess.run(
        [docker, "build", "-t", tag, str(ROOT)], capture_output=True, text=True, timeout=850
    )
    assert build.returncode == 0, build.stderr[-3000:]
    try:
        ran = subprocess.run(
            [docker, "run", "--rm", tag, "check", "memory://"], capture_output=True, text=True
        )
        assert ran.returncode == 0 and "answers" in ran.stdout, ran.stderr
        whoami = subprocess.run(
            [docker, "run", "--rm", "--entrypoint", "id", tag, "-u"], capture_output=True
        )
        assert whoami.stdout.strip() == b"10001"
    finally:
        subprocess.run([docker, "image", "rm", "-f", tag], capture_output=True)
