"""Argument checks for the commands a `psyq server` accepts.

Each command of `COMMANDS` (generated from the contract: generated.py) is an adapter method;
its parameters' annotations (read from `BackendAdapter`) become a checker run on the decoded
arguments before the call, so a wrong count or type is answered with an error naming the
argument and the value, and never reaches the engine.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import itertools
import types
import typing
from collections.abc import Callable
from typing import Any

from psyq.backends.base import BackendAdapter
from psyq.backends.server.protocol import COMMANDS, ProtocolError

__all__ = ["Signature", "check_args", "signatures"]

Check = Callable[[Any], bool]


@dataclasses.dataclass(frozen=True)
class Signature:
    """A command's parameters: (name, check, description) and how many are required."""

    op: str
    params: tuple[tuple[str, Check, str], ...]
    required: int


def _scalar(tp: type) -> tuple[Check, str]:
    if tp is int:
        return (lambda v: type(v) is int), "int"
    if tp is float:
        return (lambda v: type(v) in (int, float)), "float"
    if tp is type(None):
        return (lambda v: v is None), "None"
    return (lambda v: isinstance(v, tp)), tp.__name__


def _check_for(tp: Any) -> tuple[Check, str]:
    """A checker and a readable description for an annotation."""
    if tp is Any:
        return (lambda v: True), "any value"
    if typing.is_typeddict(tp):  # a contract shape (contract/shapes.py): a map, as before
        return _check_for(dict[str, Any])
    origin = typing.get_origin(tp)
    if origin is None:
        return _scalar(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        options = [_check_for(arg) for arg in args]
        text = " or ".join(d for _, d in options)
        if len(args) == 2 and type(None) in args:  # X | None: no generator per request
            other = options[1][0] if args[0] is type(None) else options[0][0]
            return (lambda v: v is None or other(v)), text
        return (lambda v: any(c(v) for c, _ in options)), text
    if origin is typing.Literal:
        return (lambda v: v in args), f"one of {list(args)}"
    if origin in (list, collections.abc.Sequence):
        item, text = _check_for(args[0])
        kind = args[0]
        if isinstance(kind, type) and kind not in (int, float, type(None)):  # as _scalar's
            # isinstance check, item by item in C (a settle_many's settlements, tokens)
            every = itertools.repeat(kind)
            return (
                lambda v: type(v) is list and all(map(isinstance, v, every))
            ), f"a list of {text}"
        return (lambda v: type(v) is list and all(item(x) for x in v)), f"a list of {text}"
    if origin in (dict, collections.abc.Mapping):
        key, ktext = _check_for(args[0])
        val, vtext = _check_for(args[1])
        check = lambda v: type(v) is dict and all(key(k) and val(x) for k, x in v.items())  # noqa: E731
        return check, f"a map of {ktext} to {vtext}"
    raise TypeError(f"no wire check for the annotation {tp!r}")


def _signature(op: str) -> Signature:
    method = getattr(BackendAdapter, op)
    hints = typing.get_type_hints(method)
    params = list(inspect.signature(method).parameters.values())[1:]  # without self
    checks = tuple((p.name, *_check_for(hints[p.name])) for p in params)
    required = sum(1 for p in params if p.default is inspect.Parameter.empty)
    return Signature(op, checks, required)


def signatures() -> dict[str, Signature]:
    """The signature of every command, built once from the contract."""
    return {op: _signature(op) for op in sorted(COMMANDS)}


def check_args(sig: Signature, args: Any) -> None:
    """Raise ProtocolError naming the first argument that does not fit `sig`."""
    if type(args) is not list:
        raise ProtocolError(f"{sig.op}: args must be a list, got {args!r:.80}")
    if not sig.required <= len(args) <= len(sig.params):
        names = [name for name, _, _ in sig.params]
        raise ProtocolError(
            f"{sig.op} takes {sig.required} to {len(sig.params)} arguments {names}, got {len(args)}"
        )
    for value, (name, check, text) in zip(args, sig.params, strict=False):
        if not check(value):
            raise ProtocolError(f"{sig.op}: argument {name!r} must be {text}, got {value!r:.80}")
