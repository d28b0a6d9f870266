-- The probe of a log whose writes failed (Log.Writable, eventlog.Health): while
-- an outage lasts, a node asks its log every second or so whether writes go
-- through again, and the log answers with an INSERT of one row here, which proves
-- what a query would not: that the database takes writes (its user may write, its
-- disk has room for a part). No reader reads this table. A ReplacingMergeTree of
-- one key: every probe writes the key 1, and merges keep the row with the greatest
-- probed_us (a version column must be unsigned in ClickHouse 18.16), so the table
-- holds one row once its parts merge, however often it was probed.
CREATE TABLE IF NOT EXISTS write_probes (
    probe     UInt8,
    probed_us UInt64
) ENGINE = ReplacingMergeTree(probed_us)
ORDER BY probe;
