package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/pipelines/rag"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/vectorstore"
)

// The rag tool's search in JSON is read by a program (a session gathering a
// task's evidence, actors/gather.go): cut at the tool's output limit
// (tools.DefaultMaxOutput, 64 KiB) it is no JSON, and the task goes on without any
// evidence. Chunks of a base cut to chunk_tokens 8192 (the configuration allows
// it) are about 32 KiB each: five of them, the default evidence, are over the
// limit. The search must answer whole hits that fit, as JSON, and its text the
// passages that fit, each whole.
func TestRAGToolSearchFitsTheOutputLimit(t *testing.T) {
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	vs, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vs.Close() })
	bs, err := knowledge.Open(knowledge.Config{Log: lg, Vectors: vs, Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing",
		Chunk: rag.ChunkOptions{MaxTokens: 8192}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bs.Base(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("backup restore node data directory copy start stop <config> & \"quoted\" tables rows columns")
	for d := range 6 {
		var sb strings.Builder
		fmt.Fprintf(&sb, "# Manual %d\n\n", d)
		for sb.Len() < 30000 {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteString(" ")
		}
		if _, err := b.AddText(ctx, fmt.Sprintf("manual-%d.md", d), sb.String(), ""); err != nil {
			t.Fatal(err)
		}
	}
	tool, err := node.RAGTool(bs, node.KnowledgeToolConfig{Base: "big"})
	if err != nil {
		t.Fatal(err)
	}
	limit := tools.LimitsOf(tool).MaxOutput
	for _, format := range []string{"json", "text"} {
		args := fmt.Sprintf(`{"op":"search","args":{"query":"backup restore node","limit":5,"format":%q}}`, format)
		out, err := tools.CallLimited(ctx, tool, "rag", tools.Call{Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > limit || strings.Contains(out, "[truncated:") {
			t.Errorf("%s: %d bytes, cut at the limit of %d: %.200s", format, len(out), limit, out[max(0, len(out)-200):])
		}
		if format == "json" {
			var res node.KBHitsJSON
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Errorf("json: the search is no JSON: %v", err)
			} else if len(res.Hits) == 0 {
				t.Errorf("json: no hits: %+v", res)
			}
		}
	}
}
