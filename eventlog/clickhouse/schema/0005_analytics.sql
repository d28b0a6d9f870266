-- Analytics views for clickhouse-client (replay stats runs the same queries with
-- filters). Plain views over events: always current, nothing to backfill. Each
-- dedupes by (session_id, seq) first, because ReplacingMergeTree keeps an event
-- written twice until its parts merge. Compatible with ClickHouse 18.16.
CREATE VIEW IF NOT EXISTS session_agents AS
SELECT session_id,
       if(argMin(visitParamExtractString(payload, 'agent'), seq) = '', 'default',
          argMin(visitParamExtractString(payload, 'agent'), seq)) AS agent
FROM events WHERE type = 'task.submitted' GROUP BY session_id;

-- Tokens (prompt, completion, cached) and cost per agent, model and day.
CREATE VIEW IF NOT EXISTS model_usage AS
SELECT toDate(toDateTime(intDiv(e_ts, 1000000))) AS day, agent,
       visitParamExtractString(e_payload, 'model') AS model,
       count() AS calls,
       sum(visitParamExtractInt(e_payload, 'prompt_tokens')) AS prompt_tokens,
       sum(visitParamExtractInt(e_payload, 'completion_tokens')) AS completion_tokens,
       sum(visitParamExtractInt(e_payload, 'cached_tokens')) AS cached_tokens,
       sum(visitParamExtractFloat(e_payload, 'cost_usd')) AS cost_usd,
       countIf(visitParamExtractBool(e_payload, 'cached') = 1) AS cache_hits
FROM (SELECT session_id, seq, any(ts) AS e_ts, any(payload) AS e_payload
      FROM events WHERE type = 'model.responded' GROUP BY session_id, seq) AS j1
ANY LEFT JOIN session_agents USING session_id
GROUP BY day, agent, model;

-- Tool calls per tool: count, error rate, p50/p95 latency in microseconds.
CREATE VIEW IF NOT EXISTS tool_usage AS
SELECT visitParamExtractString(e_payload, 'tool') AS tool,
       count() AS calls,
       countIf(visitParamExtractString(e_payload, 'error') != '') AS errors,
       errors / calls AS error_rate,
       quantileExact(0.5)(visitParamExtractInt(e_payload, 'latency_us')) AS p50_us,
       quantileExact(0.95)(visitParamExtractInt(e_payload, 'latency_us')) AS p95_us
FROM (SELECT session_id, seq, any(payload) AS e_payload
      FROM events WHERE type = 'tool.completed' GROUP BY session_id, seq)
GROUP BY tool;

-- Sessions by agent: how many, how they ended, steps, duration (first to last event).
CREATE VIEW IF NOT EXISTS session_outcomes AS
SELECT agent, count() AS sessions,
       countIf(status = 'task.completed') AS completed,
       countIf(status = 'task.failed') AS failed,
       sessions - completed - failed AS running,
       avg(steps) AS avg_steps,
       quantileExact(0.5)(duration_us) AS p50_duration_us,
       quantileExact(0.95)(duration_us) AS p95_duration_us
FROM (SELECT session_id, argMaxIf(e_type, seq, e_type LIKE 'task.%') AS status,
             countIf(e_type = 'model.requested') AS steps, max(e_ts) - min(e_ts) AS duration_us
      FROM (SELECT session_id, seq, any(type) AS e_type, any(ts) AS e_ts FROM events GROUP BY session_id, seq)
      GROUP BY session_id) AS j1
ANY LEFT JOIN session_agents USING session_id
GROUP BY agent;

-- Memory operations (memory.* events) by tier and operation.
CREATE VIEW IF NOT EXISTS memory_ops AS
SELECT visitParamExtractString(e_payload, 'tier') AS tier, substring(e_type, 8) AS op, count() AS operations
FROM (SELECT session_id, seq, any(type) AS e_type, any(payload) AS e_payload
      FROM events WHERE type LIKE 'memory.%' GROUP BY session_id, seq)
GROUP BY tier, op;
