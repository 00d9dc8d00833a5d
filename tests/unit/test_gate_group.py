"""psyq.core.gate's path for a job whose only option is its group: it accepts exactly what
normalize_job_options accepts, gives the same options, and refuses the rest with the same
error (text and option named), whether the group comes as a mapping or as a keyword."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import psyq
from psyq.backends.base import NewJob
from psyq.core import gate
from psyq.core.options import MAX_GROUP_ID, normalize_job_options
from psyq.errors import InvalidOptionsError
from psyq.rules import codec
from psyq.rules.limits import MAX_COUNT, MAX_INT, MAX_PRIORITY

DATA = {"to": "someone"}


def by_the_full_path(opts: Any, kwargs: dict[str, Any]) -> NewJob | tuple[str, str | None]:
    """What the gate gave before it had a path of its own for a group: every option through
    normalize_job_options (the job is named "j")."""
    try:
        options = normalize_job_options(opts, **kwargs)
    except InvalidOptionsError as exc:
        return (f"job 'j': {exc}", exc.option)
    encoded = codec.dumps(DATA, "data", "j", options.get("sizeLimit"))
    return NewJob("j", encoded, options, options.get("timestamp"))


def by_the_gate(opts: Any, kwargs: dict[str, Any]) -> NewJob | tuple[str, str | None]:
    try:
        return gate.new_job("j", DATA, opts, kwargs)
    except InvalidOptionsError as exc:
        return (str(exc), exc.option)


def edge_ints(limit: int) -> st.SearchStrategy[int]:
    return st.sampled_from([0, 1, -1, limit, limit + 1, -limit, -limit - 1]) | st.integers()


texts = (
    st.text(max_size=8)
    | st.sampled_from(["", "a\x00b", "\udc80", "é", "x" * MAX_GROUP_ID, "x" * (MAX_GROUP_ID + 1)])
    | st.builds(str, st.integers())
)
ids = (
    texts
    | edge_ints(MAX_INT)
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=False)
    | st.lists(st.integers(), max_size=2)
)
fields = st.dictionaries(
    st.sampled_from(["id", "priority", "maxSize", "max_size", "colour"]),
    ids | edge_ints(MAX_PRIORITY) | edge_ints(MAX_COUNT),
    max_size=4,
)
groups = fields | st.fixed_dictionaries({"id": ids}) | ids
others = st.dictionaries(
    st.sampled_from(["lifo", "priority", "jobId", "attempts", "delay", "job_id", "bogus"]),
    st.none() | st.booleans() | st.integers(-2, 5) | st.sampled_from(["a", "1", ""]),
    max_size=2,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups, more=others, as_keywords=st.lists(st.booleans(), min_size=3, max_size=3))
def test_the_gate_gives_what_the_full_path_gives(
    group: Any, more: dict[str, Any], as_keywords: list[bool]
) -> None:
    """Each option in the mapping or as a keyword (`as_keywords`, per option), the mapping
    None when empty, as Queue.add passes them."""
    options = {"group": group, **more}
    where = dict(zip(options, as_keywords, strict=False))  # at most 3 options
    mapping = {k: v for k, v in options.items() if not where[k]}
    keywords = {k: v for k, v in options.items() if where[k]}
    given_mapping = mapping or None
    expected = by_the_full_path(given_mapping, keywords)
    assert by_the_gate(given_mapping, keywords) == expected
    again = by_the_gate(given_mapping, keywords)
    assert again == expected  # a group id the gate has seen checks the same


@pytest.mark.parametrize(
    "group",
    [{"id": True}, {"id": 1.0}, {"id": 2**53}, {"id": "a\x00"}, {"id": ""}, {"id": [1]}],
)
def test_a_bad_id_is_refused_after_an_equal_good_one(group: dict[str, Any]) -> None:
    """1 == True == 1.0 and "a" is a prefix of "a\\x00": what the gate kept of a good id
    never answers for a bad one."""
    for good in (1, "1", "a", 2**53 - 1):
        gate.new_job("j", DATA, {"group": {"id": good}})
    with pytest.raises(InvalidOptionsError, match=r"group\.id"):
        gate.new_job("j", DATA, {"group": group})


def test_jobs_of_one_group_share_their_options_and_the_callers_dicts_are_not_kept() -> None:
    mine = {"id": "tenant-1"}
    first = gate.new_job("j", DATA, {"group": mine})
    second = gate.new_job("j", DATA, None, {"group": {"id": "tenant-1"}})
    assert first.opts == second.opts == {"group": {"id": "tenant-1"}}
    assert first.opts is second.opts
    assert first.opts["group"] is not mine
    assert gate.new_job("j", DATA, {"group": {"id": 7}}).opts == {"group": {"id": "7"}}


def test_queue_defaults_still_apply_to_a_grouped_job() -> None:
    new = gate.new_job("j", DATA, {"group": {"id": "a"}}, None, {"attempts": 3})
    assert new.opts == {"attempts": 3, "group": {"id": "a"}}
    with pytest.raises(InvalidOptionsError, match="lifo"):
        gate.new_job("j", DATA, {"group": {"id": "a"}, "lifo": True})


async def test_changing_a_jobs_options_changes_no_other_job_of_its_group() -> None:
    async with psyq.Queue(f"gate-{uuid.uuid4().hex[:8]}", connection="memory://") as queue:
        first = await queue.add("j", {}, group={"id": "shared-group"})
        first.opts["group"]["id"] = "changed"
        first.opts["group"]["priority"] = 5
        second = await queue.add("j", {}, group={"id": "shared-group"})
        assert second.opts == {"group": {"id": "shared-group"}}
        stored = await queue.get_job(first.id)
        assert stored is not None and stored.opts == {"group": {"id": "shared-group"}}
        assert gate.new_job("j", DATA, {"group": {"id": "shared-group"}}).opts == second.opts
        await queue.obliterate(force=True)
