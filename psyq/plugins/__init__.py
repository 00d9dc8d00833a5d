"""pluggy middleware: hook specs, the per-Queue/Worker plugin host, built-in plugins.

Built in: `StructuredLogging` (here); in their own modules, each needing its extra:
`prometheus.PrometheusMetrics`, `otel.TracePropagation`, `payload.Payload`,
`validation.SchemaValidation`. See docs/plugins.md.
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

__all__ = [
    "AddSpec",
    "PluginHost",
    "StructuredLogging",
    "hookimpl",
    "register_plugin",
    "registered_plugins",
    "unregister_plugin",
]
