"""The auth token and TLS of `psyq server`, and the psyq:// URL's bad values."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import psyq
from psyq.backends.server import ServerBackend, parse_psyq_url
from psyq.backends.server.codec import frame
from psyq.backends.server.protocol import PROTOCOL_VERSION
from tests.server.server_proc import ServerProcess, start_server
from tests.server.test_faults import RawClient

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("auth")
    proc = start_server(folder / "server.log", "--data", "memory", "--token", TOKEN)
    yield proc
    proc.stop()


async def test_client_without_token_is_refused(guarded: ServerProcess) -> None:
    backend = ServerBackend(guarded.url + "?connect_timeout=1")
    with pytest.raises(psyq.PsyqError, match="authentication failed"):
        await backend.open()
    await backend.close()


async def test_wrong_token_is_refused_and_closed(guarded: ServerProcess) -> None:
    client = await RawClient.connect(guarded, hello=False)
    await client.send(frame({"id": 1, "op": "hello", "args": [PROTOCOL_VERSION, "wrong"]}))
    answer = await client.answer()
    assert "authentication failed" in str(answer["err"])
    assert await client.closed_by_server()
    await client.close()


async def test_unauthenticated_requests_are_not_run(guarded: ServerProcess) -> None:
    client = await RawClient.connect(guarded, hello=False)
    await client.send(frame({"id": 1, "op": "obliterate", "args": ["q", True]}))
    answer = await client.answer()
    assert "the first request must be hello" in str(answer["err"])
    assert await client.closed_by_server()
    await client.close()


async def test_client_with_token_is_served(guarded: ServerProcess, queue_name: str) -> None:
    url = f"{guarded.url}?token={TOKEN}"
    async with psyq.Queue(queue_name, connection=url) as queue:
        job = await queue.add("x", {"n": 1})
        stored = await queue.get_job(job.id)
        assert stored is not None and stored.data == {"n": 1}


async def test_token_in_the_url_like_a_redis_password(
    guarded: ServerProcess, queue_name: str
) -> None:
    url = f"psyq://:{TOKEN}@{guarded.address}"
    async with psyq.Queue(queue_name, connection=url) as queue:
        job = await queue.add("x", {"n": 2})
        stored = await queue.get_job(job.id)
        assert stored is not None and stored.data == {"n": 2}


@pytest.mark.parametrize(
    ("url", "token"),
    [
        ("psyq://:abc@host:1", "abc"),
        ("psyqs://:abc@host", "abc"),
        ("psyq://:a%40b%3Ac@host", "a@b:c"),
        ("psyq://host?token=abc", "abc"),
        ("psyq://:abc@host?token=abc", "abc"),
        ("psyq://host", None),
    ],
)
def test_the_token_comes_from_either_place(url: str, token: str | None) -> None:
    settings = parse_psyq_url(url)
    assert settings.token == token
    assert "abc" not in settings.safe_url and "@" not in settings.safe_url


def test_two_different_tokens_are_refused_masked() -> None:
    with pytest.raises(psyq.InvalidURLError, match="differ") as caught:
        parse_psyq_url("psyq://:one@host?token=two")
    assert "one" not in str(caught.value) and "two" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("psyq://host:99999", "port"),
        ("psyq://host?pool=0", "pool must be > 0"),
        ("psyq://host?pool=x", "pool must be a number, got 'x'"),
        ("psyq://host?bogus=1", "unknown parameters ['bogus']"),
    ],
)
def test_bad_urls_are_named(url: str, named: str) -> None:
    with pytest.raises(psyq.InvalidURLError, match=named.replace("[", r"\[").replace("]", r"\]")):
        parse_psyq_url(url)


async def test_unreachable_server_raises_connection_error_without_token(
    guarded: ServerProcess,
) -> None:
    for url in (
        f"psyq://127.0.0.1:1?token={TOKEN}&connect_timeout=0.3",
        f"psyq://:{TOKEN}@127.0.0.1:1?connect_timeout=0.3",
    ):
        backend = ServerBackend(url)
        with pytest.raises(psyq.ConnectionError) as caught:
            await backend.open()
        assert TOKEN not in str(caught.value)
        await backend.close()


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the TLS test needs the openssl binary to make a certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj"]
    names = ["/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
    files = ["-keyout", str(key), "-out", str(cert)]
    subprocess.run([openssl, *request, *names, *files], check=True, capture_output=True)
    proc = start_server(
        folder / "server.log", "--data", "memory", "--tls-cert", str(cert), "--tls-key", str(key)
    )
    yield proc, cert
    proc.stop()


async def test_tls_round_trip(tls_server: tuple[ServerProcess, Path], queue_name: str) -> None:
    server, cert = tls_server
    url = f"psyqs://localhost:{server.port}?ca={cert}"
    async with psyq.Queue(queue_name, connection=url) as queue:
        job = await queue.add("x", {"secure": True})
        stored = await queue.get_job(job.id)
        assert stored is not None and stored.data == {"secure": True}


async def test_tls_client_refuses_an_unknown_certificate(
    tls_server: tuple[ServerProcess, Path],
) -> None:
    server, _ = tls_server
    backend = ServerBackend(f"psyqs://localhost:{server.port}?connect_timeout=0.3")
    with pytest.raises(psyq.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        await backend.open()
    await backend.close()


async def test_plain_client_on_a_tls_server_fails_cleanly(
    tls_server: tuple[ServerProcess, Path],
) -> None:
    server, _ = tls_server
    backend = ServerBackend(f"psyq://localhost:{server.port}?connect_timeout=0.5")
    with pytest.raises(psyq.ConnectionError):
        await backend.open()
    await backend.close()


@pytest.mark.parametrize("tls", [True, False])
async def test_close_returns_once_its_connections_are_closed(
    tls_server: tuple[ServerProcess, Path], guarded: ServerProcess, queue_name: str, tls: bool
) -> None:
    """close() returns after its connections are closed, not as they start closing: a TLS
    connection takes a round trip to close (each side's close_notify), and a program that
    closes its loop right after close() left that socket open (uvloop reported it)."""
    server, cert = tls_server
    url = f"psyqs://localhost:{server.port}?ca={cert}" if tls else f"{guarded.url}?token={TOKEN}"
    backend = ServerBackend(url + "&pool=2")
    await backend.open()
    await asyncio.gather(*(backend.get_job_counts(queue_name, ["waiting"]) for _ in range(2)))
    conns = [conn for conn in backend._conns if conn is not None]
    assert len(conns) == 2
    await backend.close()
    assert [conn.transport for conn in conns] == [None, None]  # each connection_lost ran
