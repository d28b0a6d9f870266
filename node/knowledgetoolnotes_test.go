package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/vectorstore"
)

// The rag tool's search tells the model what the search's notes say: that no
// word of its query is in the knowledge base (with a semantic embedder the
// passages its vector half ranks come all the same, and without the note the
// model reads them as the base's answer to the query), that the search ran
// without its vector half.
func TestRAGToolSearchPassesTheSearchNotes(t *testing.T) {
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
	bs, err := knowledge.Open(knowledge.Config{Log: lg, Vectors: vs, Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bs.Base(ctx, "docs")
	if err != nil {
		t.Fatal(err)
	}
	for src, md := range map[string]string{
		"ports.md":   "# Ports\n\nThe node listens for HTTP on port 8080.\n",
		"backups.md": "# Backups\n\nStop the node and copy the data directory.\n",
	} {
		if _, err := b.AddText(ctx, src, md, ""); err != nil {
			t.Fatal(err)
		}
	}
	tool, err := node.RAGTool(bs, node.KnowledgeToolConfig{Base: "docs"})
	if err != nil {
		t.Fatal(err)
	}
	call := func(query, format string) string {
		t.Helper()
		args := fmt.Sprintf(`{"op":"search","args":{"query":%q,"format":%q}}`, query, format)
		out, err := tools.CallLimited(ctx, tool, "rag", tools.Call{Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	const note = "no word of the query is in the knowledge base"
	text := call("zzqx wvut florp", "text")
	if !strings.Contains(text, note) {
		t.Errorf("text: the search's note is missing: %s", text)
	}
	var res node.KBHitsJSON
	if err := json.Unmarshal([]byte(call("zzqx wvut florp", "json")), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) == 0 || !strings.Contains(res.Notes[0], note) {
		t.Errorf("json: hits %d, notes %q: want the note", len(res.Hits), res.Notes)
	}
	if out := call("copy the data", "text"); strings.Contains(out, "Note") {
		t.Errorf("a query that matches: %s", out)
	}
}
