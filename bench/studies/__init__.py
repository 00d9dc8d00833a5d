"""One-off studies: each measures one question behind a figure of bench/README.md or of a
bench log entry, and runs alone as `python -m bench.studies.NAME` from the repository's
root (its docstring gives its options). They share the harness's helpers (bench.harness)."""
