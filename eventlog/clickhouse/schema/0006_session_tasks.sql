-- How many tasks each session was given (task.submitted events) and how many
-- ended (task.completed, task.failed), each event counted once (distinct seqs),
-- so that a session with tasks queued behind an ended one lists as running until
-- its last task ends (eventlog.SessionStatus); under the status of the highest-seq
-- task.* event alone, such a session listed as completed and a node starting never
-- resumed it. A table of its own with its own materialized view: sessions and
-- sessions_mv stay as they are. Read it with uniqExactIfMerge and GROUP BY
-- session_id.
CREATE TABLE IF NOT EXISTS session_tasks (
    session_id String,
    tasks      AggregateFunction(uniqExactIf, UInt64, UInt8),
    ended      AggregateFunction(uniqExactIf, UInt64, UInt8)
) ENGINE = AggregatingMergeTree()
ORDER BY session_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS session_tasks_mv TO session_tasks AS
SELECT
    session_id,
    uniqExactIfState(seq, type = 'task.submitted') AS tasks,
    uniqExactIfState(seq, type IN ('task.completed', 'task.failed')) AS ended
FROM events
WHERE type IN ('task.submitted', 'task.completed', 'task.failed')
GROUP BY session_id;

-- Count the events stored before the view existed. Idempotent like the CREATEs:
-- the states count distinct seqs, so counting an event again (this file applied
-- twice, or an event the view counted too) changes nothing.
INSERT INTO session_tasks
SELECT
    session_id,
    uniqExactIfState(seq, type = 'task.submitted') AS tasks,
    uniqExactIfState(seq, type IN ('task.completed', 'task.failed')) AS ended
FROM events
WHERE type IN ('task.submitted', 'task.completed', 'task.failed')
GROUP BY session_id;

-- session_outcomes (0005) counted such sessions as completed too: replace it.
DROP TABLE IF EXISTS session_outcomes;

CREATE VIEW IF NOT EXISTS session_outcomes AS
SELECT agent, count() AS sessions,
       countIf(status = 'task.completed' AND n_tasks <= n_ended) AS completed,
       countIf(status = 'task.failed' AND n_tasks <= n_ended) AS failed,
       sessions - completed - failed AS running,
       avg(steps) AS avg_steps,
       quantileExact(0.5)(duration_us) AS p50_duration_us,
       quantileExact(0.95)(duration_us) AS p95_duration_us
FROM (SELECT session_id, argMaxIf(e_type, seq, e_type LIKE 'task.%') AS status,
             countIf(e_type = 'task.submitted') AS n_tasks,
             countIf(e_type IN ('task.completed', 'task.failed')) AS n_ended,
             countIf(e_type = 'model.requested') AS steps, max(e_ts) - min(e_ts) AS duration_us
      FROM (SELECT session_id, seq, any(type) AS e_type, any(ts) AS e_ts FROM events GROUP BY session_id, seq)
      GROUP BY session_id) AS j1
ANY LEFT JOIN session_agents USING session_id
GROUP BY agent;
