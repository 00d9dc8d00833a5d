"""psyq.errors: the tree, redacted URLs, messages that name the value."""

from __future__ import annotations

import builtins
import re

import pytest

import psyq
from psyq import errors
from psyq.errors import redact_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://:secret@host:6379/0", "redis://:***@host:6379/0"),
        ("redis://user:secret@host:6379/0", "redis://user:***@host:6379/0"),
        ("postgresql://me:p%40ss@db:5432/jobs", "postgresql://me:***@db:5432/jobs"),
        ("psyqs://u:tok@h:6789?x=1", "psyqs://u:***@h:6789?x=1"),
        ("redis://user@host:6379", "redis://user@host:6379"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("memory://", "memory://"),
        ("sqlite:///tmp/jobs.db", "sqlite:///tmp/jobs.db"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_url_with_at_sign_in_password() -> None:
    redacted = redact_url("redis://u:p@ss@host:1/0")
    assert "p@ss" not in redacted
    assert "ss@" not in redacted
    assert redacted.endswith("@host:1/0")


def test_redact_unparsable_url() -> None:
    assert "secret" not in redact_url("redis://:secret@[::1")


def test_connection_error_hides_the_password() -> None:
    exc = psyq.ConnectionError("redis://:hunter2@host:6379/0", "refused")
    assert "hunter2" not in str(exc)
    assert "host:6379" in str(exc)
    assert "refused" in str(exc)
    assert exc.url == "redis://:***@host:6379/0"
    assert isinstance(exc, builtins.ConnectionError)


def test_invalid_url_error_hides_the_password() -> None:
    exc = psyq.InvalidURLError("bogus://u:hunter2@h", "no backend")
    assert "hunter2" not in str(exc)
    assert "bogus://u:***@h" in str(exc)


def test_job_not_found_names_job_and_queue() -> None:
    exc = psyq.JobNotFoundError("emails", "17")
    assert "'17'" in str(exc) and "'emails'" in str(exc)
    assert isinstance(exc, LookupError)


def test_job_state_error_names_job_state_and_operation() -> None:
    exc = psyq.JobStateError("17", "active", "remove")
    assert str(exc) == "cannot remove job '17': it is active"


def test_lock_error_names_job_and_operation() -> None:
    exc = psyq.LockError("17", "complete")
    assert "'17'" in str(exc) and "complete" in str(exc)


def test_unsupported_error_names_backend_and_feature() -> None:
    exc = psyq.UnsupportedError("memory", "flows")
    assert "memory" in str(exc) and "flows" in str(exc)
    assert isinstance(exc, NotImplementedError)


def test_invalid_options_error_carries_the_option() -> None:
    exc = psyq.InvalidOptionsError("bad", option="attempts")
    assert exc.option == "attempts"
    assert isinstance(exc, ValueError)


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_is_a_psyq_error(name: str) -> None:
    if name == "redact_url":
        return
    cls = getattr(errors, name)
    assert issubclass(cls, psyq.PsyqError)
    assert getattr(psyq, name) is cls


@pytest.mark.parametrize(
    "cls",
    [psyq.UnrecoverableError, psyq.DelayedError, psyq.WaitingChildrenError, psyq.RateLimitError],
)
def test_processor_signals(cls: type[Exception]) -> None:
    assert issubclass(cls, psyq.ProcessorSignal)


def drawn_tree() -> dict[str, str]:
    """The tree drawn in psyq.errors' docstring: each class name -> its drawn parent."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        found = re.match(r"^(\s*)(?:[│ ]*[├└]── )?([A-Z]\w*(?:Error|Signal))\b", line)
        if not found or not line.startswith("    "):
            continue
        depth = len(line) - len(line.lstrip(" │├└─"))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[found.group(2)] = stack[-1][1] if stack else ""
        stack.append((depth, found.group(2)))
    return parents


def test_the_drawn_tree_shows_every_exception_under_its_base() -> None:
    classes = {
        name: cls
        for name, cls in vars(errors).items()
        if isinstance(cls, type) and issubclass(cls, errors.PsyqError)
    }
    tree = drawn_tree()
    assert set(tree) == set(classes), "psyq.errors' drawn tree differs from its classes"
    for name, parent in tree.items():
        if parent:
            assert classes[parent] in classes[name].__bases__, f"{name} is drawn under {parent}"
