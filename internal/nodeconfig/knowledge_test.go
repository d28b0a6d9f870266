package nodeconfig_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
)

// The knowledge section is checked field by field; its embedder falls back to the
// memory section's, then to the offline hashing embedder; "model": false keeps the
// node's model out.
func TestKnowledgeSectionIsChecked(t *testing.T) {
	for body, want := range map[string]string{
		`{"knowledge": {"default": "no spaces"}}`:                                                        "knowledge.default",
		`{"knowledge": {"bases": ["-dash"]}}`:                                                            "knowledge.bases",
		`{"knowledge": {"embedder": {"base_url": "ftp://x", "query_model": "q", "passage_model": "p"}}}`: "knowledge.embedder.base_url",
		`{"knowledge": {"embedder": {"base_url": "http://x/v1", "query_model": "e5-query"}}}`:            "e5-passage",
		`{"knowledge": {"milvus": "nohostport"}}`:                                                        "knowledge.milvus",
		`{"knowledge": {"chunk_tokens": 5}}`:                                                             "knowledge.chunk_tokens",
		`{"knowledge": {"chunk_tokens": 100, "overlap_tokens": 100}}`:                                    "knowledge.overlap_tokens",
		`{"knowledge": {"idle_timeout": "soon"}}`:                                                        "knowledge.idle_timeout",
		`{"knowledge": {"idle_timeout": "1ms"}}`:                                                         "knowledge.idle_timeout",
		`{"knowledge": {"max_bases": -1}}`:                                                               "knowledge.max_bases",
		`{"knowledge": {"tools": true}}`:                                                                 `"knowledge.tools"`,
		`{"knowledge": {"embedder": {"url": "http://x"}}}`:                                               `"knowledge.embedder.url"`,
	} {
		_, err := loadString(t, body)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", body, err, want)
		}
	}

	// No section: the offline embedder, the node's model, no tool.
	var fc nodeconfig.File
	cfg, closeFn, _, err := fc.KnowledgeConfig(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	_ = closeFn()
	if cfg.EmbedderName != "hashing" || cfg.Model != nil || cfg.Vectors != nil || fc.Knowledge.ToolConfig() != nil {
		t.Fatalf("defaults: %+v", cfg)
	}

	// The memory section's embedder, the section's tool and chunking, no model.
	fc, err = loadString(t, `{"memory": {"embedder": {"base_url": "http://127.0.0.1:8089/v1", "query_model": "e5-query", "passage_model": "e5-passage"}},
		"knowledge": {"tool": true, "default": "docs", "bases": ["handbook"], "model": false, "chunk_tokens": 256, "overlap_tokens": -1,
		"idle_timeout": "30m", "max_bases": 50}}`)
	if err != nil {
		t.Fatal(err)
	}
	cfg, closeFn, _, err = fc.KnowledgeConfig(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	_ = closeFn()
	if cfg.EmbedderName != "e5-passage" || cfg.Chunk.MaxTokens != 256 || cfg.Chunk.OverlapTokens != -1 || cfg.Model == nil || cfg.Model.Name() != llm.OfflineName ||
		cfg.IdleTimeout != 30*time.Minute || cfg.MaxBases != 50 {
		t.Fatalf("from the file: %+v", cfg)
	}
	if tc := fc.Knowledge.ToolConfig(); tc == nil || tc.Base != "docs" || len(tc.Bases) != 1 {
		t.Fatalf("tool: %+v", tc)
	}

	// The section's own embedder wins, and its errors name its fields.
	fc, err = loadString(t, `{"memory": {"embedder": {"base_url": "http://a/v1", "query_model": "q", "passage_model": "p"}},
		"knowledge": {"embedder": {"base_url": "http://b/v1", "query_model": "kq", "passage_model": "kp", "api_key_env": "TROUPE_TEST_UNSET_KEY"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TROUPE_TEST_UNSET_KEY", "")
	if _, _, _, err := fc.KnowledgeConfig(context.Background(), ""); err == nil || !strings.Contains(err.Error(), "knowledge.embedder.api_key_env") {
		t.Fatalf("a missing key: %v", err)
	}
}

// An agent of the agents file names its rag tool's default knowledge base; the node
// must have the rag tool.
func TestAgentsFileKnowledge(t *testing.T) {
	f, err := nodeconfig.ParseAgents("agents.yaml", []byte("agents:\n  a:\n    tools: [rag]\n    knowledge: handbook\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = f.CheckNodeTools(node.Config{})
	var fe *nodeconfig.AgentsFileError
	if !errors.As(err, &fe) || fe.Line != 4 || !strings.Contains(err.Error(), `knowledge handbook: the node has no rag tool`) {
		t.Fatalf("without the rag tool: %v", err)
	}
	if na := f.NodeAgents()[0]; na.Knowledge != "handbook" {
		t.Fatalf("NodeAgents: %+v", na)
	}
	if _, err := nodeconfig.ParseAgents("agents.yaml", []byte("agents:\n  a:\n    knowledge: no/slash\n")); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("a bad knowledge base name: %v", err)
	}
}
