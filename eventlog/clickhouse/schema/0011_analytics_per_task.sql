-- The analytics views of 0010 again, with three faults fixed:
--
-- session_outcomes counted every stream of the log as a session: an agent's
-- notes, memory namespaces, knowledge bases, A2A push configs, dashboard
-- sign-ins, MCP clients' sessions and stored bus commands (eventlog.IsSession),
-- as sessions of agent '' still running. It counts sessions only now, as Report
-- does; the condition is eventlog.NotPrefixed("substring", "session_id"), and a
-- test checks that it stays the same. (model_usage and tool_usage count events
-- that only sessions hold, memory_ops counts the memory namespaces' events on
-- purpose, and session_agents reads task.submitted, which no other stream holds:
-- session_agents takes the condition too, for clarity.)
--
-- The views left out every row that fenced_events lists, also a row that the
-- next owner read and wrote after, which Read returns (a stale owner's event
-- that landed just before the takeover and was listed anyway, see the package
-- doc's Fencing): such a session's task.submitted left it without an agent, its
-- task.completed left it running. They now leave out what Read leaves out: a
-- listed row beside a row of a higher epoch at its seq, or after the session's
-- last row that is not listed (the stale owner wrote last); the subquery of
-- those rows reads the events of the sessions fenced_events lists only.
--
-- model_usage charged every model call of a session to the agent of its first
-- task. Each call is now charged to the agent of the latest task submitted at
-- or before its seq (the first task's for an event before any task; 'default'
-- for a task that named none): ClickHouse 18.16 has no join on an inequality,
-- so each event is joined to its session's task seqs and agents as arrays.
-- session_agents and session_outcomes keep a session's first task's agent.
--
-- Every view is one query over the tables (a view may be dropped by a node
-- migrating at the same time, and CREATE VIEW fails on a missing table).
-- Compatible with ClickHouse 18.16 and current releases.
DROP TABLE IF EXISTS session_agents;

CREATE VIEW IF NOT EXISTS session_agents AS
SELECT session_id, arrayReduce('argMin', t_agents, t_seqs) AS agent
FROM (SELECT session_id, groupArray(seq) AS t_seqs,
             groupArray(if(visitParamExtractString(t_payload, 'agent') = '', 'default', visitParamExtractString(t_payload, 'agent'))) AS t_agents
      FROM (SELECT session_id, seq, argMax(payload, epoch) AS t_payload, max(epoch) AS t_epoch
            FROM events
            WHERE type = 'task.submitted' AND substring(session_id, 1, 6) != 'notes/' AND substring(session_id, 1, 7) != 'memory/' AND substring(session_id, 1, 3) != 'kb/' AND substring(session_id, 1, 9) != 'a2a/push/' AND substring(session_id, 1, 10) != 'ui/signin/' AND substring(session_id, 1, 12) != 'mcp/session/' AND substring(session_id, 1, 4) != 'bus/'
            GROUP BY session_id, seq)
      WHERE (session_id, seq, t_epoch) NOT IN (
            SELECT session_id, seq, epoch FROM
                (SELECT session_id, seq, epoch, top FROM fenced_events
                 ANY LEFT JOIN (SELECT session_id, seq, max(epoch) AS top FROM events
                                WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq) AS j1
                 USING session_id, seq) AS j2
            ANY LEFT JOIN (SELECT session_id, max(seq) AS kept
                           FROM (SELECT session_id, seq, max(epoch) AS top FROM events
                                 WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq)
                           WHERE (session_id, seq, top) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
                           GROUP BY session_id) AS j3
            USING session_id
            WHERE epoch < top OR seq > kept)
      GROUP BY session_id);

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
FROM (SELECT e_ts, e_payload,
             if(arrayCount(s -> s <= seq, t_seqs) = 0, arrayReduce('argMin', t_agents, t_seqs),
                arrayReduce('argMax', arrayFilter((a, s) -> s <= seq, t_agents, t_seqs), arrayFilter(s -> s <= seq, t_seqs))) AS agent
      FROM (SELECT session_id, seq, argMax(ts, epoch) AS e_ts, argMax(payload, epoch) AS e_payload, max(epoch) AS e_epoch
            FROM events WHERE type = 'model.responded' GROUP BY session_id, seq) AS j1
      ANY LEFT JOIN (SELECT session_id, groupArray(seq) AS t_seqs,
                            groupArray(if(visitParamExtractString(t_payload, 'agent') = '', 'default', visitParamExtractString(t_payload, 'agent'))) AS t_agents
                     FROM (SELECT session_id, seq, argMax(payload, epoch) AS t_payload, max(epoch) AS t_epoch
                           FROM events WHERE type = 'task.submitted' GROUP BY session_id, seq)
                     WHERE (session_id, seq, t_epoch) NOT IN (
                           SELECT session_id, seq, epoch FROM
                               (SELECT session_id, seq, epoch, top FROM fenced_events
                                ANY LEFT JOIN (SELECT session_id, seq, max(epoch) AS top FROM events
                                               WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq) AS j3
                                USING session_id, seq) AS j4
                           ANY LEFT JOIN (SELECT session_id, max(seq) AS kept
                                          FROM (SELECT session_id, seq, max(epoch) AS top FROM events
                                                WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq)
                                          WHERE (session_id, seq, top) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
                                          GROUP BY session_id) AS j5
                           USING session_id
                           WHERE epoch < top OR seq > kept)
                     GROUP BY session_id) AS j2 USING session_id
      WHERE (session_id, seq, e_epoch) NOT IN (
            SELECT session_id, seq, epoch FROM
                (SELECT session_id, seq, epoch, top FROM fenced_events
                 ANY LEFT JOIN (SELECT session_id, seq, max(epoch) AS top FROM events
                                WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq) AS j6
                 USING session_id, seq) AS j7
            ANY LEFT JOIN (SELECT session_id, max(seq) AS kept
                           FROM (SELECT session_id, seq, max(epoch) AS top FROM events
                                 WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq)
                           WHERE (session_id, seq, top) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
                           GROUP BY session_id) AS j8
            USING session_id
            WHERE epoch < top OR seq > kept))
GROUP BY day, agent, model;

DROP TABLE IF EXISTS tool_usage;

CREATE VIEW IF NOT EXISTS tool_usage AS
SELECT visitParamExtractString(e_payload, 'tool') AS tool,
       count() AS calls,
       countIf(visitParamExtractString(e_payload, 'error') != '') AS errors,
       errors / calls AS error_rate,
       quantileExact(0.5)(visitParamExtractInt(e_payload, 'latency_us')) AS p50_us,
       quantileExact(0.95)(visitParamExtractInt(e_payload, 'latency_us')) AS p95_us
FROM (SELECT session_id, seq, argMax(payload, epoch) AS e_payload, max(epoch) AS e_epoch
      FROM events WHERE type = 'tool.completed' GROUP BY session_id, seq)
WHERE (session_id, seq, e_epoch) NOT IN (
      SELECT session_id, seq, epoch FROM
          (SELECT session_id, seq, epoch, top FROM fenced_events
           ANY LEFT JOIN (SELECT session_id, seq, max(epoch) AS top FROM events
                          WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq) AS j1
           USING session_id, seq) AS j2
      ANY LEFT JOIN (SELECT session_id, max(seq) AS kept
                     FROM (SELECT session_id, seq, max(epoch) AS top FROM events
                           WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq)
                     WHERE (session_id, seq, top) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
                     GROUP BY session_id) AS j3
      USING session_id
      WHERE epoch < top OR seq > kept)
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
      FROM (SELECT session_id, seq, argMax(type, epoch) AS e_type, argMax(ts, epoch) AS e_ts, max(epoch) AS e_epoch
            FROM events
            WHERE substring(session_id, 1, 6) != 'notes/' AND substring(session_id, 1, 7) != 'memory/' AND substring(session_id, 1, 3) != 'kb/' AND substring(session_id, 1, 9) != 'a2a/push/' AND substring(session_id, 1, 10) != 'ui/signin/' AND substring(session_id, 1, 12) != 'mcp/session/' AND substring(session_id, 1, 4) != 'bus/'
            GROUP BY session_id, seq)
      WHERE (session_id, seq, e_epoch) NOT IN (
            SELECT session_id, seq, epoch FROM
                (SELECT session_id, seq, epoch, top FROM fenced_events
                 ANY LEFT JOIN (SELECT session_id, seq, max(epoch) AS top FROM events
                                WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq) AS j1
                 USING session_id, seq) AS j2
            ANY LEFT JOIN (SELECT session_id, max(seq) AS kept
                           FROM (SELECT session_id, seq, max(epoch) AS top FROM events
                                 WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq)
                           WHERE (session_id, seq, top) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
                           GROUP BY session_id) AS j3
            USING session_id
            WHERE epoch < top OR seq > kept)
      GROUP BY session_id) AS j4
