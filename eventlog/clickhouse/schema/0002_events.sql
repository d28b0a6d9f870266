-- One row per event: the envelope's fields as columns, the payload's JSON as a
-- String, byte for byte as appended (query it with visitParamExtract*, which
-- ClickHouse 18.16 has, unlike JSONExtract*). ts is the envelope's TS in Unix
-- microseconds (18.16 has no DateTime64).
--
-- ReplacingMergeTree ordered by (session_id, seq): an event written twice (the
-- writer retried an insert whose outcome it could not know) collapses into one
-- row when its parts merge; readers dedupe the rows that have not merged yet.
-- No partition key: replacing works within one partition only. A granule of
-- 1024 rows keeps a Read of one session from decoding many others' payloads.
CREATE TABLE IF NOT EXISTS events (
    session_id     String,
    seq            UInt64,
    id             String,
    type           String,
    version        Int64,
    causation_id   String,
    correlation_id String,
    ts             Int64,
    actor          String,
    payload        String
) ENGINE = ReplacingMergeTree()
ORDER BY (session_id, seq)
SETTINGS index_granularity = 1024;
