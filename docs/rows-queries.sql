-- The fleet questions of docs/ROWS.md, over a table or view named `rows` holding the rows of
-- `p2ptrace export DIR --rows FILE` (schema p2ptrace.rows/1). Plain SQL: DuckDB, Spark SQL and
-- Trino run it unchanged, over the NDJSON files or over Parquet. tests/fleet/fleet_test.py runs
-- these very statements (split at the "question:" lines).

-- question: nodes with any fallback
SELECT DISTINCT coalesce(node, host) AS node
FROM rows
WHERE kind = 'pair' AND fallback
ORDER BY node;

-- question: GPU-hours lost per cause
-- A pair's lost_seconds is its transfers' time minus what its expected class would have taken;
-- a pair is counted under its first cause (`cause`); unknown losses (null) are left out.
SELECT cause, sum(lost_seconds) / 3600 AS gpu_hours, source, count(*) AS pairs
FROM rows
WHERE kind = 'pair' AND fallback AND lost_seconds IS NOT NULL
GROUP BY cause, source
ORDER BY gpu_hours DESC;

-- question: pairs whose class changed between jobs on a node
-- Each GPU pair of a node (by bus id), job after job in start order: the jobs where its class
-- differs from the previous job's.
SELECT node, src_gpu, dst_gpu, source, job_before, job_after, class_before, class_after
FROM (
  SELECT coalesce(node, host) AS node, src_gpu, dst_gpu, source,
         job_id AS job_after, class_used AS class_after,
         lag(job_id) OVER (PARTITION BY coalesce(node, host), src_bus_id, dst_bus_id, source
                           ORDER BY job_start, job_id) AS job_before,
         lag(class_used) OVER (PARTITION BY coalesce(node, host), src_bus_id, dst_bus_id, source
                               ORDER BY job_start, job_id) AS class_before
  FROM rows
  WHERE kind = 'pair' AND src_host = dst_host
) AS t
WHERE class_before <> class_after
ORDER BY node, src_gpu, dst_gpu, job_after;
