"""On PYTHONPATH, makes `import bullmq` (and `bullmq.<module>`) give `psyq.compat.bullmq`
(and `psyq.compat.bullmq.<module>`): the same module objects under both names, so a
`monkeypatch.setattr("bullmq.queue.create_backend", ...)` patches the layer. Used to run the
`bullmq` package's own test suite against the layer (tests/compat/bullmq_suite.py); an
installed `bullmq` is shadowed, and a module the layer lacks is missing."""

from __future__ import annotations

import importlib
import pkgutil
import sys

ALIAS, TARGET = "bullmq", "psyq.compat.bullmq"


def _alias_layer() -> None:
    package = importlib.import_module(TARGET)
    sys.modules[ALIAS] = package
    for module in pkgutil.walk_packages(package.__path__, TARGET + "."):
        sys.modules[ALIAS + module.name[len(TARGET) :]] = importlib.import_module(module.name)


_alias_layer()
