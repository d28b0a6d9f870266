package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/vectorstore/milvus"
)

// The configuration file (its fields, loading and validation, and the default agent
// it configures) is internal/nodeconfig's, shared with cmd/replay.

// parseIdleTimeout reads the idle timeout of session actors (--idle-timeout,
// TROUPE_IDLE_TIMEOUT or "idle_timeout"): a positive Go duration; empty means the
// node's default.
func parseIdleTimeout(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("--idle-timeout %q: not a duration such as 90s or 5m: %w", s, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("--idle-timeout %q: must be positive", s)
	}
	return d, nil
}

// callTimeouts reads the node's bounds of one model call and one tool call and its
// wait before it publishes an unanswered remote request again (node.Config's
// ModelTimeout, ToolTimeout and EffectReissue) from the flags of fs, whose defaults
// are the environment's values, else the file's; 0 is the node's default. An error
// names where the bad value came from: the flag, the variable or the file's field.
func callTimeouts(fs *flag.FlagSet) (model, tool, reissue time.Duration, err error) {
	source := func(flagName, env, field string) string {
		flagged := false
		fs.Visit(func(f *flag.Flag) { flagged = flagged || f.Name == flagName })
		switch {
		case flagged:
			return "--" + flagName
		case os.Getenv(env) != "":
			return env
		}
		return fmt.Sprintf("config %s: %s", fs.Lookup("config").Value, field)
	}
	value := func(flagName string) string { return fs.Lookup(flagName).Value.String() }
	for _, t := range []struct {
		flag, env, field string
		d                *time.Duration
	}{
		{"model-timeout", "TROUPE_MODEL_TIMEOUT", "model_timeout", &model},
		{"tool-timeout", "TROUPE_TOOL_TIMEOUT", "tool_timeout", &tool},
	} {
		if *t.d, err = nodeconfig.ParseCallTimeout(value(t.flag)); err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", source(t.flag, t.env, t.field), err)
		}
	}
	where := source("effect-reissue", "TROUPE_EFFECT_REISSUE", "effect_reissue")
	if reissue, err = nodeconfig.ParseEffectReissue(value("effect-reissue")); err != nil {
		return 0, 0, 0, fmt.Errorf("%s: %w", where, err)
	}
	if err := nodeconfig.CheckEffectReissue(reissue, model, tool); err != nil {
		return 0, 0, 0, fmt.Errorf("%s: %s is %w", where, nodeconfig.QuoteHead(value("effect-reissue")), err)
	}
	return model, tool, reissue, nil
}

// openLog opens the ClickHouse event log when an address is configured, with at
// most maxConns connections (0: clickhouse.DefaultMaxOpenConns); nil means the
// node's embedded SQLite log.
func openLog(ctx context.Context, addr, database string, maxConns int) (eventlog.Log, error) {
	if addr == "" {
		return nil, nil
	}
	cfg := clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: database, MaxOpenConns: maxConns}
	if cfg.Database == "" {
		cfg.Database = "troupe"
	}
	l, err := clickhouse.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("clickhouse %s: %w", addr, err)
	}
	return l, nil
}

// openConfiguredLog opens the ClickHouse log that the environment names, else the
// file fc (TROUPE_CLICKHOUSE or "clickhouse", TROUPE_CLICKHOUSE_DATABASE or
// "clickhouse_database", TROUPE_CLICKHOUSE_MAX_CONNS or "clickhouse_max_conns"),
// for the subcommands that take no flags for it; nil without an address.
func openConfiguredLog(ctx context.Context, fc nodeconfig.File) (eventlog.Log, error) {
	conns := fc.ClickHouseMaxConns
	if v := os.Getenv("TROUPE_CLICKHOUSE_MAX_CONNS"); v != "" {
		var err error
		if conns, err = parseMaxConns("TROUPE_CLICKHOUSE_MAX_CONNS", v); err != nil {
			return nil, err
		}
	}
	return openLog(ctx, cmp.Or(os.Getenv("TROUPE_CLICKHOUSE"), fc.ClickHouse),
		cmp.Or(os.Getenv("TROUPE_CLICKHOUSE_DATABASE"), fc.ClickHouseDatabase, "troupe"), conns)
}

// parseMaxConns parses the node's bound on its ClickHouse connections, given as
// what (a flag or a variable): a count from 1 to nodeconfig.MaxClickHouseConns.
func parseMaxConns(what, v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > nodeconfig.MaxClickHouseConns {
		return 0, fmt.Errorf("%s %q: want a count of connections from 1 to %d (default %d)", what, v, nodeconfig.MaxClickHouseConns, clickhouse.DefaultMaxOpenConns)
	}
	return n, nil
}

// sinkGroup is the consumer group of the event sink of a cluster whose nodes' group
// is group: troupe-sink for the default troupe, so that clusters sharing a Kafka
// under their own --group (and --topic-prefix) do not share one sink group.
func sinkGroup(group string) string { return group + "-sink" }

// startSink runs an event sink from troupe.events (with the prefix of topics) into
// the ClickHouse log at addr, in the consumer group sinkGroup(group); stop ends it
// and closes what it opened, logging what failed to close.
func startSink(ctx context.Context, brokers []string, topics kafka.TopicLayout, group, addr, database string, maxConns int, logger *slog.Logger) (stop func(), err error) {
	log, err := openLog(ctx, addr, database, maxConns)
	if err != nil {
		return nil, err
	}
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, ConsumerGroup: sinkGroup(group), Topics: topics},
		node.NewBusLogger(logger))
	if err != nil {
		log.Close()
		return nil, err
	}
	sink, err := node.NewSink(node.SinkConfig{Subscriber: sub, Log: log, Logger: logger})
	if err != nil {
		sub.Close()
		log.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sink.Run(runCtx) }()
	return func() {
		cancel()
		<-done
		if err := sub.Close(); err != nil {
			logger.Warn("sink: closing its Kafka subscriber", "err", err)
		}
		if err := log.Close(); err != nil {
			logger.Warn("sink: closing its ClickHouse log", "err", err)
		}
	}, nil
}

// loadConfig reads the configuration file of a subcommand (node tools, node memory,
// node agents): *path, or provider.DefaultConfigFile when it exists and *path is
// empty, in which case *path is set to it.
func loadConfig(path *string) (nodeconfig.File, error) {
	if *path == "" {
		if _, err := os.Stat(provider.DefaultConfigFile); err == nil {
			*path = provider.DefaultConfigFile
		}
	}
	return nodeconfig.Load(*path)
}

// configOrFault is the exit code of a failure to open a store the configuration
// names: 1 when the store's server is down (a fault of the service, which a
// supervisor restarting the node may outlast), 2 for what only a change of the
// configuration mends.
func configOrFault(err error) int {
	if errors.Is(err, milvus.ErrUnreachable) {
		return 1
	}
	return 2
}
