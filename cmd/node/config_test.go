package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// Every field of the node's configuration file is checked when it is read: a bad
// value stops the node (exit 2) with an error that names the field, the value and
// what is allowed; an empty file and an unknown field say so.
func TestConfigFileRejectsBadValues(t *testing.T) {
	clearLLMEnv(t)
	for _, v := range []string{"TROUPE_HTTP_ADDR", "TROUPE_CLICKHOUSE", "TROUPE_ROLES", "TROUPE_NODE_ID", "TROUPE_KAFKA_GROUP", "TROUPE_KAFKA_TOPIC_PREFIX", "TROUPE_KAFKA_TOPICS"} {
		t.Setenv(v, "")
	}
	cases := []struct {
		name, body string
		want       []string // each must appear in the error
	}{
		// The file as a whole.
		{"empty file", ``, []string{"is empty"}},
		{"blank file", " \n\t\n", []string{"is empty"}},
		{"not an object", `["offline"]`, []string{"JSON object"}},
		{"trailing data", `{"max_steps": 5} {"max_steps": 6}`, []string{"after the JSON object"}},
		{"unknown field", `{"modle": "offline"}`, []string{`unknown field "modle"`, "max_steps"}},
		{"unknown gateway field", `{"gateway": {"cache": "5m"}}`, []string{`unknown field "gateway.cache"`, "cache_ttl"}},
		{"unknown llm field", `{"llm": {"modle": "gpt-4o"}}`, []string{`unknown field "llm.modle"`, "embedding_model"}},
		{"unknown quota field", `{"gateway": {"quotas": [{"scope": "agent:*", "tokens": 5, "window": "1h", "burst": 2}]}}`, []string{`unknown field "burst"`, "gateway.quotas"}},
		{"wrong type", `{"max_steps": "ten"}`, []string{"max_steps", "string", "1 to 1000"}},

		// The node's fields.
		{"max_steps huge", `{"max_steps": 100000000}`, []string{"max_steps", "100000000", "1 to 1000"}},
		{"max_steps exponent", `{"max_steps": 1e8}`, []string{"max_steps", "1e8", "1 to 1000"}},
		{"max_steps negative", `{"max_steps": -1}`, []string{"max_steps", "-1", "1 to 1000"}},
		{"max_sessions negative", `{"max_sessions": -5}`, []string{"max_sessions", "-5", "1 to 10000000"}},
		{"max_sessions huge", `{"max_sessions": 100000000}`, []string{"max_sessions", "100000000", "1 to 10000000"}},
		{"max_sessions wrong type", `{"max_sessions": "many"}`, []string{"max_sessions", "string", "1 to 10000000"}},
		{"max_queued_tasks negative", `{"max_queued_tasks": -5}`, []string{"max_queued_tasks", "-5", "1 to 1000000", "-1 for no bound", "default, 1000"}},
		{"max_queued_tasks huge", `{"max_queued_tasks": 2000000}`, []string{"max_queued_tasks", "2000000", "1 to 1000000"}},
		{"max_queued_tasks wrong type", `{"max_queued_tasks": "many"}`, []string{"max_queued_tasks", "string", "1 to 1000000"}},
		{"data blank", `{"data": "  "}`, []string{"data", `"  "`, "directory"}},
		{"http without port", `{"http": "localhost"}`, []string{"http", `"localhost"`, "host:port"}},
		{"http bad port", `{"http": "127.0.0.1:99999"}`, []string{"http", "99999", "0 to 65535"}},
		{"model unknown", `{"model": "gpt4"}`, []string{"model", `"gpt4"`, "PROVIDER[:MODEL]"}},
		{"model scripted without file", `{"model": "scripted:"}`, []string{"model", `"scripted:"`, "scripted:FILE"}},
		{"fallback empty", `{"fallbacks": ["openai", ""]}`, []string{"fallbacks[1]", `""`}},
		{"fallback unknown", `{"fallbacks": ["acme:large"]}`, []string{"fallbacks[0]", `"acme:large"`, "PROVIDER[:MODEL]"}},
		{"clickhouse URL", `{"clickhouse": "http://ch:8123"}`, []string{"clickhouse", `"http://ch:8123"`, "host:port"}},
		{"clickhouse_database", `{"clickhouse_database": "my-db"}`, []string{"clickhouse_database", `"my-db"`, "letters, digits and underscores"}},
		{"clickhouse_max_conns negative", `{"clickhouse_max_conns": -1}`, []string{"clickhouse_max_conns", "-1", "1 to 1000", "default, 8"}},
		{"clickhouse_max_conns huge", `{"clickhouse_max_conns": 5000}`, []string{"clickhouse_max_conns", "5000", "1 to 1000"}},
		{"clickhouse_max_conns wrong type", `{"clickhouse_max_conns": "many"}`, []string{"clickhouse_max_conns", "string", "1 to 1000"}},
		{"kafka without port", `{"kafka": "broker1:9092,broker2"}`, []string{"kafka", `"broker2"`, "host:port"}},
		{"group", `{"group": "my group"}`, []string{"group", `"my group"`, "letters, digits"}},
		{"topic_prefix", `{"topic_prefix": "prod/"}`, []string{"topic_prefix", `"prod/"`, "letters, digits"}},
		{"roles", `{"roles": "sessions,cooking"}`, []string{"roles", `"sessions,cooking"`, "sessions, tools, models"}},
		{"node_id", `{"node_id": "node 1"}`, []string{"node_id", `"node 1"`, "letters, digits"}},
		{"topics_file blank", `{"topics_file": " "}`, []string{"topics_file", `" "`}},
		{"system_prompt blank", `{"system_prompt": "  \n"}`, []string{"system_prompt", "blank"}},

		// The gateway's fields.
		{"concurrency 0", `{"gateway": {"concurrency": {"openai": 0}}}`, []string{"gateway.concurrency.openai", " 0", "1 to 10000"}},
		{"concurrency -1", `{"gateway": {"concurrency": {"openai": -1}}}`, []string{"gateway.concurrency.openai", "-1", "1 to 10000"}},
		{"concurrency huge", `{"gateway": {"concurrency": {"openai": 1000000}}}`, []string{"gateway.concurrency.openai", "1000000", "1 to 10000"}},
		{"cache_ttl negative", `{"gateway": {"cache_ttl": "-5m"}}`, []string{"gateway.cache_ttl", "-5m", "1s to 720h"}},
		{"cache_ttl zero", `{"gateway": {"cache_ttl": "0s"}}`, []string{"gateway.cache_ttl", "0s", "1s to 720h"}},
		{"cache_ttl not a duration", `{"gateway": {"cache_ttl": "soon"}}`, []string{"gateway.cache_ttl", `"soon"`, "duration"}},
		{"similarity threshold 7", `{"gateway": {"semantic_cache": {"threshold": 7, "ttl": "1h"}}}`, []string{"gateway.semantic_cache.threshold", "7", "above 0 and at most 1"}},
		{"similarity threshold 0", `{"gateway": {"semantic_cache": {"threshold": 0, "ttl": "1h"}}}`, []string{"gateway.semantic_cache.threshold", " 0", "above 0 and at most 1"}},
		{"semantic ttl missing", `{"gateway": {"semantic_cache": {"threshold": 0.9}}}`, []string{"gateway.semantic_cache.ttl", "1s to 720h"}},
		{"semantic ttl negative", `{"gateway": {"semantic_cache": {"threshold": 0.9, "ttl": "-1h"}}}`, []string{"gateway.semantic_cache.ttl", "-1h", "1s to 720h"}},
		{"price negative", `{"gateway": {"prices": {"gpt-4o": {"prompt": -2.5, "completion": 10}}}}`, []string{"gateway.prices.gpt-4o.prompt", "-2.5", "0 to 10000"}},
		{"price huge", `{"gateway": {"prices": {"gpt-4o": {"prompt": 2.5, "completion": 1e9}}}}`, []string{"gateway.prices.gpt-4o.completion", "1e+09", "0 to 10000"}},
		{"price cached negative", `{"gateway": {"prices": {"gpt-4o": {"cached": -1}}}}`, []string{"gateway.prices.gpt-4o.cached", "-1", "0 to 10000"}},
		{"price without model", `{"gateway": {"prices": {"": {"prompt": 1}}}}`, []string{"gateway.prices", `""`, "model name"}},
		{"quota scope", `{"gateway": {"quotas": [{"scope": "user:bob", "tokens": 1000, "window": "1h"}]}}`, []string{"gateway.quotas[0].scope", `"user:bob"`, "agent:NAME"}},
		{"quota tokens", `{"gateway": {"quotas": [{"scope": "agent:*", "tokens": 0, "window": "1h"}]}}`, []string{"gateway.quotas[0].tokens", " 0", "1 to"}},
		{"quota window", `{"gateway": {"quotas": [{"scope": "agent:*", "tokens": 10, "window": "-1h"}]}}`, []string{"gateway.quotas[0].window", "-1h", "1s to 8784h"}},
		{"quota window missing", `{"gateway": {"quotas": [{"scope": "team:red", "tokens": 10}]}}`, []string{"gateway.quotas[0].window", `""`, "duration"}},

		// Skills and tool disclosure.
		{"disclosure unknown", `{"disclosure": "lazy"}`, []string{"disclosure", `"lazy"`, "all", "catalog", "search"}},
		{"tool_embedder unknown", `{"disclosure": "search", "tool_embedder": "bert"}`, []string{"tool_embedder", `"bert"`, "hashing", "llm"}},
		{"tool_embedder without search", `{"disclosure": "catalog", "tool_embedder": "hashing"}`, []string{"tool_embedder", "search", `"catalog"`}},
		{"skills_dir blank", `{"skills_dir": " "}`, []string{"skills_dir", `" "`}},
		{"script_timeout", `{"skills": {"allow_scripts": true, "script_timeout": "-1s"}}`, []string{"skills.script_timeout", "-1s", "100ms to 10m"}},
		{"unknown skills field", `{"skills": {"allow_script": true}}`, []string{`unknown field "skills.allow_script"`, "allow_scripts"}},

		// The llm section (llm/provider's).
		{"llm provider", `{"llm": {"provider": "acme"}}`, []string{"llm.provider", `"acme"`, "deepseek"}},
		{"llm base_url", `{"llm": {"base_url": "localhost:11434"}}`, []string{"llm.base_url", `"localhost:11434"`, "http"}},
		{"llm timeout negative", `{"llm": {"timeout": "-5s"}}`, []string{"llm.timeout", "-5s", "1s to 1h"}},
		{"llm timeout huge", `{"llm": {"timeout": "2h"}}`, []string{"llm.timeout", "2h", "1s to 1h"}},
		{"llm timeout not a duration", `{"llm": {"timeout": "soon"}}`, []string{"llm.timeout", `"soon"`}},
		{"llm api_key_env", `{"llm": {"api_key_env": "MY KEY"}}`, []string{"llm.api_key_env", `"MY KEY"`, "variable name"}},
		{"llm extra header name", `{"llm": {"extra_headers": {"X Team": "a"}}}`, []string{"llm.extra_headers", `"X Team"`, "header name"}},
		{"llm extra header value", `{"llm": {"extra_headers": {"X-Team": "a\r\nX-Evil: 1"}}}`, []string{"llm.extra_headers", "X-Team", "line break"}},
		{"llm model blank", `{"llm": {"model": " "}}`, []string{"llm.model", "blank"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "troupe.json")
			if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"run", "--config", path, "--model", "offline", "--data", filepath.Join(dir, "data"), "1+1"}, &out, &errb, options{})
			if code != 2 {
				t.Fatalf("exit %d, want 2\n%s%s", code, out.String(), errb.String())
			}
			msg := errb.String()
			for _, want := range append([]string{path}, c.want...) {
				if !strings.Contains(msg, want) {
					t.Errorf("the error does not say %q:\n%s", want, msg)
				}
			}
		})
	}
}

