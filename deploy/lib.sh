# shellcheck shell=bash
# Shared helpers for the service scripts in deploy/. Source it; do not run it.
#
# Layout (override with the environment):
#   TROUPE_DEPLOY_HOME  cache of installed software, kept across runs
#                       (default: $HOME/.cache/troupe-deploy)
#   TROUPE_DEPLOY_RUN   data, logs and PID files of running services
#                       (default: ${TMPDIR:-/tmp}/troupe-deploy-$(id -u))

# shellcheck disable=SC2034 # used by the scripts that source this file
DEPLOY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC2034
DEPLOY_HOME="${TROUPE_DEPLOY_HOME:-${HOME:-/tmp}/.cache/troupe-deploy}"
# shellcheck disable=SC2034
DEPLOY_RUN="${TROUPE_DEPLOY_RUN:-${TMPDIR:-/tmp}/troupe-deploy-$(id -u)}"

log() { printf '[%s] %s\n' "${SERVICE:-deploy}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# as_root runs a command as root, through sudo when needed.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root for: $*"
	fi
}

# pid_alive FILE: true when FILE names a live process.
pid_alive() {
	local f="$1" pid
	[ -s "$f" ] || return 1
	pid="$(cat "$f")"
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# start_bg PIDFILE LOGFILE CMD...: runs CMD in its own session (so stop can end
# the whole process group, children included) with output appended to LOGFILE.
# CMD keeps no other descriptor of the caller's: services.sh up holds its stdout
# on fd 3, and a service that inherited it would keep the pipe of
# `eval "$(deploy/services.sh up)"` open, so the shell would wait for ever.
start_bg() {
	local pidfile="$1" logfile="$2"
	shift 2
	mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"
	printf '\n===== %s start: %s\n' "$(date -u +%FT%TZ)" "$*" >>"$logfile"
	setsid "$@" >>"$logfile" 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
	echo $! >"$pidfile"
}

# stop_bg PIDFILE [GRACE_SECONDS]: TERM the process group, wait, then KILL.
stop_bg() {
	local pidfile="$1" grace="${2:-20}" pid i
	if ! pid_alive "$pidfile"; then
		rm -f "$pidfile"
		log "not running"
		return 0
	fi
	pid="$(cat "$pidfile")"
	log "stopping (pid $pid)"
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do
		if ! kill -0 "$pid" 2>/dev/null && ! pgrp_alive "$pid"; then
			rm -f "$pidfile"
			log "stopped after $((i / 10)).$((i % 10))s"
			return 0
		fi
		sleep 0.1
	done
	log "still running after ${grace}s, sending KILL"
	kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
	rm -f "$pidfile"
}

# pgrp_alive PGID: true while any process of the group is alive.
pgrp_alive() {
	kill -0 -- "-$1" 2>/dev/null
}

# port_open HOST PORT: true when a TCP connect succeeds.
port_open() {
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# wait_until SECONDS PIDFILE LOGFILE WHAT CMD...: polls CMD until it succeeds.
# Fails with the tail of LOGFILE when the time runs out or the process dies.
wait_until() {
	local timeout="$1" pidfile="$2" logfile="$3" what="$4" start now
	shift 4
	start="$(date +%s)"
	while true; do
		if "$@" >/dev/null 2>&1; then
			log "$what ready after $(($(date +%s) - start))s"
			return 0
		fi
		if [ -n "$pidfile" ] && ! pid_alive "$pidfile"; then
			log "$what: process is not running"
			show_tail "$logfile"
			return 1
		fi
		now="$(date +%s)"
		if ((now - start >= timeout)); then
			log "$what not ready after ${timeout}s"
			show_tail "$logfile"
			return 1
		fi
		sleep 1
	done
}

show_tail() {
	local f="$1"
	if [ -f "$f" ]; then
		log "last lines of $f:"
		tail -n 40 "$f" | sed 's/^/    /' >&2
	else
		log "no log at $f"
	fi
}

# render TEMPLATE OUT KEY=VALUE...: replaces @KEY@ with VALUE.
render() {
	local tpl="$1" out="$2" kv key val content
	shift 2
	content="$(cat "$tpl")"
	for kv in "$@"; do
		key="${kv%%=*}"
		val="${kv#*=}"
		content="${content//@${key}@/${val}}"
	done
	printf '%s\n' "$content" >"$out"
}
