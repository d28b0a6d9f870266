-- session_outcomes of 0015 again, counting a fork's steps and duration from its
-- session.forked event (the last one: a fork of a fork holds its parent's too),
-- as Report does (eventlog.SessionUsage): the events before it are its parent's,
-- copied with their times, and counted from them a fork made minutes after its
-- parent lasted those minutes. A session that is no fork has fork_at 0 (the join
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