// A file with every field set to a good value is accepted, as is an empty object.
func TestConfigFileAcceptsGoodValues(t *testing.T) {
	for _, body := range []string{`{}`, `{
		"data": "DATA", "http": "127.0.0.1:0", "model": "offline", "fallbacks": ["offline"],
		"clickhouse": "", "clickhouse_database": "troupe_test", "clickhouse_max_conns": 16, "kafka": "", "group": "troupe-a.1",
		"topic_prefix": "test.", "roles": "all", "node_id": "node-1.host_a", "topics_file": "",
		"reply_topics_create": "replies.,client.", "reply_topics_max": 10,
		"system_prompt": "Be brief.", "max_steps": 12, "max_sessions": 500, "max_queued_tasks": -1,
		"gateway": {"prices": {"offline": {"prompt": 0.15, "completion": 0.6, "cached": 0.075}},
			"concurrency": {"offline": 8}, "quotas": [{"scope": "agent:*", "tokens": 100000, "window": "1h"}],
			"cache_ttl": "10m", "semantic_cache": {"threshold": 0.95, "ttl": "1h"}},
		"llm": {"provider": "offline", "timeout": "45s", "extra_headers": {"X-Team": "agents"}}
	}`} {
		dir := t.TempDir()
		path := filepath.Join(dir, "troupe.json")
		body = strings.ReplaceAll(body, "DATA", filepath.ToSlash(filepath.Join(dir, "data")))
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"run", "--config", path, "What is 2+3?"}, &out, &errb, options{}); code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
		}
	}
}