ANY LEFT JOIN (SELECT session_id, arrayReduce('argMin', t_agents, t_seqs) AS agent
               FROM (SELECT session_id, groupArray(seq) AS t_seqs,
                            groupArray(if(visitParamExtractString(t_payload, 'agent') = '', 'default', visitParamExtractString(t_payload, 'agent'))) AS t_agents
                     FROM (SELECT session_id, seq, argMax(payload, epoch) AS t_payload, max(epoch) AS t_epoch
                           FROM events WHERE type = 'task.submitted' GROUP BY session_id, seq)
                     WHERE (session_id, seq, t_epoch) NOT IN (
                           SELECT session_id, seq, epoch FROM
                               (SELECT session_id, seq, epoch, top FROM fenced_events
                                ANY LEFT JOIN (SELECT session_id, seq, max(epoch) AS top FROM events
                                               WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq) AS j6
                                USING session_id, seq) AS j7
                           ANY LEFT JOIN (SELECT session_id, max(seq) AS kept
                                          FROM (SELECT session_id, seq, max(epoch) AS top FROM events
                                                WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq)
                                          WHERE (session_id, seq, top) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
                                          GROUP BY session_id) AS j8
                           USING session_id
                           WHERE epoch < top OR seq > kept)
                     GROUP BY session_id)) AS j5 USING session_id
GROUP BY agent;

DROP TABLE IF EXISTS memory_ops;

CREATE VIEW IF NOT EXISTS memory_ops AS
SELECT visitParamExtractString(e_payload, 'tier') AS tier, substring(e_type, 8) AS op, count() AS operations
FROM (SELECT session_id, seq, argMax(type, epoch) AS e_type, argMax(payload, epoch) AS e_payload, max(epoch) AS e_epoch
      FROM events WHERE type LIKE 'memory.%' GROUP BY session_id, seq)
WHERE (session_id, seq, e_epoch) NOT IN (
      SELECT session_id, seq, epoch FROM
          (SELECT session_id, seq, epoch, top FROM fenced_events
           ANY LEFT JOIN (SELECT session_id, seq, max(epoch) AS top FROM events
                          WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq) AS j1
           USING session_id, seq) AS j2
      ANY LEFT JOIN (SELECT session_id, max(seq) AS kept
                     FROM (SELECT session_id, seq, max(epoch) AS top FROM events
                           WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq)
                     WHERE (session_id, seq, top) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
                     GROUP BY session_id) AS j3
      USING session_id
      WHERE epoch < top OR seq > kept)
GROUP BY tier, op;
