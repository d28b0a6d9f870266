-- Where the events with an unconventional ID are stored, ordered by ID, so that
-- the writer finds an ID appended again at another (session, seq) without
-- scanning the events table. Session actors name an event "<session_id>/<seq>"
-- (its canonical ID): such an event is found at its position in events itself,
-- so only the others are listed here, and the table stays small. Filled by a
-- materialized view in the same INSERT as the events.
CREATE TABLE IF NOT EXISTS event_ids (
    id         String,
    session_id String,
    seq        UInt64
) ENGINE = ReplacingMergeTree()
ORDER BY id
SETTINGS index_granularity = 2048;

CREATE MATERIALIZED VIEW IF NOT EXISTS event_ids_mv TO event_ids AS
SELECT id, session_id, seq FROM events
WHERE id != concat(session_id, '/', toString(seq));
