"""Rules the tests themselves keep (CONTRIBUTING.md, "Tests"): a test waits for a condition
with tests.polling, never by sleeping "long enough". A sleep that is itself the behaviour
under test (a processor's work, nothing happening for a while, a lock expiring) stays, and
says so with a trailing `# sleep: why` comment on its line, so a reader (and this test)
can tell the two apart. `sleep(0)`, one turn of the loop, needs no comment."""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MARK = "# sleep:"
SLEEPERS = {"asyncio", "time"}
EXEMPT = TESTS / "polling.py"  # the one place that sleeps, between two polls


def sleeps(source: str) -> Iterator[ast.Call]:
    """Each `asyncio.sleep(x)` / `time.sleep(x)` call whose `x` is not the literal 0."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        if node.func.attr != "sleep" or not isinstance(owner, ast.Name):
            continue
        if owner.id not in SLEEPERS:
            continue
        first = node.args[0] if node.args else None
        if isinstance(first, ast.Constant) and first.value == 0:
            continue
        yield node


def marked_lines(source: str) -> set[int]:
    """The lines that carry a `# sleep:` comment."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {
        token.start[0]
        for token in tokens
        if token.type == tokenize.COMMENT and token.string.startswith(MARK)
    }


def unmarked(source: str) -> list[int]:
    """The lines of the sleeps in `source` that no `# sleep:` comment explains: a comment
    on any line the call spans counts."""
    marks = marked_lines(source)
    found = []
    for call in sleeps(source):
        span = range(call.lineno, (call.end_lineno or call.lineno) + 1)
        if not marks.intersection(span):
            found.append(call.lineno)
    return sorted(found)


def checked_files() -> list[Path]:
    return sorted(path for path in TESTS.rglob("*.py") if path != EXEMPT)


def name(path: Path) -> str:
    return path.relative_to(TESTS.parent).as_posix()


def test_every_sleep_in_the_tests_says_why() -> None:
    offences = [
        f"{name(path)}:{line}" for path in checked_files() for line in unmarked(path.read_text())
    ]
    assert not offences, (
        "a sleep that waits for something: poll the condition with tests.polling; a sleep "
        f"that is the behaviour under test: add `{MARK} why` on its line\n" + "\n".join(offences)
    )


PLANTED = """
import asyncio, time

async def waits():
    await asyncio.sleep(0.5)
    await asyncio.sleep(0)
    await asyncio.sleep(0, "result")
    await asyncio.sleep(0.2)  # sleep: the processor's work
    await asyncio.sleep(
        0.3,
    )  # sleep: spans lines, the comment on its last
    time.sleep(1)  # settles
    time.sleep(seconds)
    other.sleep(5)
"""


def test_the_checker_catches_a_planted_sleep() -> None:
    assert unmarked(PLANTED) == [5, 12, 13]


def test_the_checker_reads_only_real_comments() -> None:
    inside_a_string = 'import time\ntime.sleep(2); x = "# sleep: not a comment"\n'
    assert unmarked(inside_a_string) == [2]
