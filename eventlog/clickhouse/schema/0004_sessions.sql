-- One summary per session, so that listing sessions reads one row per session
-- (after merges) instead of every event. Filled by a materialized view in the same
-- INSERT as the events. Every state is idempotent, so an event written twice
-- counts once: events and steps count distinct seqs, and the status is the type
-- of the highest-seq task.* event (the types eventlog.TaskStatus maps; a test
-- keeps the list in step). Read it with the -Merge functions and GROUP BY
-- session_id: parts that have not merged yet hold several rows of a session.
CREATE TABLE IF NOT EXISTS sessions (
    session_id  String,
    events      AggregateFunction(uniqExact, UInt64),
    steps       AggregateFunction(uniqExactIf, UInt64, UInt8),
    last_seq    AggregateFunction(max, UInt64),
    status_type AggregateFunction(argMaxIf, String, UInt64, UInt8),
    started_us  AggregateFunction(min, Int64),
    updated_us  AggregateFunction(max, Int64)
) ENGINE = AggregatingMergeTree()
ORDER BY session_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS sessions_mv TO sessions AS
SELECT
    session_id,
    uniqExactState(seq) AS events,
    uniqExactIfState(seq, type = 'model.requested') AS steps,
    maxState(seq) AS last_seq,
    argMaxIfState(type, seq, type IN ('task.submitted', 'task.completed', 'task.failed')) AS status_type,
    minState(ts) AS started_us,
    maxState(ts) AS updated_us
FROM events
GROUP BY session_id;
