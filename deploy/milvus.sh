#!/usr/bin/env bash
# Milvus without Docker, from PyPI, in a venv in the cache.
#
#   deploy/milvus.sh install   create the venv, install the package (idempotent)
#   deploy/milvus.sh start     start the server (gRPC on 127.0.0.1:19530)
#   deploy/milvus.sh wait      wait until the server is healthy
#   deploy/milvus.sh stop      stop the server
#   deploy/milvus.sh status    say whether it runs
#
# MILVUS_ENGINE picks the package (see README.md for why the default):
#   milvus (default)  the `milvus` package: the real Milvus standalone server
#                     (Go binary with embedded etcd and RocksMQ, 2.3.5)
#   lite              `milvus-lite` 3.x: a Python reimplementation of the gRPC
#                     API on faiss and pyarrow (needs pymilvus too)
#
# Environment: MILVUS_ENGINE, MILVUS_PORT (19530), MILVUS_HEALTH_PORT (9091,
# /healthz and metrics), MILVUS_WAIT_SECONDS (180), MILVUS_START_ATTEMPTS (3),
# MILVUS_PY_VERSION (2.3.5), MILVUS_LITE_VERSION (3.2.2), PYTHON (python3),
# plus TROUPE_DEPLOY_HOME and TROUPE_DEPLOY_RUN (see lib.sh).
set -euo pipefail

SERVICE=milvus
# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MILVUS_ENGINE="${MILVUS_ENGINE:-milvus}"
MILVUS_HOST=127.0.0.1
MILVUS_PORT="${MILVUS_PORT:-19530}"
MILVUS_HEALTH_PORT="${MILVUS_HEALTH_PORT:-9091}"
MILVUS_WAIT_SECONDS="${MILVUS_WAIT_SECONDS:-180}"
MILVUS_PY_VERSION="${MILVUS_PY_VERSION:-2.3.5}"
MILVUS_LITE_VERSION="${MILVUS_LITE_VERSION:-3.2.2}"
PYTHON="${PYTHON:-python3}"

case "$MILVUS_ENGINE" in
milvus) HOME_DIR="$DEPLOY_HOME/milvus-$MILVUS_PY_VERSION" ;;
lite) HOME_DIR="$DEPLOY_HOME/milvus-lite-$MILVUS_LITE_VERSION" ;;
*) die "MILVUS_ENGINE must be milvus or lite, not '$MILVUS_ENGINE'" ;;
esac
VENV="$HOME_DIR/venv"
RUN_DIR="$DEPLOY_RUN/milvus"
PIDFILE="$RUN_DIR/milvus.pid"
LOGFILE="$RUN_DIR/milvus.log"
HEALTH_PORT_FILE="$RUN_DIR/health_port"

cmd_install() {
	if [ -f "$HOME_DIR/.complete" ]; then
		log "$MILVUS_ENGINE already installed in $HOME_DIR"
		return 0
	fi
	command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found: install Python 3.10+"
	mkdir -p "$HOME_DIR"
	if [ ! -x "$VENV/bin/python" ]; then
		log "creating venv $VENV"
		"$PYTHON" -m venv "$VENV" ||
			die "python venv failed: install the venv module (apt-get install -y python3-venv)"
	fi
	local pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
	if [ "$MILVUS_ENGINE" = milvus ]; then
		log "installing milvus==$MILVUS_PY_VERSION from PyPI"
		"${pip[@]}" "milvus==$MILVUS_PY_VERSION"
		# The wheel carries the server binary and its libraries xz-compressed;
		# unpack them once here rather than on every start.
		log "unpacking the server binary into $HOME_DIR/server/bin"
		"$VENV/bin/python" -c 'import sys, milvus; milvus._initialize_data_files(sys.argv[1])' "$HOME_DIR/server"
		[ -x "$HOME_DIR/server/bin/milvus" ] || die "milvus binary missing after unpacking"
	else
		log "installing milvus-lite==$MILVUS_LITE_VERSION and pymilvus from PyPI"
		"${pip[@]}" "milvus-lite==$MILVUS_LITE_VERSION" pymilvus
	fi
	touch "$HOME_DIR/.complete"
	log "installed $MILVUS_ENGINE into $HOME_DIR"
}

