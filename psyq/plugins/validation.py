"""`SchemaValidation`: job data checked against a JSON Schema per job name.

    validation = SchemaValidation({"send": {"type": "object", "required": ["to"]}})
    queue = psyq.Queue("emails", plugins=[validation])      # bad data: JobVetoedError
    worker = psyq.Worker("emails", send, plugins=[validation])  # bad data: failed, no retry

At add, data that does not match is refused before anything is written (a bulk add writes
none of its jobs); the error names the queue, the job name, where in the data and why. On a
worker (`on_process`, default on), data written by another producer — a Node service, an
older release — is checked again before the processor runs and fails the job as
unrecoverable. Needs `pip install 'psyq[validation]'` (jsonschema).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from psyq.errors import JobVetoedError, PsyqError, UnrecoverableError
from psyq.plugins.hookspecs import CallNext, hookimpl
from psyq.plugins.payload import MARKER

if TYPE_CHECKING:
    from psyq.plugins.views import AddSpec, JobView

__all__ = ["SchemaValidation"]


class SchemaValidation:
    """`schemas` maps job names to JSON Schemas; names without one use `default` (None:
    not checked)."""

    def __init__(
        self,
        schemas: Mapping[str, Mapping[str, Any]],
        *,
        default: Mapping[str, Any] | None = None,
        on_process: bool = True,
    ) -> None:
        self._validators = {name: _validator(name, schema) for name, schema in schemas.items()}
        self._default = None if default is None else _validator("(default)", default)
        self.on_process = on_process

    def problem(self, name: Any, data: Any) -> str | None:
        """Why `data` does not fit the schema of job `name`, or None when it does."""
        validator = self._validators.get(str(name), self._default)
        if validator is None:
            return None
        error = next(iter(sorted(validator.iter_errors(data), key=_depth)), None)
        if error is None:
            return None
        where = "".join(f"[{part!r}]" for part in error.absolute_path)
        return f"data{where}: {error.message}"

    @hookimpl
    def psyq_before_add(self, spec: AddSpec) -> None:
        if isinstance(spec.data, dict) and MARKER in spec.data:
            raise JobVetoedError(
                f"job {spec.name!r} of queue {spec.queue_name!r}: its data is already packed by "
                "Payload; list SchemaValidation before Payload in plugins="
            )
        problem = self.problem(spec.name, spec.data)
        if problem is not None:
            raise JobVetoedError(
                f"job {spec.name!r} of queue {spec.queue_name!r} does not match its schema: "
                f"{problem}"
            )

    @hookimpl
    async def psyq_process(self, job: JobView, call_next: CallNext) -> Any:
        if self.on_process:
            problem = self.problem(job.name, job.data)
            if problem is not None:
                raise UnrecoverableError(f"job {job.id} does not match its schema: {problem}")
        return await call_next(job)


def _depth(error: Any) -> tuple[int, str]:
    """The shallowest error first (it says the most), then by message for a stable pick."""
    return len(error.absolute_path), str(error.message)


def _validator(name: str, schema: Mapping[str, Any]) -> Any:
    try:
        from jsonschema import exceptions, validators  # type: ignore[import-untyped]
    except ImportError:
        raise PsyqError(
            "SchemaValidation needs jsonschema: pip install 'psyq[validation]'"
        ) from None
    cls = validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        raise PsyqError(f"the schema of job name {name!r} is not valid: {exc.message}") from None
    return cls(schema)
