"""What every `psyq` subcommand shares: the one-line error and argument types. The command
modules and main.py import it; it imports none of them."""

from __future__ import annotations

import argparse
import os

__all__ = ["CliError", "cannot_listen", "positive_int", "positive_seconds", "seconds"]


class CliError(Exception):
    """Bad input on the command line: printed as one line, exit code 2."""


def cannot_listen(host: str, port: int, exc: OSError) -> CliError:
    """The one line for an address that cannot be bound (in use, not ours, not allowed)."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return CliError(f"cannot listen on {host}:{port}: {reason.lower()}")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """A number of seconds, more than 0."""
    value = seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value
