#!/usr/bin/env bash
# A cluster of Troupe nodes on this machine, on the Kafka and ClickHouse that
# deploy/services.sh started, without Docker.
#
#   deploy/cluster.sh start [N]   build cmd/node once, start nodes 1..N (default 3)
#                                 that do not run yet, wait until each answers
#                                 and the nodes share troupe.tasks' partitions
#   deploy/cluster.sh stop        stop every node (TERM, then KILL after a grace)
#   deploy/cluster.sh status      say which nodes run and how many partitions of
#                                 troupe.tasks each owns
#   deploy/cluster.sh kill NODE   SIGKILL one node (node2, or 2), to watch the
#                                 others resume its sessions; `start` restarts it
#
# Node i is `node serve --node-id node<i> --http 127.0.0.1:<8080+i>`. The binary
# is $TROUPE_DEPLOY_RUN/troupe-node; PID files and logs are in
# $TROUPE_DEPLOY_RUN/cluster/node<i>.pid and node<i>.log.
#
# Environment:
#   TROUPE_KAFKA            brokers (when unset: what `services.sh env` prints)
#   TROUPE_CLICKHOUSE       the event log the nodes share (when unset: what
#                           `services.sh env` prints); set but empty, the nodes
#                           share the SQLite log in $TROUPE_DEPLOY_RUN/cluster/data
#   TROUPE_CLUSTER_ROLES    roles per node, space-separated, node1 first, e.g.
#                           "sessions,models sessions,models sessions,tools"
#                           (a node without a word gets all)
#   TROUPE_CLUSTER_HTTP_BASE  node i listens on port BASE+i (default 8080)
#   TROUPE_CLUSTER_WAIT_SECONDS  how long start waits for each node (60)
# The nodes read the rest themselves: TROUPE_KAFKA_GROUP, TROUPE_KAFKA_TOPIC_PREFIX,
# TROUPE_MODEL, API keys…
set -euo pipefail

SERVICE=cluster
# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RUN_DIR="$DEPLOY_RUN/cluster"
BIN="$DEPLOY_RUN/troupe-node"
HTTP_BASE="${TROUPE_CLUSTER_HTTP_BASE:-8080}"
WAIT_SECONDS="${TROUPE_CLUSTER_WAIT_SECONDS:-60}"

# services_env NAME: the value services.sh exports for NAME.
services_env() { "$DEPLOY_DIR/services.sh" env | sed -n "s/^export $1=//p"; }
TROUPE_KAFKA="${TROUPE_KAFKA:-$(services_env TROUPE_KAFKA)}"
# Set but empty means no ClickHouse: the nodes share a SQLite log.
TROUPE_CLICKHOUSE="${TROUPE_CLICKHOUSE-$(services_env TROUPE_CLICKHOUSE)}"

# node_name ARG: node2 for "node2" or "2".
node_name() {
	case "$1" in
	node[0-9]*) echo "$1" ;;
	[0-9]*) echo "node$1" ;;
	*) die "not a node: $1 (want node<i> or <i>)" ;;
	esac
}

# nodes: the names of the nodes that have a PID file, in order.
nodes() {
	local f
	for f in "$RUN_DIR"/node*.pid; do
		[ -e "$f" ] || continue
		basename "$f" .pid
	done | sort -V
}

# reachable ADDR WHAT: fails with a hint when nothing listens on host:port ADDR.
reachable() {
	local addr="$1" what="$2"
	port_open "${addr%:*}" "${addr##*:}" ||
		die "$what is not answering on $addr: start it with eval \"\$(deploy/services.sh up)\""
}

healthy() {
	curl -fsS --max-time 2 "http://$1/healthz"
}

cmd_start() {
	local count="${1:-3}" i name addr roles args
	case "$count" in '' | *[!0-9]* | 0) die "start: N must be a positive number, not '$count'" ;; esac
	reachable "${TROUPE_KAFKA%%,*}" kafka
	if [ -n "${TROUPE_CLICKHOUSE:-}" ]; then
		reachable "$TROUPE_CLICKHOUSE" clickhouse
	fi
	command -v curl >/dev/null 2>&1 || die "curl not found"
	mkdir -p "$RUN_DIR/data"
	log "building $BIN"
	(cd "$DEPLOY_DIR/.." && go build -o "$BIN" ./cmd/node) || die "go build failed"
	read -r -a roles <<<"${TROUPE_CLUSTER_ROLES:-}"
	local started=()
	for ((i = 1; i <= count; i++)); do
		name="node$i"
		addr="127.0.0.1:$((HTTP_BASE + i))"
		if pid_alive "$RUN_DIR/$name.pid"; then
			log "$name already running (pid $(cat "$RUN_DIR/$name.pid"))"
			continue
		fi
		if port_open 127.0.0.1 "$((HTTP_BASE + i))"; then
			die "port $addr is taken by another process"
		fi
		args=(serve --kafka "$TROUPE_KAFKA" --node-id "$name" --http "$addr"
			--roles "${roles[i - 1]:-all}" --data "$RUN_DIR/data")
		if [ -n "${TROUPE_CLICKHOUSE:-}" ]; then
			args+=(--clickhouse "$TROUPE_CLICKHOUSE")
		fi
		log "starting $name on http://$addr, roles ${roles[i - 1]:-all} (log: $RUN_DIR/$name.log)"
		start_bg "$RUN_DIR/$name.pid" "$RUN_DIR/$name.log" "$BIN" "${args[@]}"
		echo "$addr" >"$RUN_DIR/$name.http"
		echo "${roles[i - 1]:-all}" >"$RUN_DIR/$name.roles"
		started+=("$name")
	done
	for name in "${started[@]}"; do
		wait_until "$WAIT_SECONDS" "$RUN_DIR/$name.pid" "$RUN_DIR/$name.log" "$name" \
			healthy "$(cat "$RUN_DIR/$name.http")"
	done
	if [ "${#started[@]}" -gt 0 ]; then
		wait_settled
	fi
	if [ -n "${TROUPE_CLICKHOUSE:-}" ]; then
		log "event log: clickhouse $TROUPE_CLICKHOUSE; kafka $TROUPE_KAFKA"
	else
		log "event log: $RUN_DIR/data (shared); kafka $TROUPE_KAFKA"
	fi
}

