-- The analytics views of 0011 and 0015 again, counting a fork from its
-- session.forked event (the last one: a fork of a fork holds its parent's too),
-- as Report does (eventlog.SessionUsage): the events before it are its parent's,
-- copied with their times. session_outcomes counts a fork's steps and duration
-- from it (counted from the copies, a fork made minutes after its parent lasted
-- those minutes); model_usage, tool_usage and memory_ops count a fork's own calls
-- and operations, those after it (counted with the copies, a fork's tokens and
-- cost held its parent's). A session that is no fork has fork_at 0 (the join
-- leaves it so) and counts from its first event, as before.

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
             countIf(e_type = 'model.requested' AND seq > fork_at) AS steps,
             max(e_ts) - if(countIf(seq >= fork_at) = 0, min(e_ts), minIf(e_ts, seq >= fork_at)) AS duration_us
      FROM (SELECT session_id, seq, argMax(type, epoch) AS e_type, argMax(ts, epoch) AS e_ts, max(epoch) AS e_epoch
            FROM events
            WHERE substring(session_id, 1, 6) != 'notes/' AND substring(session_id, 1, 7) != 'memory/' AND substring(session_id, 1, 3) != 'kb/' AND substring(session_id, 1, 9) != 'a2a/push/' AND substring(session_id, 1, 10) != 'ui/signin/' AND substring(session_id, 1, 12) != 'mcp/session/' AND substring(session_id, 1, 4) != 'bus/' AND substring(session_id, 1, 7) != 'config/'
            GROUP BY session_id, seq) AS j9
      ANY LEFT JOIN (SELECT session_id, max(seq) AS fork_at FROM events WHERE type = 'session.forked' GROUP BY session_id) AS j10
      USING session_id
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
      FROM (SELECT session_id, seq, e_ts, e_payload, e_epoch
            FROM (SELECT session_id, seq, argMax(ts, epoch) AS e_ts, argMax(payload, epoch) AS e_payload, max(epoch) AS e_epoch
                  FROM events WHERE type = 'model.responded' GROUP BY session_id, seq) AS j9
            ANY LEFT JOIN (SELECT session_id, max(seq) AS fork_at FROM events WHERE type = 'session.forked' GROUP BY session_id) AS j10
            USING session_id
            WHERE seq > fork_at) AS j1
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
      FROM events WHERE type = 'tool.completed' GROUP BY session_id, seq) AS j4
ANY LEFT JOIN (SELECT session_id, max(seq) AS fork_at FROM events WHERE type = 'session.forked' GROUP BY session_id) AS j5
USING session_id
WHERE seq > fork_at AND (session_id, seq, e_epoch) NOT IN (
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

DROP TABLE IF EXISTS memory_ops;

CREATE VIEW IF NOT EXISTS memory_ops AS
SELECT visitParamExtractString(e_payload, 'tier') AS tier, substring(e_type, 8) AS op, count() AS operations
FROM (SELECT session_id, seq, argMax(type, epoch) AS e_type, argMax(payload, epoch) AS e_payload, max(epoch) AS e_epoch
      FROM events WHERE type LIKE 'memory.%' GROUP BY session_id, seq) AS j4
ANY LEFT JOIN (SELECT session_id, max(seq) AS fork_at FROM events WHERE type = 'session.forked' GROUP BY session_id) AS j5
USING session_id
WHERE seq > fork_at AND (session_id, seq, e_epoch) NOT IN (
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
