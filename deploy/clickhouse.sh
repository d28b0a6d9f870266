#!/usr/bin/env bash
# ClickHouse without Docker: Debian's clickhouse-server package (18.16 on
# bookworm), run as a plain background process with its data and logs in the
# run dir (systemd is neither needed nor used).
#
#   deploy/clickhouse.sh install   apt-get install clickhouse-server (idempotent)
#   deploy/clickhouse.sh start     start the server
#   deploy/clickhouse.sh wait      wait until it answers SELECT 1 on the native port
#   deploy/clickhouse.sh stop      stop the server
#   deploy/clickhouse.sh status    say whether it runs
#
# Environment: CLICKHOUSE_HOST (127.0.0.1), CLICKHOUSE_PORT (9000, native
# protocol), CLICKHOUSE_HTTP_PORT (8123), CLICKHOUSE_WAIT_SECONDS (120), plus
# TROUPE_DEPLOY_HOME and TROUPE_DEPLOY_RUN (see lib.sh).
#
# Known with 18.16 and clickhouse-go/v2: use the native port (HTTP mode
# fails); batch inserts need an explicit column list; Exec of INSERT ... VALUES
# hangs, so insert through PrepareBatch.
set -euo pipefail

SERVICE=clickhouse
# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CLICKHOUSE_HOST="${CLICKHOUSE_HOST:-127.0.0.1}"
CLICKHOUSE_PORT="${CLICKHOUSE_PORT:-9000}"
CLICKHOUSE_HTTP_PORT="${CLICKHOUSE_HTTP_PORT:-8123}"
CLICKHOUSE_WAIT_SECONDS="${CLICKHOUSE_WAIT_SECONDS:-120}"

RUN_DIR="$DEPLOY_RUN/clickhouse"
PIDFILE="$RUN_DIR/clickhouse.pid"
LOGFILE="$RUN_DIR/log/clickhouse-server.log"
OUTFILE="$RUN_DIR/log/stdout.log"

server_bin() {
	command -v clickhouse-server 2>/dev/null || { [ -x /usr/sbin/clickhouse-server ] && echo /usr/sbin/clickhouse-server; }
}

cmd_install() {
	if [ -n "$(server_bin)" ] && command -v clickhouse-client >/dev/null 2>&1; then
		log "clickhouse-server already installed ($(server_bin))"
		return 0
	fi
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install clickhouse-server with your package manager"
	log "installing clickhouse-server and clickhouse-client with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	# Refresh the package lists only when they are missing or do not know the package.
	# Refresh the lists first: on a fresh machine they may be missing or stale.
	# apt-get's chatter goes to stderr: stdout of services.sh is for env vars.
	as_root apt-get update -q >&2
	as_root apt-get install -y -q --no-install-recommends clickhouse-server clickhouse-client >&2
	[ -n "$(server_bin)" ] || die "clickhouse-server missing after apt-get install"
}

cmd_start() {
	local bin
	bin="$(server_bin)"
	[ -n "$bin" ] || die "not installed: run '$0 install' first"
	if pid_alive "$PIDFILE"; then
		log "already running (pid $(cat "$PIDFILE"))"
		return 0
	fi
	if port_open "$CLICKHOUSE_HOST" "$CLICKHOUSE_PORT"; then
		die "port $CLICKHOUSE_HOST:$CLICKHOUSE_PORT is taken by another process"
	fi
	mkdir -p "$RUN_DIR"/{data,tmp,user_files,format_schemas,log,etc}
	render "$DEPLOY_DIR/clickhouse/config.xml" "$RUN_DIR/etc/config.xml" \
		"RUN_DIR=$RUN_DIR" "HOST=$CLICKHOUSE_HOST" \
		"TCP_PORT=$CLICKHOUSE_PORT" "HTTP_PORT=$CLICKHOUSE_HTTP_PORT"
	cp "$DEPLOY_DIR/clickhouse/users.xml" "$RUN_DIR/etc/users.xml"
	log "starting server on $CLICKHOUSE_HOST:$CLICKHOUSE_PORT (log: $LOGFILE)"
	# Run from the run dir: the server writes its status and preprocessed
	# config files next to its working dir and config.
	(cd "$RUN_DIR" && start_bg "$PIDFILE" "$OUTFILE" "$bin" "--config-file=$RUN_DIR/etc/config.xml")
}

server_ready() {
	clickhouse-client --host "$CLICKHOUSE_HOST" --port "$CLICKHOUSE_PORT" \
		--connect_timeout 2 --query "SELECT 1" | grep -qx 1
}

cmd_wait() {
	wait_until "$CLICKHOUSE_WAIT_SECONDS" "$PIDFILE" "$OUTFILE" \
		"clickhouse on $CLICKHOUSE_HOST:$CLICKHOUSE_PORT" server_ready ||
		{
			show_tail "$LOGFILE"
			return 1
		}
}

cmd_stop() {
	stop_bg "$PIDFILE" 30
}

cmd_status() {
	if pid_alive "$PIDFILE"; then
		echo "clickhouse running (pid $(cat "$PIDFILE")) on $CLICKHOUSE_HOST:$CLICKHOUSE_PORT"
	else
		echo "clickhouse stopped"
		return 1
	fi
}

case "${1:-}" in
install) cmd_install ;;
start) cmd_start ;;
wait) cmd_wait ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
	echo "usage: $0 install|start|wait|stop|status" >&2
	exit 2
	;;
esac
