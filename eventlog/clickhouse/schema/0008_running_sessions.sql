-- The running sessions, listed at every node start, partition assignment and list
-- of pending approvals (Sessions with Filter{Status: running, SessionsOnly: true}),
-- are found without reading the summaries of the ended sessions nor of the
-- streams that are no session (a dashboard sign-in leaves one for ever): beside
-- 10,000 ended sessions, listing 100 running ones read 60,300 rows (300 alone).
-- Two tables, each filled by a
-- materialized view in the same INSERT as the events, of the streams whose ID
-- starts with none of the prefixes of the streams that were no session when this
-- file was written (eventlog.NonSessionPrefixes; a later prefix is filtered by
-- the query).
--
-- open_tasks: a row +1 per task submitted (keyed by its event ID), a row -1 per
-- task ended (keyed by its correlation ID, the ID of the task.submitted it ends),
-- and a row +1 keyed '' for a stream whose first event is no task.submitted (a
-- session with no task counts as running). CollapsingMergeTree removes a task's
-- two rows when their parts merge, so that once merged the table holds about one
-- row per running task. It is a superset of the running sessions, never more
-- exact: a task not ended yet keeps its row +1 (no row -1 has its key), while a
-- row written twice (an INSERT retried after an unknown outcome, or this file
-- applied during writes) may keep an ended session in it for good. Sessions reads
-- the sessions in it with a row +1, then checks each against session_summaries.
CREATE TABLE IF NOT EXISTS open_tasks (
    session_id String,
    task       String,
    sign       Int8
) ENGINE = CollapsingMergeTree(sign)
ORDER BY (session_id, task)
SETTINGS index_granularity = 256;

CREATE MATERIALIZED VIEW IF NOT EXISTS open_tasks_mv TO open_tasks AS
SELECT
    session_id,
    multiIf(type = 'task.submitted', id, type IN ('task.completed', 'task.failed'), correlation_id, '') AS task,
    toInt8(if(type IN ('task.completed', 'task.failed'), -1, 1)) AS sign
FROM events
WHERE (type IN ('task.submitted', 'task.completed', 'task.failed') OR seq = 1)
  AND substring(session_id, 1, 6) != 'notes/' AND substring(session_id, 1, 7) != 'memory/'
  AND substring(session_id, 1, 3) != 'kb/' AND substring(session_id, 1, 9) != 'a2a/push/'
  AND substring(session_id, 1, 10) != 'ui/signin/';

-- session_summaries: what sessions and session_tasks hold of a session, and the
-- parent its first event names (messages.TaskSubmitted.Parent), in one row per
-- session once merged, in granules of 32 rows: Sessions reads the running ones by
-- key, with few of their neighbours. Read it with the -Merge functions and GROUP
-- BY session_id.
CREATE TABLE IF NOT EXISTS session_summaries (
    session_id  String,
    events      AggregateFunction(uniqExact, UInt64),
    steps       AggregateFunction(uniqExactIf, UInt64, UInt8),
    last_seq    AggregateFunction(max, UInt64),
    status_type AggregateFunction(argMaxIf, String, UInt64, UInt8),
    started_us  AggregateFunction(min, Int64),
    updated_us  AggregateFunction(max, Int64),
    tasks       AggregateFunction(uniqExactIf, UInt64, UInt8),
    ended       AggregateFunction(uniqExactIf, UInt64, UInt8),
    parent      AggregateFunction(anyIf, String, UInt8)
) ENGINE = AggregatingMergeTree()
ORDER BY session_id
SETTINGS index_granularity = 32;

CREATE MATERIALIZED VIEW IF NOT EXISTS session_summaries_mv TO session_summaries AS
SELECT
    session_id,
    uniqExactState(seq) AS events,
    uniqExactIfState(seq, type = 'model.requested') AS steps,
    maxState(seq) AS last_seq,
    argMaxIfState(type, seq, type IN ('task.submitted', 'task.completed', 'task.failed')) AS status_type,
    minState(ts) AS started_us,
    maxState(ts) AS updated_us,
    uniqExactIfState(seq, type = 'task.submitted') AS tasks,
    uniqExactIfState(seq, type IN ('task.completed', 'task.failed')) AS ended,
    anyIfState(visitParamExtractString(visitParamExtractRaw(payload, 'parent'), 'session_id'), seq = 1 AND type = 'task.submitted') AS parent
FROM events
WHERE substring(session_id, 1, 6) != 'notes/' AND substring(session_id, 1, 7) != 'memory/'
  AND substring(session_id, 1, 3) != 'kb/' AND substring(session_id, 1, 9) != 'a2a/push/'
  AND substring(session_id, 1, 10) != 'ui/signin/'
GROUP BY session_id;

-- The events stored before the views existed. session_summaries' states are
-- idempotent (distinct seqs, extremes, and a parent that is the same on every
-- copy of an event), so counting an event again changes nothing. open_tasks
-- reads each (session, seq) once; an event the view counted too stays a row
-- written twice (see above).
INSERT INTO session_summaries
SELECT
    session_id,
    uniqExactState(seq) AS events,
    uniqExactIfState(seq, type = 'model.requested') AS steps,
    maxState(seq) AS last_seq,
    argMaxIfState(type, seq, type IN ('task.submitted', 'task.completed', 'task.failed')) AS status_type,
    minState(ts) AS started_us,
    maxState(ts) AS updated_us,
    uniqExactIfState(seq, type = 'task.submitted') AS tasks,
    uniqExactIfState(seq, type IN ('task.completed', 'task.failed')) AS ended,
    anyIfState(visitParamExtractString(visitParamExtractRaw(payload, 'parent'), 'session_id'), seq = 1 AND type = 'task.submitted') AS parent
FROM events
WHERE substring(session_id, 1, 6) != 'notes/' AND substring(session_id, 1, 7) != 'memory/'
  AND substring(session_id, 1, 3) != 'kb/' AND substring(session_id, 1, 9) != 'a2a/push/'
  AND substring(session_id, 1, 10) != 'ui/signin/'
GROUP BY session_id;

INSERT INTO open_tasks
SELECT
    session_id,
    multiIf(e_type = 'task.submitted', e_id, e_type IN ('task.completed', 'task.failed'), e_correlation, '') AS task,
    toInt8(if(e_type IN ('task.completed', 'task.failed'), -1, 1)) AS sign
FROM (SELECT session_id, seq, any(type) AS e_type, any(id) AS e_id, any(correlation_id) AS e_correlation
      FROM events
      WHERE (type IN ('task.submitted', 'task.completed', 'task.failed') OR seq = 1)
        AND substring(session_id, 1, 6) != 'notes/' AND substring(session_id, 1, 7) != 'memory/'
        AND substring(session_id, 1, 3) != 'kb/' AND substring(session_id, 1, 9) != 'a2a/push/'
        AND substring(session_id, 1, 10) != 'ui/signin/'
      GROUP BY session_id, seq
      ORDER BY session_id, seq);
