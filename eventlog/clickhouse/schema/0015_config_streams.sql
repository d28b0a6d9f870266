-- session_agents and session_outcomes of 0011 again, leaving out the streams of
-- the agents' configurations too (config/<digest>, eventlog.ConfigStreamPrefix:
-- decision rules 7 stores each configuration a task names once per log, in a
-- stream of its own), which session_outcomes counted as sessions of agent ''
-- still running. The condition is eventlog.NotPrefixed("substring", "session_id").

DROP TABLE IF EXISTS session_agents;

CREATE VIEW IF NOT EXISTS session_agents AS
SELECT session_id, arrayReduce('argMin', t_agents, t_seqs) AS agent
FROM (SELECT session_id, groupArray(seq) AS t_seqs,
             groupArray(if(visitParamExtractString(t_payload, 'agent') = '', 'default', visitParamExtractString(t_payload, 'agent'))) AS t_agents
      FROM (SELECT session_id, seq, argMax(payload, epoch) AS t_payload, max(epoch) AS t_epoch
            FROM events
            WHERE type = 'task.submitted' AND substring(session_id, 1, 6) != 'notes/' AND substring(session_id, 1, 7) != 'memory/' AND substring(session_id, 1, 3) != 'kb/' AND substring(session_id, 1, 9) != 'a2a/push/' AND substring(session_id, 1, 10) != 'ui/signin/' AND substring(session_id, 1, 12) != 'mcp/session/' AND substring(session_id, 1, 4) != 'bus/' AND substring(session_id, 1, 7) != 'config/'
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
            WHERE substring(session_id, 1, 6) != 'notes/' AND substring(session_id, 1, 7) != 'memory/' AND substring(session_id, 1, 3) != 'kb/' AND substring(session_id, 1, 9) != 'a2a/push/' AND substring(session_id, 1, 10) != 'ui/signin/' AND substring(session_id, 1, 12) != 'mcp/session/' AND substring(session_id, 1, 4) != 'bus/' AND substring(session_id, 1, 7) != 'config/'
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
