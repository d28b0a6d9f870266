-- Marks of what a partition's owner has published (eventlog.Releasing.MarkPublished;
-- see the package doc).
--
-- While it holds partitions, an owner adds a row per partition every few seconds
-- (when its sessions appended anything since the last): every event it appended
-- for them whose TS is before published_us is on the bus. A next owner taking a
-- partition from a node that died unreleased publishes again only the sessions
-- that ended at or after the greatest mark of the partition's latest ownership
-- row (Owners). As with releases, a mark counts only while its epoch is the
-- partition's current one and its node the owner at that epoch. An INSERT per
-- period, no ALTER … UPDATE: ReplacingMergeTree keeps, of the rows of one
-- (partition, epoch, node), the one with the greatest published_us (a version
-- column must be unsigned in ClickHouse 18.16); reads take the max of the rows
-- not merged yet.
CREATE TABLE IF NOT EXISTS published_marks (
    partition    UInt32,
    epoch        UInt64,
    node         String,
    published_us UInt64
) ENGINE = ReplacingMergeTree(published_us)
ORDER BY (partition, epoch, node);
