"""`Payload`: job data compressed and/or encrypted in the store, plain for the processor.

    payload = Payload(keys=[os.environ["PSYQ_KEY"]])      # compress from 1 KiB, encrypt all
    queue = psyq.Queue("emails", plugins=[payload])
    worker = psyq.Worker("emails", send, plugins=[payload])

At add, the data becomes an envelope that is still JSON, so every backend (and a Node worker)
stores and carries it as usual:

    {"$psyq": "zlib" | "fernet" | "zlib+fernet", "payload": "<text>"}

`payload` is the compressed bytes in base64, or a Fernet token (AES-128-CBC + HMAC-SHA256,
from `cryptography`; several keys rotate: the first encrypts, any decrypts). On a worker the
envelope is opened before any `psyq_process` middleware runs (in `psyq_before_process`), so
the processor and every middleware see the data as it was added. Data that cannot be opened
(a wrong key, a changed token) fails the job at once as unrecoverable: no attempt is retried
for it. Data that is not an envelope passes untouched.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from psyq.errors import PsyqError, UnrecoverableError
from psyq.plugins.hookspecs import CallNext, hookimpl

if TYPE_CHECKING:
    from psyq.plugins.views import AddSpec, JobView

__all__ = ["MARKER", "Payload"]

MARKER = "$psyq"
ZLIB, FERNET = "zlib", "fernet"


class Payload:
    """Compress data of at least `compress_from` bytes of JSON (None: never) and encrypt
    every job's data when `keys` are given (Fernet keys, e.g. `Fernet.generate_key()`)."""

    def __init__(
        self, *, compress_from: int | None = 1024, keys: Sequence[str | bytes] = (), level: int = 6
    ) -> None:
        if compress_from is not None and compress_from < 0:
            raise PsyqError(f"compress_from must be >= 0 or None, got {compress_from!r}")
        if compress_from is None and not keys:
            raise PsyqError("Payload with neither compression nor keys would change nothing")
        self.compress_from = compress_from
        self.level = level
        self._fernet = _fernet(keys) if keys else None
        # Why a job's envelope did not open, until its psyq_process layer raises it.
        self._failures: dict[tuple[str, str, int], UnrecoverableError] = {}

    # ------------------------------------------------------------------ packing
    def pack(self, data: Any) -> Any:
        """The envelope of `data` (None stays None: there is nothing to hide)."""
        if data is None:
            return None
        # allow_nan=False: what is packed must be JSON that psyq's own check would accept.
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        raw = text.encode()
        steps = []
        if self.compress_from is not None and len(raw) >= self.compress_from:
            raw, steps = zlib.compress(raw, self.level), [ZLIB]
        if self._fernet is not None:
            return _envelope([*steps, FERNET], self._fernet.encrypt(raw).decode())
        if steps:
            return _envelope(steps, base64.b64encode(raw).decode())
        return data

    def open(self, data: Any) -> Any:
        """The data an envelope holds; anything else as it is (tools reading stored jobs:
        `payload.open(job.data)`). Raises PsyqError saying why an envelope cannot be opened."""
        steps = _steps(data)
        if steps is None:
            return data
        text = data["payload"]
        raw = self._decrypt(text) if FERNET in steps else _b64(text)
        if ZLIB in steps:
            try:
                raw = zlib.decompress(raw)
            except zlib.error as exc:
                raise PsyqError(f"the compressed payload is damaged: {exc}") from None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise PsyqError(f"the payload is not JSON once opened: {exc}") from None

    def _decrypt(self, token: Any) -> bytes:
        if self._fernet is None:
            raise PsyqError("the payload is encrypted and this Payload has no keys")
        from cryptography.fernet import InvalidToken

        try:
            return bytes(self._fernet.decrypt(str(token).encode()))
        except InvalidToken:
            raise PsyqError("the payload does not decrypt with any of the keys") from None

    # ------------------------------------------------------------------ hooks
    @hookimpl
    def psyq_before_add(self, spec: AddSpec) -> None:
        spec.data = self.pack(spec.data)

    @hookimpl
    def psyq_before_process(self, job: JobView) -> None:
        """Open the envelope before any middleware; remember why when it cannot be."""
        try:
            job.data = self.open(job.data)
        except PsyqError as exc:
            self._failures[_attempt(job)] = UnrecoverableError(f"job {job.id}: {exc}")

    @hookimpl
    async def psyq_process(self, job: JobView, call_next: CallNext) -> Any:
        failure = self._failures.pop(_attempt(job), None)
        if failure is not None:
            raise failure
        return await call_next(job)


def _attempt(job: JobView) -> tuple[str, str, int]:
    return job.queue_name, job.id, job.attempts_started


def _envelope(steps: list[str], text: str) -> dict[str, str]:
    return {MARKER: "+".join(steps), "payload": text}


def _steps(data: Any) -> list[str] | None:
    """The codecs of an envelope, in the order they were applied; None for other data."""
    if not isinstance(data, dict) or set(data) != {MARKER, "payload"}:
        return None
    steps = str(data[MARKER]).split("+")
    if not steps or any(step not in (ZLIB, FERNET) for step in steps):
        return None
    return steps


def _b64(text: Any) -> bytes:
    try:
        return base64.b64decode(str(text), validate=True)
    except ValueError:
        raise PsyqError("the payload is not base64") from None


def _fernet(keys: Sequence[str | bytes]) -> Any:
    try:
        from cryptography.fernet import Fernet, MultiFernet
    except ImportError:
        raise PsyqError(
            "Payload(keys=...) needs cryptography: pip install 'psyq[crypto]'"
        ) from None
    try:
        return MultiFernet([Fernet(key) for key in keys])
    except (ValueError, TypeError) as exc:
        raise PsyqError(
            f"a Payload key must be 32 url-safe base64-encoded bytes (Fernet.generate_key()): {exc}"
        ) from None
