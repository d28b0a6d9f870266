-- The server lists a stale owner's events in fenced_events itself, at INSERT
-- time, so that they are known even when their writer dies (or is killed, or
-- loses its connection) between its INSERT and the confirmation after it: before
-- this version only that confirmation listed them (see the package doc's
-- Fencing).
--
-- Each event keeps the partition of the lease it was appended under
-- (lease_partition; -1 for Append without a lease, and for every event written
-- before this version: the DEFAULT is what older parts read). fenced_events_mv
-- lists, from every INSERT into events, the leased rows whose epoch is not the
-- current epoch of their partition (the highest in ownership) when the INSERT
-- is processed. Own records the new epoch before its taker reads any session, so
-- a row listed here landed after its partition was taken: the new owner may have
-- read the session before it landed, and Read leaves it out at the end of a
-- session. A row not listed landed before the taking, and the new owner, which
-- takes the partition before it reads, folds it. The server writes an INSERT's
-- rows into events and then into the views' tables: a reader in that short gap
-- sees a stale row not listed yet.
--
-- ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS: migrate skips an ADD COLUMN
-- whose column exists (schema.go), so this file, too, can be applied twice. The
-- column is no part of the sorting key, so its DEFAULT is accepted by 18.16 and
-- current releases alike.
ALTER TABLE events ADD COLUMN lease_partition Int64 DEFAULT -1;

CREATE MATERIALIZED VIEW IF NOT EXISTS fenced_events_mv TO fenced_events AS
SELECT
    session_id,
    seq,
    epoch,
    type,
    multiIf(type = 'task.submitted', id, type IN ('task.completed', 'task.failed'), correlation_id, '') AS task,
    toUInt8(0) AS settled
FROM events
WHERE epoch > 0 AND lease_partition >= 0
  AND (toUInt32(lease_partition), epoch) NOT IN (SELECT partition, max(epoch) FROM ownership GROUP BY partition);

-- The analytics views (0005, 0006) took any row at a (session, seq): also a
-- stale owner's, beside the new owner's event at that seq or past the session's
-- end. Replaced by views that count what a reader of the log folds: at each
-- (session, seq) the row of the highest epoch, and none that fenced_events lists
-- (a stale owner's; Read keeps the few that a later owner wrote after, the views
-- do not). Each filters by type before it dedupes, as before, so that a view
-- reads the events of its types only. The views that need a session's agent
-- join session_agents' query rather than the view: a node migrating at the same
-- time may have dropped the view, and CREATE VIEW fails on a missing table.
DROP TABLE IF EXISTS session_agents;

CREATE VIEW IF NOT EXISTS session_agents AS
SELECT session_id,
       if(argMin(visitParamExtractString(payload, 'agent'), seq) = '', 'default',
          argMin(visitParamExtractString(payload, 'agent'), seq)) AS agent
FROM events
WHERE type = 'task.submitted' AND (session_id, seq, epoch) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
GROUP BY session_id;

DROP TABLE IF EXISTS model_usage;

CREATE VIEW IF NOT EXISTS model_usage AS
SELECT toDate(toDateTime(intDiv(e_ts, 1000000))) AS day, agent,
       visitParamExtractString(e_payload, 'model') AS model,
       count() AS calls,
       sum(visitParamExtractInt(e_payload, 'prompt_tokens')) AS prompt_tokens,
       sum(visitParamExtractInt(e_payload, 'completion_tokens')) AS completion_tokens,
       sum(visitParamExtractInt(e_payload, 'cached_tokens')) AS cached_tokens,
       sum(visitParamExtractFloat(e_payload, 'cost_usd')) AS cost_usd,
       countIf(visitParamExtractBool(e_payload, 'cached') = 1) AS cache_hits
FROM (SELECT session_id, seq, argMax(ts, epoch) AS e_ts, argMax(payload, epoch) AS e_payload
      FROM events
      WHERE type = 'model.responded' AND (session_id, seq, epoch) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
      GROUP BY session_id, seq) AS j1
ANY LEFT JOIN (SELECT session_id,
                  if(argMin(visitParamExtractString(payload, 'agent'), seq) = '', 'default',
                     argMin(visitParamExtractString(payload, 'agent'), seq)) AS agent
           FROM events
           WHERE type = 'task.submitted' AND (session_id, seq, epoch) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
           GROUP BY session_id) AS j2 USING session_id
GROUP BY day, agent, model;

DROP TABLE IF EXISTS tool_usage;

CREATE VIEW IF NOT EXISTS tool_usage AS
SELECT visitParamExtractString(e_payload, 'tool') AS tool,
       count() AS calls,
       countIf(visitParamExtractString(e_payload, 'error') != '') AS errors,
       errors / calls AS error_rate,
       quantileExact(0.5)(visitParamExtractInt(e_payload, 'latency_us')) AS p50_us,
       quantileExact(0.95)(visitParamExtractInt(e_payload, 'latency_us')) AS p95_us
FROM (SELECT session_id, seq, argMax(payload, epoch) AS e_payload
      FROM events
      WHERE type = 'tool.completed' AND (session_id, seq, epoch) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
      GROUP BY session_id, seq)
GROUP BY tool;

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
      FROM (SELECT session_id, seq, argMax(type, epoch) AS e_type, argMax(ts, epoch) AS e_ts
            FROM events
            WHERE (session_id, seq, epoch) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
            GROUP BY session_id, seq)
      GROUP BY session_id) AS j1
ANY LEFT JOIN (SELECT session_id,
                  if(argMin(visitParamExtractString(payload, 'agent'), seq) = '', 'default',
                     argMin(visitParamExtractString(payload, 'agent'), seq)) AS agent
           FROM events
           WHERE type = 'task.submitted' AND (session_id, seq, epoch) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
           GROUP BY session_id) AS j2 USING session_id
GROUP BY agent;

DROP TABLE IF EXISTS memory_ops;

CREATE VIEW IF NOT EXISTS memory_ops AS
SELECT visitParamExtractString(e_payload, 'tier') AS tier, substring(e_type, 8) AS op, count() AS operations
FROM (SELECT session_id, seq, argMax(type, epoch) AS e_type, argMax(payload, epoch) AS e_payload
      FROM events
      WHERE type LIKE 'memory.%' AND (session_id, seq, epoch) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
      GROUP BY session_id, seq)
GROUP BY tier, op;
