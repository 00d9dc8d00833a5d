-- 0009_job_seq_default: a job row written without a sequence number takes the next one.
-- An import page's COPY leaves `seq` out, so its rows number themselves in row order (the
-- page's order) as the server reads them, instead of fetching a thousand numbers first and
-- sending them back. Every other writer still sets `seq` itself.
ALTER TABLE jobs ALTER COLUMN seq SET DEFAULT nextval('job_seq');
