#!/usr/bin/env bash
# Apache Kafka 4.x in KRaft mode (one process: broker + controller), without
# Docker. The broker jars come from Maven Central through mvn.
#
#   deploy/kafka.sh install   fetch the broker jars into the cache (idempotent)
#   deploy/kafka.sh start     format storage on first start, start the broker
#   deploy/kafka.sh wait      wait until the broker answers on its port
#   deploy/kafka.sh topics    create the topics listed in deploy/kafka/topics.txt
#   deploy/kafka.sh stop      stop the broker
#   deploy/kafka.sh status    say whether it runs
#
# Environment: KAFKA_VERSION (4.1.1), KAFKA_HOST (127.0.0.1), KAFKA_PORT (9092),
# KAFKA_CONTROLLER_PORT (9093), KAFKA_HEAP (512m), KAFKA_WAIT_SECONDS (180),
# KAFKA_ADVERTISED (host:port clients are told to connect to; default
# KAFKA_HOST:KAFKA_PORT, e.g. a proxy or load balancer in front of the broker),
# KAFKA_EXTRA_PROPERTIES (server.properties lines appended to the template's, e.g.
# "connections.max.idle.ms=5000"; later lines win), plus TROUPE_DEPLOY_HOME and
# TROUPE_DEPLOY_RUN (see lib.sh). A second broker runs beside the first with its
# own TROUPE_DEPLOY_RUN and ports.
set -euo pipefail

SERVICE=kafka
# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
KAFKA_HOST="${KAFKA_HOST:-127.0.0.1}"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_HEAP="${KAFKA_HEAP:-512m}"
KAFKA_WAIT_SECONDS="${KAFKA_WAIT_SECONDS:-180}"
KAFKA_ADVERTISED="${KAFKA_ADVERTISED:-$KAFKA_HOST:$KAFKA_PORT}"
KAFKA_EXTRA_PROPERTIES="${KAFKA_EXTRA_PROPERTIES:-}"

HOME_DIR="$DEPLOY_HOME/kafka-$KAFKA_VERSION"
JARS="$HOME_DIR/jars"
RUN_DIR="$DEPLOY_RUN/kafka"
PIDFILE="$RUN_DIR/kafka.pid"
LOGFILE="$RUN_DIR/kafka.log"
PROPS="$RUN_DIR/server.properties"

# java_opts HEAP: sets JAVA_OPTS to the JVM flags for the cached jars.
java_opts() {
	command -v java >/dev/null 2>&1 || die "java not found: install a JDK 17+ (apt-get install -y openjdk-17-jre-headless)"
	JAVA_OPTS=(-Xms64m "-Xmx$1" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
		-Djava.awt.headless=true
		"-Dlog4j2.configurationFile=$DEPLOY_DIR/kafka/log4j2.properties"
		"-Dkafka.logs.dir=$RUN_DIR/logs"
		-cp "$JARS/*")
}

# tool_cmd CLASS ARGS...: runs a short-lived Kafka tool (storage format, topic
# command) with a small heap and the quick-start JIT tier.
tool_cmd() {
	java_opts 256m
	java "${JAVA_OPTS[@]}" -XX:TieredStopAtLevel=1 "$@"
}

cmd_install() {
	if [ -f "$JARS/.complete" ]; then
		log "kafka $KAFKA_VERSION already installed in $JARS"
		return 0
	fi
	command -v mvn >/dev/null 2>&1 || die "mvn not found: install Maven (apt-get install -y maven)"
	mkdir -p "$HOME_DIR"
	# The broker (kafka_2.13) with the storage tool, kafka-tools for the topic
	# command (without Kafka Connect, which it drags in but the topic command
	# does not use), and a log4j2 binding for slf4j so the broker logs.
	cat >"$HOME_DIR/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>run.troupe.deploy</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>$KAFKA_VERSION</version>
      <exclusions>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-json</artifactId></exclusion>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-api</artifactId></exclusion>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-transforms</artifactId></exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>2.24.3</version>
    </dependency>
  </dependencies>
</project>
EOF
	log "fetching kafka_2.13:$KAFKA_VERSION and its runtime dependencies with mvn"
	rm -rf "$JARS.tmp"
	mvn -B -q -f "$HOME_DIR/pom.xml" \
		"-Dmaven.repo.local=$DEPLOY_HOME/m2" \
		dependency:copy-dependencies \
		-DincludeScope=runtime \
		"-DoutputDirectory=$JARS.tmp" >"$HOME_DIR/mvn.log" 2>&1 ||
		{
			tail -n 40 "$HOME_DIR/mvn.log" >&2
			die "mvn failed (full log: $HOME_DIR/mvn.log)"
		}
	[ -f "$JARS.tmp/kafka_2.13-$KAFKA_VERSION.jar" ] || die "kafka_2.13-$KAFKA_VERSION.jar missing after mvn"
	rm -rf "$JARS"
	mv "$JARS.tmp" "$JARS"
	touch "$JARS/.complete"
	log "installed $(find "$JARS" -name '*.jar' | wc -l) jars into $JARS"
}

