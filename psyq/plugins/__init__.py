"""pluggy middleware: hook specs, the per-Queue/Worker plugin host, built-in plugins.

Built in: `StructuredLogging` (here); in their own modules, each needing its extra:
`prometheus.PrometheusMetrics`, `otel.TracePropagation`, `payload.Payload`,
`validation.SchemaValidation`. What a hook sees of a job or a worker: `views.JobView`,
`views.WorkerView`. See docs/plugins.md.
"""

from psyq.plugins.hookspecs import hookimpl
from psyq.plugins.host import (
    AddSpec,
    PluginHost,
    register_plugin,
    registered_plugins,
    unregister_plugin,
)
from psyq.plugins.logging import StructuredLogging
from psyq.plugins.views import JobView, WorkerView

__all__ = [
    "AddSpec",
    "JobView",
    "PluginHost",
    "StructuredLogging",
    "WorkerView",
    "hookimpl",
    "register_plugin",
    "registered_plugins",
    "unregister_plugin",
]
