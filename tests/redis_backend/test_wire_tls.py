"""The lean wire over TLS: `rediss://` and `rediss+cluster://` script calls go over psyq's
own connections (one per server, one per primary), with redis-py's `ssl_*` URL options
(here the test's own CA); a certificate the client does not trust is refused. The servers
are the tests' own: a TLS-only redis-server, and a TLS-only 3-primary cluster
(`tls-cluster`)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import psyq
from psyq.backends.redis.cluster_wire import ClusterWire
from psyq.backends.redis.wire import WireScripts, wire_address
from tests.polling import eventually, eventually_sync
from tests.redis_service import free_ports, redis_binary, wait_port


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the TLS tests need the openssl binary to make a certificate")
    folder = tmp_path_factory.mktemp("redis-tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj"]
    names = ["/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
    files = ["-keyout", str(key), "-out", str(cert)]
    subprocess.run([openssl, *request, *names, *files], check=True, capture_output=True)
    return cert, key


def tls_node(
    folder: Path, port: int, cert: Path, key: Path, *extra: str
) -> subprocess.Popen[bytes]:
    args = [redis_binary("redis-server"), "--port", "0", "--tls-port", str(port)]
    args += ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    args += ["--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"]
    args += ["--bind", "127.0.0.1", "--dir", str(folder), "--save", "", *extra]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc


@pytest.fixture(scope="module")
def tls_url(
    certificate: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    cert, key = certificate
    [port] = free_ports(1)
    proc = tls_node(tmp_path_factory.mktemp("tls-server"), port, cert, key)
    try:
        yield f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={cert}"
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def tls_cluster_url(
    certificate: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    cert, key = certificate
    cli = redis_binary("redis-cli")
    folder = tmp_path_factory.mktemp("tls-cluster")
    ports = free_ports(6)
    procs = []
    try:
        for port, bus in zip(ports[::2], ports[1::2], strict=True):
            extra = ["--cluster-enabled", "yes", "--cluster-port", str(bus), "--tls-cluster", "yes"]
            extra += ["--cluster-config-file", f"nodes-{port}.conf"]
            procs.append(tls_node(folder, port, cert, key, *extra))
        tls = [cli, "--tls", "--cacert", str(cert)]
        nodes = [f"127.0.0.1:{port}" for port in ports[::2]]
        create = [*tls, "--cluster", "create", *nodes, "--cluster-yes"]
        subprocess.run(create, check=True, capture_output=True, timeout=20)

        def ok(port: int) -> bool:
            info = [*tls, "-p", str(port), "cluster", "info"]
            return b"cluster_state:ok" in subprocess.run(info, capture_output=True).stdout

        eventually_sync(lambda: all(ok(p) for p in ports[::2]), "the TLS cluster ok", 20, 0.05)
        yield f"rediss+cluster://127.0.0.1:{ports[0]}/0?ssl_ca_certs={cert}"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_rediss_urls_take_the_lean_path_with_their_tls_options() -> None:
    address = wire_address("rediss://h:7/0?ssl_cert_reqs=none")
    assert address is not None and address["ssl"] is not None
    assert address["ssl"].check_hostname is False  # as redis-py reads `ssl_cert_reqs=none`
    assert wire_address("redis://h:7/0")["ssl"] is None  # type: ignore[index]
    assert wire_address("redis://h:7/0?ssl_ca_certs=x") is None  # TLS options without TLS


async def test_jobs_run_over_tls_on_one_server(tls_url: str, queue_name: str) -> None:
    async with psyq.Queue(queue_name, connection=tls_url) as queue:
        await queue.add_bulk([{"name": "j", "data": n} for n in range(20)])
        backend = await queue._open()
        assert isinstance(backend._wire, WireScripts)  # type: ignore[attr-defined]
        done: list[int] = []
        worker = psyq.Worker(queue_name, lambda job: done.append(job.data), connection=tls_url)
        try:

            async def completed() -> bool:
                return (await queue.get_job_counts("completed"))["completed"] == 20

            await eventually(completed, "every job completed over TLS", 20)
        finally:
            await worker.close()
        assert sorted(done) == list(range(20))


async def test_jobs_run_over_tls_on_a_cluster(tls_cluster_url: str) -> None:
    names = [f"{{t{n}}}q" for n in range(6)]  # hash tags over the 3 primaries
    for name in names:
        async with psyq.Queue(name, connection=tls_cluster_url) as queue:
            job = await queue.add("j", {"queue": name})
            backend = await queue._open()
            wire = backend._wire  # type: ignore[attr-defined]
            assert isinstance(wire, ClusterWire)
            assert (await queue.get_job(job.id)).data == {"queue": name}  # type: ignore[union-attr]
            assert await queue.count() == 1
            await queue.obliterate(force=True)


async def test_an_untrusted_certificate_is_refused(tls_url: str, queue_name: str) -> None:
    untrusted = tls_url.split("?")[0]  # the system's CAs: they never signed the test's own
    with pytest.raises(psyq.ConnectionError):
        async with psyq.Queue(queue_name, connection=untrusted) as queue:
            await queue.add("never")
