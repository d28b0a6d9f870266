-- The events a stale partition owner wrote after another node took the
-- partition (the race window of fencing, see the package doc): the writer lists
-- here the events of each batch whose lease it finds taken after the INSERT (the
-- batch it fails with ErrFenced). The aggregates count every row of events,
-- whatever its epoch: a stale task.completed or task.failed ends a session in
-- sessions, session_summaries and open_tasks although its new owner still runs
-- it, and a stale task.submitted keeps an ended one running. Read leaves out the
-- rows listed here that end a session (no owner wrote after them), Sessions
-- checks the sessions listed here against their events as Read returns them, and
-- the running listing reads those with a row not settled among its candidates.
--
-- task is the key open_tasks gives the event (the ID of a task.submitted, the
-- correlation ID of an ending event, '' otherwise). settled is 1 on the copy
-- Sessions adds once it found the session ended without these events: the
-- running listing then stops reading it. ReplacingMergeTree(settled): the copies
-- of an event collapse into the settled one.
CREATE TABLE IF NOT EXISTS fenced_events (
    session_id String,
    seq        UInt64,
    epoch      UInt64,
    type       String,
    task       String,
    settled    UInt8
) ENGINE = ReplacingMergeTree(settled)
ORDER BY (session_id, seq, epoch);
