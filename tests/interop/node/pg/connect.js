// Shared by the Postgres interop scripts: Node BullMQ 6 on its PostgreSQL backend, in the
// schema the test chose, migrating it (Node's migrations on top of any psyq applied).
const bullmq = require('bullmq');

bullmq.setDefaultBackendFactory(bullmq.createPostgresBackend);

module.exports = (url, schema) => ({ connectionString: url, schema, migrate: true });