cmd_start() {
	[ -f "$JARS/.complete" ] || die "not installed: run '$0 install' first"
	if pid_alive "$PIDFILE"; then
		log "already running (pid $(cat "$PIDFILE"))"
		return 0
	fi
	if port_open "$KAFKA_HOST" "$KAFKA_PORT"; then
		die "port $KAFKA_HOST:$KAFKA_PORT is taken by another process"
	fi
	mkdir -p "$RUN_DIR/data" "$RUN_DIR/logs"
	render "$DEPLOY_DIR/kafka/server.properties" "$PROPS" \
		"HOST=$KAFKA_HOST" "PORT=$KAFKA_PORT" "ADVERTISED=$KAFKA_ADVERTISED" \
		"CONTROLLER_PORT=$KAFKA_CONTROLLER_PORT" "LOG_DIRS=$RUN_DIR/data"
	if [ -n "$KAFKA_EXTRA_PROPERTIES" ]; then
		printf '\n# KAFKA_EXTRA_PROPERTIES\n%s\n' "$KAFKA_EXTRA_PROPERTIES" >>"$PROPS"
	fi
	if [ ! -f "$RUN_DIR/data/meta.properties" ]; then
		# A cluster ID is a random UUID in URL-safe base64 without padding
		# (what `StorageTool random-uuid` prints, minus a JVM start). Like
		# Kafka's Uuid.randomUuid, draw again while it starts with '-': the
		# format tool would read such an ID as an option (one start in 64
		# failed so: "argument --cluster-id/-t: expected one argument").
		local cluster_id="-"
		while [ "${cluster_id#-}" != "$cluster_id" ]; do
			cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
		done
		[ "${#cluster_id}" -eq 22 ] || die "could not make a cluster ID"
		log "formatting storage in $RUN_DIR/data (cluster $cluster_id)"
		tool_cmd kafka.tools.StorageTool format --ignore-formatted \
			-t "$cluster_id" -c "$PROPS" >>"$LOGFILE" 2>&1 ||
			{
				show_tail "$LOGFILE"
				die "storage format failed"
			}
	fi
	log "starting broker on $KAFKA_HOST:$KAFKA_PORT (log: $LOGFILE)"
	java_opts "$KAFKA_HEAP"
	start_bg "$PIDFILE" "$LOGFILE" java "${JAVA_OPTS[@]}" kafka.Kafka "$PROPS"
}

broker_ready() {
	# The port opens before the broker has registered with the controller;
	# the log line says it is ready to serve. The log is appended to across
	# restarts: only lines after the last start marker (from start_bg) count.
	port_open "$KAFKA_HOST" "$KAFKA_PORT" &&
		awk '/^===== /{ok=0} /Kafka Server started/{ok=1} END{exit !ok}' "$LOGFILE"
}

cmd_wait() {
	wait_until "$KAFKA_WAIT_SECONDS" "$PIDFILE" "$LOGFILE" "kafka on $KAFKA_HOST:$KAFKA_PORT" broker_ready
}

cmd_topics() {
	local name partitions replication retention sum
	local bootstrap="$KAFKA_HOST:$KAFKA_PORT"
	local file="${KAFKA_TOPICS_FILE:-$DEPLOY_DIR/kafka/topics.txt}"
	# Each topic command is a JVM start (~3 s): skip them when this data dir
	# already has the topics of this exact file.
	sum="$(cksum <"$file")"
	if [ -f "$RUN_DIR/data/.troupe-topics" ] && [ "$(cat "$RUN_DIR/data/.troupe-topics")" = "$sum" ]; then
		log "topics of $file already created"
		return 0
	fi
	while read -r name partitions replication retention; do
		case "$name" in '' | '#'*) continue ;; esac
		log "topic $name: $partitions partitions, replication $replication, retention ${retention}ms"
		tool_cmd org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" \
			--create --if-not-exists --topic "$name" \
			--partitions "$partitions" --replication-factor "$replication" \
			--config "retention.ms=$retention" >>"$LOGFILE" 2>&1 ||
			{
				show_tail "$LOGFILE"
				die "could not create topic $name"
			}
	done <"$file"
	echo "$sum" >"$RUN_DIR/data/.troupe-topics"
}

cmd_stop() {
	stop_bg "$PIDFILE" 30
}

cmd_status() {
	if pid_alive "$PIDFILE"; then
		echo "kafka running (pid $(cat "$PIDFILE")) on $KAFKA_HOST:$KAFKA_PORT"
	else
		echo "kafka stopped"
		return 1
	fi
}

case "${1:-}" in
install) cmd_install ;;
start) cmd_start ;;
wait) cmd_wait ;;
topics) cmd_topics ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
	echo "usage: $0 install|start|wait|topics|stop|status" >&2
	exit 2
	;;
esac