# metric ADDR NAME: the value of the unlabelled metric NAME of the node at ADDR.
metric() {
	curl -fsS --max-time 2 "http://$1/metrics" 2>/dev/null | awk -v m="$2" '$1 == m {print $2}'
}

# settled: true when the running nodes own every partition of troupe.tasks
# between them, each once, and each node with the sessions role owns some: the
# group's rebalance after a start is over (the first node to join owns all
# partitions until the others have joined).
settled() {
	local name addr owned roles total=0 sum=0
	for name in $(nodes); do
		pid_alive "$RUN_DIR/$name.pid" || continue
		addr="$(cat "$RUN_DIR/$name.http")"
		owned="$(metric "$addr" troupe_cluster_partitions_owned)"
		[ -n "$owned" ] || return 1
		owned="${owned%.*}"
		roles="$(cat "$RUN_DIR/$name.roles" 2>/dev/null || echo all)"
		case ",$roles," in
		*,all,* | *,sessions,*) [ "$owned" -gt 0 ] || return 1 ;;
		esac
		sum=$((sum + owned))
		[ "$total" -gt 0 ] || total="$(metric "$addr" troupe_cluster_partitions_total)"
		total="${total%.*}"
		total="${total:-0}"
	done
	[ "$total" -gt 0 ] && [ "$sum" -eq "$total" ]
}

# wait_settled: waits until the nodes share the partitions, so that status and
# a kill right after start see the cluster as it will run. A node of the same
# group that this script did not start keeps some: then it says so and goes on.
wait_settled() {
	local i
	for ((i = 0; i < WAIT_SECONDS; i++)); do
		if settled; then
			log "partitions of troupe.tasks assigned: $(cmd_status | sed -n 's/^\(node[0-9]*\) .*partitions owned: \(.*\)$/\1 \2/p' | paste -sd, - | sed 's/,/, /g')"
			return 0
		fi
		sleep 1
	done
	log "warning: after ${WAIT_SECONDS}s these nodes do not share the partitions of troupe.tasks, each with some (more nodes than partitions, or another node in group ${TROUPE_KAFKA_GROUP:-troupe}?); see $0 status"
}

cmd_stop() {
	local name pid pids=() rc=0
	# All at once: one rebalance, instead of one per node.
	for name in $(nodes); do
		(SERVICE="$name" stop_bg "$RUN_DIR/$name.pid" 30) &
		pids+=($!)
	done
	[ "${#pids[@]}" -gt 0 ] || log "no nodes"
	for pid in "${pids[@]}"; do
		wait "$pid" || rc=1
	done
	return "$rc"
}

cmd_status() {
	local name addr owned rc=0 any=0
	for name in $(nodes); do
		any=1
		addr="$(cat "$RUN_DIR/$name.http" 2>/dev/null || echo '?')"
		if pid_alive "$RUN_DIR/$name.pid"; then
			owned="$(curl -fsS --max-time 2 "http://$addr/metrics" 2>/dev/null |
				awk '$1 == "troupe_cluster_partitions_owned" {print $2}')" || true
			echo "$name running (pid $(cat "$RUN_DIR/$name.pid")) on http://$addr, partitions owned: ${owned:-?}"
		else
			echo "$name stopped (log: $RUN_DIR/$name.log)"
			rc=1
		fi
	done
	if [ "$any" -eq 0 ]; then
		echo "cluster stopped"
		return 1
	fi
	return "$rc"
}

cmd_kill() {
	local name pid i
	name="$(node_name "${1:-}")"
	pid_alive "$RUN_DIR/$name.pid" || die "$name is not running"
	pid="$(cat "$RUN_DIR/$name.pid")"
	log "kill -9 $name (pid $pid)"
	kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"
	for ((i = 0; i < 50; i++)); do
		pid_alive "$RUN_DIR/$name.pid" || break
		sleep 0.1
	done
	log "$name is gone; Kafka moves its partitions after the 10 s session timeout"
}

case "${1:-}" in
start) cmd_start "${2:-3}" ;;
stop) cmd_stop ;;
status) cmd_status ;;
kill)
	[ $# -eq 2 ] || die "usage: $0 kill NODE"
	cmd_kill "$2"
	;;
*)
	echo "usage: $0 start [N] | stop | status | kill NODE" >&2
	exit 2
	;;
esac