cmd_start() {
	[ -f "$HOME_DIR/.complete" ] || die "not installed: run '$0 install' first"
	if pid_alive "$PIDFILE"; then
		log "already running (pid $(cat "$PIDFILE"))"
		return 0
	fi
	if port_open "$MILVUS_HOST" "$MILVUS_PORT"; then
		die "port $MILVUS_HOST:$MILVUS_PORT is taken by another process"
	fi
	mkdir -p "$RUN_DIR"
	rm -f "$HEALTH_PORT_FILE"
	log "starting $MILVUS_ENGINE on $MILVUS_HOST:$MILVUS_PORT (log: $LOGFILE)"
	if [ "$MILVUS_ENGINE" = milvus ]; then
		mkdir -p "$RUN_DIR/server"
		# The binaries unpacked at install time are shared through a link.
		ln -sfn "$HOME_DIR/server/bin" "$RUN_DIR/server/bin"
		start_bg "$PIDFILE" "$LOGFILE" "$VENV/bin/python" -u "$DEPLOY_DIR/milvus/serve.py" \
			--data "$RUN_DIR/server" --port "$MILVUS_PORT" \
			--health-port "$MILVUS_HEALTH_PORT" --health-port-file "$HEALTH_PORT_FILE"
	else
		start_bg "$PIDFILE" "$LOGFILE" "$VENV/bin/milvus-lite" server \
			--data-dir "$RUN_DIR/lite" --host "$MILVUS_HOST" --port "$MILVUS_PORT"
	fi
}

# healthy: the gRPC port accepts connections and, for the real server,
# GET /healthz answers OK.
healthy() {
	port_open "$MILVUS_HOST" "$MILVUS_PORT" || return 1
	[ "$MILVUS_ENGINE" = milvus ] || return 0
	[ -s "$HEALTH_PORT_FILE" ] || return 1
	local port reply
	port="$(cat "$HEALTH_PORT_FILE")"
	reply="$(
		exec 3<>"/dev/tcp/$MILVUS_HOST/$port" || exit 1
		printf 'GET /healthz HTTP/1.0\r\nHost: %s\r\n\r\n' "$MILVUS_HOST" >&3
		timeout 5 cat <&3
	)" || return 1
	grep -q 'OK' <<<"$reply"
}

server_logs() {
	# The server's own logs, for the tail shown when a wait fails.
	if [ "$MILVUS_ENGINE" = milvus ] && [ -f "$RUN_DIR/server/logs/milvus-stdout.log" ]; then
		show_tail "$RUN_DIR/server/logs/milvus-stdout.log"
		show_tail "$RUN_DIR/server/logs/milvus-stderr.log"
	fi
}

# cmd_wait waits until the server is healthy. Milvus 2.3 can exit during
# start-up when an earlier run was not stopped cleanly: its sessions stay in
# the embedded etcd until their lease ends (common.session.ttl, 30 s) and the
# new proxy dials the stale addresses. So a server that dies while starting
# is started again, up to MILVUS_START_ATTEMPTS times in all.
cmd_wait() {
	local attempt attempts="${MILVUS_START_ATTEMPTS:-3}"
	for ((attempt = 1; ; attempt++)); do
		if wait_until "$MILVUS_WAIT_SECONDS" "$PIDFILE" "$LOGFILE" \
			"milvus ($MILVUS_ENGINE) on $MILVUS_HOST:$MILVUS_PORT" healthy; then
			return 0
		fi
		server_logs
		if pid_alive "$PIDFILE" || ((attempt >= attempts)); then
			return 1
		fi
		log "the server exited while starting (attempt $attempt of $attempts); starting it again in 15 s, after stale sessions of an earlier run have had time to expire"
		sleep 15
		cmd_start
	done
}

cmd_stop() {
	# Milvus 2.3 standalone often hangs in its graceful shutdown (components
	# keep retrying the root coordinator that already stopped), so the grace
	# period is short; etcd and RocksMQ recover from the KILL on next start.
	stop_bg "$PIDFILE" "${MILVUS_STOP_GRACE_SECONDS:-10}"
}

cmd_status() {
	if pid_alive "$PIDFILE"; then
		echo "milvus ($MILVUS_ENGINE) running (pid $(cat "$PIDFILE")) on $MILVUS_HOST:$MILVUS_PORT"
	else
		echo "milvus stopped"
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
