"""The contract every backend implements, in the groups a type checker sees: one class per
module (lifecycle, adding, transaction, transitions, queries, mutations, admin, flows,
events, schedulers, limits, groups, monitoring, cancellation, transfer), each on `AdapterRoot`
(root.py), and the typed shapes of its dict-shaped values (shapes.py).

`psyq.backends.base.BackendAdapter` composes the groups; import the contract from there (it
re-exports the records and the shapes too)."""
