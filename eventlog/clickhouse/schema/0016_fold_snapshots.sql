-- Fold snapshots (eventlog.Snapshots; see the package doc): a derived cache of a
-- session's folded state at some seq, which its session actor, re-activated,
-- folds the events after instead of its whole history. Never a source of truth:
-- the session actor uses one only when its key is its own, its checksum holds and
-- the log's event at its seq is the one it was folded from.
--
-- An INSERT per save, no ALTER ... UPDATE: ReplacingMergeTree keeps, of a
-- session's rows, the one with the greatest saved_us (when it was saved, unique
-- and rising per Log; a version column must be unsigned in ClickHouse 18.16), and
-- reads take the latest saved of the rows not merged yet: the last saved replaces
-- the one kept, whatever its seq (a snapshot beyond the log, which no load uses,
-- does not stay). The states are large (megabytes at thousands of tasks): one row
-- per granule, so that a read decompresses the state asked for and not those of
-- the sessions beside it (18.16 has no adaptive granularity). A new table: older
-- builds run beside it, and neither read nor write it.
CREATE TABLE IF NOT EXISTS fold_snapshots (
    session_id String,
    saved_us   UInt64,
    seq        UInt64,
    event_id   String,
    event_sum  String,
    rules      Int64,
    codec      String,
    agents     String,
    state      String,
    sum        String
) ENGINE = ReplacingMergeTree(saved_us)
ORDER BY session_id
SETTINGS index_granularity = 1;
