package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/node"
)

// fileConfig is the node's configuration file (JSON). Every field is optional; the
// environment overrides the file and flags override both. The "llm" section is
// llm/provider's (provider, model, base_url, api_key_env, timeout, …).
type fileConfig struct {
	Data               string          `json:"data"`
	HTTP               string          `json:"http"`
	Model              string          `json:"model"`
	Fallbacks          []string        `json:"fallbacks"`
	ClickHouse         string          `json:"clickhouse"`
	ClickHouseDatabase string          `json:"clickhouse_database"`
	Kafka              string          `json:"kafka"`
	Group              string          `json:"group"`
	TopicPrefix        string          `json:"topic_prefix"`
	Roles              string          `json:"roles"`
	NodeID             string          `json:"node_id"`
	TopicsFile         string          `json:"topics_file"`
	SystemPrompt       string          `json:"system_prompt"`
	MaxSteps           int             `json:"max_steps"`
	IdleTimeout        string          `json:"idle_timeout"`
	Gateway            gatewayFile     `json:"gateway"`
	LLM                json.RawMessage `json:"llm"`
}

type gatewayFile struct {
	Prices      map[string]gateway.Price `json:"prices"`
	Concurrency map[string]int           `json:"concurrency"`
	Quotas      []struct {
		Scope  string `json:"scope"`
		Tokens int64  `json:"tokens"`
		Window string `json:"window"`
	} `json:"quotas"`
	CacheTTL      string `json:"cache_ttl"`
	SemanticCache *struct {
		Threshold float64 `json:"threshold"`
		TTL       string  `json:"ttl"`
	} `json:"semantic_cache"`
}

func loadFile(path string) (fileConfig, error) {
	var fc fileConfig
	if path == "" {
		return fc, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fc, fmt.Errorf("config: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&fc); err != nil {
		return fc, fmt.Errorf("config %s: %w", path, err)
	}
	return fc, nil
}

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

func (g gatewayFile) config() (gateway.Config, error) {
	cfg := gateway.Config{Prices: g.Prices, Concurrency: g.Concurrency}
	for _, q := range g.Quotas {
		w, err := time.ParseDuration(q.Window)
		if err != nil {
			return cfg, fmt.Errorf("config: quota %s: window: %w", q.Scope, err)
		}
		cfg.Quotas = append(cfg.Quotas, gateway.Quota{Scope: q.Scope, Tokens: q.Tokens, Window: w})
	}
	if g.CacheTTL != "" {
		ttl, err := time.ParseDuration(g.CacheTTL)
		if err != nil {
			return cfg, fmt.Errorf("config: cache_ttl: %w", err)
		}
		cfg.Cache = &gateway.CacheConfig{TTL: ttl}
	}
	if s := g.SemanticCache; s != nil {
		ttl, err := time.ParseDuration(s.TTL)
		if err != nil {
			return cfg, fmt.Errorf("config: semantic_cache.ttl: %w", err)
		}
		// The offline hashing embedder is lexical; a configured embeddings endpoint
		// would make this cache semantic in earnest.
		cfg.Semantic = &gateway.SemanticConfig{Embedder: llm.HashingEmbedder{}, Threshold: s.Threshold, TTL: ttl}
	}
	return cfg, nil
}

// openLog opens the ClickHouse event log when an address is configured; nil means the
// node's embedded SQLite log.
func openLog(ctx context.Context, addr, database string) (eventlog.Log, error) {
	if addr == "" {
		return nil, nil
	}
	cfg := clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: database}
	if cfg.Database == "" {
		cfg.Database = "troupe"
	}
	l, err := clickhouse.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("clickhouse %s: %w", addr, err)
	}
	return l, nil
}

// startSink runs an event sink from troupe.events (with the prefix of topics) into
// the ClickHouse log at addr, in the consumer group troupe-sink; stop ends it and
// closes what it opened.
func startSink(ctx context.Context, brokers []string, topics kafka.TopicLayout, addr, database string, logger *slog.Logger) (stop func(), err error) {
	log, err := openLog(ctx, addr, database)
	if err != nil {
		return nil, err
	}
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, ConsumerGroup: "troupe-sink", Topics: topics},
		watermill.NewSlogLogger(logger))
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
		_ = sub.Close()
		_ = log.Close()
	}, nil
}
