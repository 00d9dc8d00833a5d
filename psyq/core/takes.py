"""`Takes`: what a worker's takes are asked with and what they found, shared by the part
that takes jobs (`Fetching`) and the part whose completions take the next job in the same
call (`Settling`, fetch-next). Neither part calls the other for it: both hold this.

It owns the worker's fresh lock tokens (a request for n jobs), and two marks: `drained`
(the last take found the queue empty and `drained` was emitted) and `short` (the last take
came back short: the queue likely has no other job waiting, so a completion may wait for a
call to ride on). Here too is `LostTakes`, the tokens of takes whose reply was lost.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable

from psyq.backends.base import FetchRequest, JobRecord
from psyq.core.parts import Configured

__all__ = ["MAX_HELD", "LostTakes", "Take", "Takes"]

Take = Callable[[FetchRequest], Awaitable[list[JobRecord]]]  # a store call that takes jobs
MAX_HELD = 1000  # lost takes' tokens a worker keeps (an outage fails many calls in a row)


class Takes:
    """A worker's takes: fresh tokens for each, and the `drained` and `short` marks."""

    __slots__ = ("_config", "_prefix", "_tokens", "drained", "short")

    def __init__(self, config: Configured, worker_id: str) -> None:
        self._config = config  # the worker's options, read at each take: they may change
        self._prefix = worker_id  # tokens are `<worker id>:<n>`, the takes' owner the id
        self._tokens = itertools.count(1)
        self.drained = True
        self.short = False  # the queue likely has no other job waiting

    def request(self, n: int) -> FetchRequest:
        """A request for `n` jobs with fresh tokens (a completion's fetch-next asks for
        one: this is on every job's path)."""
        tokens, prefix = self._tokens, self._prefix
        if n == 1:  # no comprehension (a call) for the one of a fetch-next
            fresh = [f"{prefix}:{next(tokens)}"]
        else:
            fresh = [f"{prefix}:{next(tokens)}" for _ in range(n)]
        options = self._config.options
        return FetchRequest(
            fresh, options.lock_duration, prefix, options.limiter, group=options.group
        )

    def request_for(self, tokens: list[str]) -> FetchRequest:
        """A request for a job per token of a caller's (get_next_job's)."""
        options = self._config.options
        return FetchRequest(
            tokens, options.lock_duration, self._prefix, options.limiter, group=options.group
        )

    def took(self, asked: int, found: int, woken: bool) -> None:
        """The fetcher's take came back: short when it found fewer than it asked, or it is
        the first after the queue ran dry (a job's arrival woke the fetcher)."""
        self.short = found < asked or woken
        if found:
            self.drained = False

    def ran_dry(self) -> bool:
        """The fetcher's take found nothing; True when the queue was not drained before
        (the `drained` event is then due)."""
        was, self.drained = self.drained, True
        return not was

    def waited(self) -> None:
        """The fetcher waited for a job to arrive: the next take is not known short."""
        self.short = False

    def took_next(self, found: bool) -> None:
        """A completion's fetch-next came back: short (`found` none) means the queue likely
        has no other job waiting."""
        self.short = not found

    def found_work(self) -> None:
        """A completion brought its slot the next job: the queue is not drained."""
        self.drained = False


class LostTakes:
    """The tokens of a worker's takes (its fetcher's, a batch's fetch-next) whose call
    failed, most often with a lost connection: the store may have run it and locked jobs
    under them, and the reply never came. The next such take carries them
    (`FetchRequest.held`); a backend that finds jobs by lock token (Redis) hands those jobs
    over with it, as if the reply had come, instead of leaving them active until their
    locks expire. Only the worker's own tokens come here: they are fresh for each take, so
    a job locked under one is that take's (a caller's token, as get_next_job's, may lock
    other jobs too)."""

    __slots__ = ("_tokens",)

    def __init__(self) -> None:
        self._tokens: list[str] = []

    def attach(self, request: FetchRequest) -> FetchRequest:
        if self._tokens:
            request.held, self._tokens = self._tokens, []
        return request

    def failed(self, request: FetchRequest | None) -> None:
        if request is not None:
            self._tokens = [*self._tokens, *request.held, *request.tokens][-MAX_HELD:]

    async def take(self, call: Take, request: FetchRequest) -> list[JobRecord]:
        """`call(request)`, a take with the worker's own (fresh) tokens: they are kept when
        the call fails, and the lost takes' tokens go with it."""
        try:
            return await call(self.attach(request))
        except BaseException:
            self.failed(request)
            raise