// --max-sessions (and TROUPE_MAX_SESSIONS) must be a count from 1 to 10 000 000.
func TestMaxSessionsIsValidated(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"0", "-3", "many", "20000000"} {
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"serve", "--data", dir, "--max-sessions", v}, &bytes.Buffer{}, &stderr, options{})
		if code != 2 || !strings.Contains(stderr.String(), "max-sessions") {
			t.Errorf("--max-sessions %s: exit %d, stderr %q; want 2 naming the flag", v, code, stderr.String())
		}
	}
	t.Setenv("TROUPE_MAX_SESSIONS", "lots")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--data", dir}, &bytes.Buffer{}, &stderr, options{}); code != 2 ||
		!strings.Contains(stderr.String(), "TROUPE_MAX_SESSIONS") {
		t.Errorf("TROUPE_MAX_SESSIONS=lots: exit %d, stderr %q", code, stderr.String())
	}
}

// --max-queued-tasks (and TROUPE_MAX_QUEUED_TASKS) must be a count from 1 to
// 1 000 000, or -1 for no bound, as the file's max_queued_tasks.
func TestMaxQueuedTasksIsValidated(t *testing.T) {
	clearLLMEnv(t)
	dir := t.TempDir()
	t.Setenv("TROUPE_MAX_QUEUED_TASKS", "")
	for _, v := range []string{"0", "-2", "many", "2000000"} {
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"run", "--data", dir, "--model", "offline", "--max-queued-tasks", v, "1+1"}, &bytes.Buffer{}, &stderr, options{})
		if code != 2 || !strings.Contains(stderr.String(), "max-queued-tasks") {
			t.Errorf("--max-queued-tasks %s: exit %d, stderr %q; want 2 naming the flag", v, code, stderr.String())
		}
	}
	for _, v := range []string{"-1", "1", "1000000"} {
		var out, stderr bytes.Buffer
		if code := run(context.Background(), []string{"run", "--data", dir, "--model", "offline", "--max-queued-tasks", v, "1+1"}, &out, &stderr, options{}); code != 0 {
			t.Errorf("--max-queued-tasks %s: exit %d\n%s%s", v, code, out.String(), stderr.String())
		}
	}
	t.Setenv("TROUPE_MAX_QUEUED_TASKS", "lots")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"run", "--data", dir, "--model", "offline", "1+1"}, &bytes.Buffer{}, &stderr, options{}); code != 2 ||
		!strings.Contains(stderr.String(), "TROUPE_MAX_QUEUED_TASKS") {
		t.Errorf("TROUPE_MAX_QUEUED_TASKS=lots: exit %d, stderr %q", code, stderr.String())
	}
}

