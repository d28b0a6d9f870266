-- Clean releases of partitions (eventlog.Releasing; see the package doc).
--
-- An owner that gives its partitions up cleanly, once the bus has every event it
-- appended for them, adds a row per partition at the epoch it owned it under
-- (Release). A release counts only while its epoch is the partition's current one
-- and its node the owner at that epoch (Owners matches each partition's latest
-- ownership row): a release that lands after a later Own took the partition is
-- left behind, harmless. ReplacingMergeTree: an insert retried after an unknown
-- outcome collapses.
CREATE TABLE IF NOT EXISTS releases (
    partition   UInt32,
    epoch       UInt64,
    node        String,
    released_us Int64
) ENGINE = ReplacingMergeTree()
ORDER BY (partition, epoch, node);
