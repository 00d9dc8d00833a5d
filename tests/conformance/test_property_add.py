"""Property: on every backend, an `add` of generated names, data and options either stores
the job so that `get_job` gives back the same name, data and options, or raises one of
psyq's errors with nothing written; the backend keeps working either way.

`HYPOTHESIS_PROFILE=long` runs many more examples (`make fuzz`); CI runs the `ci` profile.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import psyq
from tests.conftest import fresh_name

settings.register_profile(
    "ci",
    max_examples=20,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=400,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

# Every character, lone surrogates (category Cs), NUL and astral ones included.
text = st.text(st.characters(exclude_categories=()), max_size=12) | st.sampled_from(
    ["", "\ud800", "a\udc80b", "nul\x00", "\U0001f600", "caf\u00e9"]
)
integers = st.one_of(
    st.integers(-(2**8), 2**8), st.integers(-(2**80), 2**80), st.sampled_from([2**53, 2**63])
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    integers,
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
data = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
keep_spec = st.fixed_dictionaries({}, optional={"count": integers, "age": integers})
keep = st.one_of(st.booleans(), integers, keep_spec)
OPTION_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "attempts": integers,
    "priority": integers,
    "delay": integers,
    "lifo": st.booleans(),
    "jobId": text,
    "timestamp": st.one_of(integers, st.integers(0, 2**42)),
    "keepLogs": integers,
    "stackTraceLimit": integers,
    "removeOnComplete": keep,
    "removeOnFail": keep,
    "backoff": st.one_of(
        integers, st.fixed_dictionaries({"type": text}, optional={"delay": integers})
    ),
    "deduplication": st.fixed_dictionaries({"id": text}, optional={"ttl": integers}),
    "telemetry": st.fixed_dictionaries({"metadata": text}),
}
options = st.dictionaries(st.sampled_from(sorted(OPTION_VALUES)), st.none(), max_size=4).flatmap(
    lambda chosen: st.fixed_dictionaries({name: OPTION_VALUES[name] for name in chosen})
)


@settings(settings.get_profile(PROFILE))
@given(name=text, value=data, opts=options)
async def test_an_add_round_trips_or_is_refused_with_nothing_written(
    any_backend_url: str, name: str, value: Any, opts: dict[str, Any]
) -> None:
    async with psyq.Queue(fresh_name("prop"), connection=any_backend_url) as queue:
        try:
            job = await queue.add(name, value, opts)
        except (psyq.InvalidDataError, psyq.InvalidOptionsError) as exc:
            event(f"refused: {type(exc).__name__}")
            assert sum((await queue.get_job_counts()).values()) == 0
        else:
            event(f"stored with {len(opts)} option(s)")
            stored = await queue.get_job(job.id)
            assert stored is not None
            assert (stored.name, stored.opts) == (name, opts)
            assert same_json(stored.data, value, exact=not any_backend_url.startswith("postgres"))
        after = await queue.add("after", {"ok": True})  # the backend keeps working
        assert (await queue.get_job(after.id)).data == {"ok": True}  # type: ignore[union-attr]
        await queue.obliterate(force=True)


def same_json(got: Any, sent: Any, exact: bool) -> bool:
    """`got` is `sent`. Not `exact` (Postgres): a number is the same number whatever its type,
    as jsonb writes `1e16` as `10000000000000000`, which reads back as an int (Node, whose
    numbers are all doubles, sees no difference)."""
    if exact:
        return bool(got == sent)
    number = (int, float)
    if isinstance(got, number) and isinstance(sent, number) and bool not in (type(got), type(sent)):
        return float(got) == float(sent)
    if isinstance(got, dict) and isinstance(sent, dict):
        return got.keys() == sent.keys() and all(same_json(got[k], sent[k], exact) for k in got)
    if isinstance(got, list) and isinstance(sent, list):
        return len(got) == len(sent) and all(
            same_json(a, b, exact) for a, b in zip(got, sent, strict=True)
        )
    return bool(got == sent) and type(got) is type(sent)
