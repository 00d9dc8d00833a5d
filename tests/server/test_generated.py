"""generated.py is what the generator writes from the contract today, and the client's
commands are the contract's."""

from __future__ import annotations

import inspect

from psyq.backends.base import CONTRACT_GROUPS, BackendAdapter
from psyq.backends.server import generate
from psyq.backends.server.client import ServerBackend
from psyq.backends.server.generated import COMMANDS, Forwarders


def test_the_generated_module_is_up_to_date() -> None:
    """Regenerated in memory, it equals the file on disk (else: run the generator)."""
    assert generate.render() == generate.TARGET.read_text(), (
        "psyq/backends/server/generated.py is out of date: "
        "run python -m psyq.backends.server.generate"
    )


def test_the_check_mode_agrees() -> None:
    assert generate.main(["--check"]) == 0


def test_each_method_of_the_contract_lies_in_one_group() -> None:
    seen: dict[str, str] = {}
    for group in CONTRACT_GROUPS:
        for name, member in vars(group).items():
            if inspect.iscoroutinefunction(member):
                assert name not in seen, f"{name} is in {seen[name]} and {group.__name__}"
                seen[name] = group.__name__
    assert set(seen) == {
        name
        for name, member in inspect.getmembers(BackendAdapter)
        if inspect.iscoroutinefunction(member) and not name.startswith("_")
    }


def test_the_forwarders_keep_the_contract_signatures() -> None:
    for op in COMMANDS:
        assert inspect.signature(getattr(Forwarders, op)) == inspect.signature(
            getattr(BackendAdapter, op)
        ), op


def test_the_client_writes_only_its_special_methods() -> None:
    """Hand-written client methods remain only where the client does more than forward."""
    own = {name for name in vars(ServerBackend) if name in COMMANDS}
    assert own == {
        "add_jobs",  # batched adds (protocol 2)
        "check_ready",  # an older server: its answer is its readiness
        "wait_committed",  # a connection ended without a bye
        "wait_for_job",  # a dropped connection returns early
        "reprocess_job",  # the short form an older server takes
        "read_events",  # rows as tuples
        "export_jobs",  # the key form is not on the wire
        "import_jobs",  # the page in the server's key form
    }
