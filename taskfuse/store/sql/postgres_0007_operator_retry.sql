-- What the record keeps of an operator's retry (`taskfuse retry`, the operator_retry move out
-- of FAILED, TIMEOUT or CANCELED): how many times an operator reopened the task and when
-- last (Task.operator_retries, Task.operator_retried_at). Rows from before count none.
-- A constant default: adding the columns rewrites no row. No index: nothing looks tasks up
-- by these.

ALTER TABLE tasks ADD COLUMN operator_retries integer NOT NULL DEFAULT 0;

ALTER TABLE tasks ADD COLUMN operator_retried_at double precision;