// --clickhouse-max-conns (and TROUPE_CLICKHOUSE_MAX_CONNS) must be a count from 1 to
// 1000.
func TestClickHouseMaxConnsIsValidated(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TROUPE_CLICKHOUSE_MAX_CONNS", "")
	for _, v := range []string{"0", "-3", "many", "2000"} {
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"serve", "--data", dir, "--clickhouse-max-conns", v}, &bytes.Buffer{}, &stderr, options{})
		if code != 2 || !strings.Contains(stderr.String(), "--clickhouse-max-conns") || !strings.Contains(stderr.String(), "1 to 1000") {
			t.Errorf("--clickhouse-max-conns %s: exit %d, stderr %q; want 2 naming the flag and the range", v, code, stderr.String())
		}
	}
	t.Setenv("TROUPE_CLICKHOUSE_MAX_CONNS", "lots")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--data", dir}, &bytes.Buffer{}, &stderr, options{}); code != 2 ||
		!strings.Contains(stderr.String(), "TROUPE_CLICKHOUSE_MAX_CONNS") {
		t.Errorf("TROUPE_CLICKHOUSE_MAX_CONNS=lots: exit %d, stderr %q", code, stderr.String())
	}
}

func TestIdleTimeoutIsValidated(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"0s", "-5s", "soon", "10"} {
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"serve", "--data", dir, "--idle-timeout", v}, &bytes.Buffer{}, &stderr, options{})
		if code != 2 || !strings.Contains(stderr.String(), "--idle-timeout") {
			t.Errorf("--idle-timeout %s: exit %d, stderr %q; want 2 naming the flag", v, code, stderr.String())
		}
	}
	cfg := filepath.Join(dir, "node.json")
	if err := os.WriteFile(cfg, []byte(`{"idle_timeout":"-1m"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--data", dir, "--config", cfg}, &bytes.Buffer{}, &stderr, options{}); code != 2 ||
		!strings.Contains(stderr.String(), `"-1m"`) {
		t.Errorf("idle_timeout -1m in the file: exit %d, stderr %q", code, stderr.String())
	}
	for in, want := range map[string]time.Duration{"": 0, "90s": 90 * time.Second, "5m": 5 * time.Minute, "250ms": 250 * time.Millisecond} {
		if got, err := parseIdleTimeout(in); err != nil || got != want {
			t.Errorf("parseIdleTimeout(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// --stored-retention takes a duration of at least an hour or "forever"; a topics
// file whose tasks, requests or replies outlive the stored messages is refused,
// since a reference read after its message was pruned would be lost.
func TestStoredRetentionFlag(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"5m", "-1h", "soon", "0"} {
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"serve", "--data", dir, "--kafka", "127.0.0.1:1", "--stored-retention", v}, &bytes.Buffer{}, &stderr, options{})
		if code != 2 || !strings.Contains(stderr.String(), "--stored-retention") {
			t.Errorf("--stored-retention %s: exit %d, stderr %q; want 2 naming the flag", v, code, stderr.String())
		}
	}
	cfg := filepath.Join(dir, "node.json")
	if err := os.WriteFile(cfg, []byte(`{"stored_retention":"1m"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--data", dir, "--config", cfg}, &bytes.Buffer{}, &stderr, options{}); code != 2 ||
		!strings.Contains(stderr.String(), "stored_retention") {
		t.Errorf("stored_retention 1m in the file: exit %d, stderr %q", code, stderr.String())
	}
	topics := filepath.Join(dir, "topics.txt")
	if err := os.WriteFile(topics, []byte("troupe.tasks 3 1 -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{}, {"--stored-retention", "720h"}} {
		stderr.Reset()
		code := run(context.Background(), append([]string{"serve", "--data", dir, "--kafka", "127.0.0.1:1", "--topics", topics}, args...), &bytes.Buffer{}, &stderr, options{})
		if code != 2 || !strings.Contains(stderr.String(), "troupe.tasks keeps its records longer") {
			t.Errorf("tasks kept for good, %v: exit %d, stderr %q; want 2 naming the topic", args, code, stderr.String())
		}
	}
	for in, want := range map[string]time.Duration{"forever": -1, "1h": time.Hour, "192h": 192 * time.Hour} {
		if got, err := nodeconfig.ParseStoredRetention(in); err != nil || got != want {
			t.Errorf("ParseStoredRetention(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if msg := storedOutlived(map[string]kafka.TopicConfig{messages.TopicTasks: {Configs: map[string]string{"retention.ms": "604800000"}}}, node.DefaultStoredRetention); msg != "" {
		t.Errorf("Kafka's default retention against the default stored retention: %s", msg)
	}
}
