-- The versions of this schema applied to the database: one row per applied file
-- (0001_schema_migrations.sql is version 1). Open applies the files it does not
-- find here, in order, and refuses a database that has a version it does not know.
-- ReplacingMergeTree: two nodes migrating at once record a version twice, and
-- the copies collapse.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    UInt32,
    name       String,
    applied_us Int64
) ENGINE = ReplacingMergeTree()
ORDER BY version;
