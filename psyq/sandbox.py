"""`Sandbox`: run a processor in child processes (BullMQ's sandboxed processors).

    async with Sandbox("myapp.images:resize", processes=4) as resize:
        worker = psyq.Worker("images", resize, concurrency=4)

CPU-bound work then runs beside the event loop instead of on it (or on a thread under the
GIL), and a processor that crashes its process — a segfault, `os._exit`, the OOM killer —
fails its job instead of the worker. Each child imports `module:function` (or runs the file
of a `path/to/file.py:function` target) once and runs one job at a time; the function gets
a `SandboxJob` (id, name, data, opts, attempts_made, queue_name, timestamp;
`update_progress` and `log` travel back to the real job) and may be a plain or an async
function. Its return value must be JSON.

Parent and children speak JSON over pipes (never pickle). A job the worker cancels (its
`timeout`, `cancel_job`, a forced close) has its child killed and replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import json
import os
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from psyq.errors import PsyqError, UnrecoverableError

if TYPE_CHECKING:
    from psyq.core.job import Job

__all__ = ["Sandbox", "SandboxJob", "SandboxedError"]

_JOB_FIELDS = ("id", "name", "data", "opts", "attempts_made", "queue_name", "timestamp")


class SandboxedError(PsyqError):
    """The sandboxed processor raised; the message is its exception's, the child's traceback
    is attached as a note (it shows in the job's stacktrace)."""


class Sandbox:
    """`processes` children running `target` ("module:function"); an async callable, so it
    is the `processor` of a Worker."""

    def __init__(self, target: str, processes: int = 1) -> None:
        _check_target(target)
        if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
            raise PsyqError(f"processes must be a whole number >= 1, got {processes!r}")
        self.target = target
        self.processes = processes
        self._idle: list[_Child] = []
        self._free = asyncio.Semaphore(processes)  # one job per child
        self._lock = threading.Lock()
        self._closed = False

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def __call__(self, job: Job) -> Any:
        """Run `job` in a child; its progress and logs reach `job` as they come."""
        if self._closed:
            raise PsyqError(f"the sandbox of {self.target!r} is closed")
        async with self._free:
            child = await asyncio.to_thread(self._take)
            try:
                reply = await self._exchange(child, job)
            except BaseException:
                child.kill()  # cancelled or broken mid-job: the child's state is unknown
                raise
            finally:
                self._give_back(child)
        if "error" in reply:
            raise _error(reply["error"])
        return reply.get("result")

    async def _exchange(self, child: _Child, job: Job) -> dict[str, Any]:
        """Send the job; pass on its progress and logs until the child's reply comes."""
        child.send({field: getattr(job, field) for field in _JOB_FIELDS})
        while True:
            message = await asyncio.to_thread(child.receive, job.id)
            if "progress" in message:
                await job.update_progress(message["progress"])
            elif "log" in message:
                await job.log(str(message["log"]))
            else:
                return message

    def _take(self) -> _Child:
        """An idle child, or a new one (children that died while idle are reaped)."""
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.alive():
                    return child
                child.kill()
        return _Child.start(self.target)

    def _give_back(self, child: _Child) -> None:
        with self._lock:
            if child.alive() and not self._closed:
                self._idle.append(child)
            else:
                child.kill()

    async def close(self) -> None:
        """Stop the idle children (running jobs finish first: close the worker before)."""
        self._closed = True
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            await asyncio.to_thread(child.stop)


class _Child:
    """One child process (`python -m psyq.sandbox FD TARGET`) and its socket: a fresh
    interpreter, so nothing of the parent — its `__main__` included — is imported or
    copied into it."""

    def __init__(self, process: subprocess.Popen[bytes], conn: Connection) -> None:
        self.process = process
        self.conn = conn

    @classmethod
    def start(cls, target: str) -> _Child:
        ours, theirs = socket.socketpair()
        with theirs:
            fd = theirs.fileno()
            command = [sys.executable, "-m", "psyq.sandbox", str(fd), target]
            process = subprocess.Popen(command, pass_fds=(fd,))
        return cls(process, Connection(ours.detach()))

    def alive(self) -> bool:
        return self.process.poll() is None and not self.conn.closed

    def send(self, message: Any) -> None:
        self.conn.send_bytes(json.dumps(message).encode())

    def receive(self, job_id: str) -> dict[str, Any]:
        try:
            return dict(json.loads(self.conn.recv_bytes()))
        except (EOFError, OSError):
            code = self.process.wait(5)
            raise PsyqError(
                f"the sandboxed process running job {job_id} died (exit code {code})"
            ) from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(5)
        self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send_bytes(b"null")
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        self.kill()


def _error(spec: dict[str, Any]) -> BaseException:
    message = str(spec.get("message", ""))
    if spec.get("unrecoverable"):
        error: BaseException = UnrecoverableError(message)
    else:
        error = SandboxedError(message)
    error.add_note(f"in the sandboxed process ({spec.get('type')}):\n{spec.get('traceback', '')}")
    return error


def _check_target(target: Any) -> None:
    """A "module:function" whose module can be found (it is imported in the children), or
    a "path/to/file.py:function" whose file exists (the children run it)."""
    module, sep, function = str(target).rpartition(":")
    if not isinstance(target, str) or not sep or not module or not function:
        raise PsyqError(
            f"a sandbox target looks like module:function or file.py:function, got {target!r}"
        )
    if _is_file(module):
        if not os.path.isfile(module):
            raise PsyqError(f"the file of sandbox target {target!r} does not exist")
        return
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise PsyqError(f"cannot find the module of sandbox target {target!r}: {exc}") from None
    if found is None:
        raise PsyqError(f"cannot find the module of sandbox target {target!r}")


# ---------------------------------------------------------------------- the child side
class SandboxJob:
    """What a sandboxed processor gets: the job's fields, and progress and logs sent back."""

    def __init__(self, fields: dict[str, Any], conn: Connection) -> None:
        self.id: str = fields["id"]
        self.name: str = fields["name"]
        self.data: Any = fields["data"]
        self.opts: dict[str, Any] = fields["opts"]
        self.attempts_made: int = fields["attempts_made"]
        self.queue_name: str = fields["queue_name"]
        self.timestamp: int = fields["timestamp"]
        self._conn = conn

    def update_progress(self, progress: Any) -> None:
        self._conn.send_bytes(json.dumps({"progress": progress}).encode())

    def log(self, row: str) -> None:
        self._conn.send_bytes(json.dumps({"log": str(row)}).encode())


def _child_main(conn: Connection, target: str) -> None:
    """Import the target once, then run the jobs the parent sends until it sends null; a
    target that does not load fails each job, saying why."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        function: Callable[..., Any] | Exception = _load(target)
    except Exception as exc:
        function = PsyqError(f"cannot load sandbox target {target!r}: {exc!r}")
    while True:
        try:
            message = json.loads(conn.recv_bytes())
        except EOFError:
            return  # the parent is gone
        if message is None:
            return
        conn.send_bytes(_run_one(function, SandboxJob(message, conn)).encode())


def _run_one(function: Callable[..., Any] | Exception, job: SandboxJob) -> str:
    try:
        if isinstance(function, Exception):
            raise function
        result = function(job)
        if inspect.isawaitable(result):
            result = asyncio.run(_await(result))
    except Exception as exc:
        return json.dumps({"error": _describe(exc)})
    try:
        return json.dumps({"result": result})
    except (TypeError, ValueError) as exc:
        wrong = TypeError(f"the return value of job {job.id} is not JSON: {exc}")
        return json.dumps({"error": _describe(wrong)})


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _describe(exc: Exception) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "unrecoverable": isinstance(exc, UnrecoverableError),
    }


def _is_file(module: str) -> bool:
    return module.endswith(".py")


def _load(target: str) -> Callable[..., Any]:
    module_name, _, attribute = target.rpartition(":")
    if _is_file(module_name):
        found: Any = _run_file(module_name)
    else:
        found = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    if not callable(found):
        raise PsyqError(f"{target!r} is not callable")
    return found  # type: ignore[no-any-return]


def _run_file(path: str) -> Any:
    """The module a processor file makes (run as `__sandboxed__`, not as `__main__`)."""
    spec = importlib.util.spec_from_file_location("__sandboxed__", path)
    if spec is None or spec.loader is None:
        raise PsyqError(f"{path} cannot be loaded as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":  # a child: python -m psyq.sandbox FD TARGET
    _child_main(Connection(int(sys.argv[1])), sys.argv[2])
