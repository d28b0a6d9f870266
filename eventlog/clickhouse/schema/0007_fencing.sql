-- Fencing of stale partition owners (eventlog.Fencing; see the package doc).
--
-- Each event keeps the ownership epoch it was appended under: 0 for Append
-- without a lease, and for every event written before this version (a UInt64
-- column added without a default reads as 0 in older parts). epoch joins the
-- sorting key, so that a stale owner's row and the new owner's row at one
-- (session_id, seq) both survive merges: ReplacingMergeTree keeps one row per
-- sorting key, the last inserted, which could be the stale one. Read picks the
-- highest epoch. A row written twice still collapses (it has one epoch), and the
-- primary key stays (session_id, seq).
--
-- Neither ClickHouse 18.16 nor current releases add a sorting-key column with a
-- DEFAULT, and 18.16 has no ADD COLUMN IF NOT EXISTS: migrate skips an ALTER
-- TABLE ... ADD COLUMN whose column exists (schema.go), so this file, too, can
-- be applied twice.
ALTER TABLE events ADD COLUMN epoch UInt64, MODIFY ORDER BY (session_id, seq, epoch);

-- Who owns each partition of troupe.tasks: Own adds a row per partition it takes,
-- under an epoch above every epoch recorded before (of any partition); a
-- partition's current epoch is its highest. ReplacingMergeTree: an insert retried
-- after an unknown outcome collapses.
CREATE TABLE IF NOT EXISTS ownership (
    partition UInt32,
    epoch     UInt64,
    node      String,
    ts_us     Int64
) ENGINE = ReplacingMergeTree()
ORDER BY (partition, epoch, node);
