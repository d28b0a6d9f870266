package node_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/node"
)

// TestKBIngestionOutlastingItsWaitIsAnswered: an ingestion that takes longer than
// the write deadline's extension (10 minutes; shortened here) is stored, and its
// client gets the answer, not an empty reply; so does a search that waits as
// long on the query embedder.
func TestKBIngestionOutlastingItsWaitIsAnswered(t *testing.T) {
	const wait = 100 * time.Millisecond
	cfg := node.Config{Knowledge: &knowledge.Config{Embedder: slowEmbedder{pause: 4 * wait}, EmbedderName: "slow"}}
	node.ShortenAnswerWait(&cfg.HTTP, wait)
	_, base, _ := serveHTTP(t, cfg)
	client := &http.Client{Timeout: time.Minute} // a hang guard
	resp, err := client.Post(base+"/v1/kb/docs/documents", "application/json",
		strings.NewReader(`{"source":"ports.md","content":"# Ports\n\nThe node serves HTTP on port 8080."}`))
	if err != nil {
		t.Fatalf("an ingestion outlasting the wait got no answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST document: %d %s, %v", resp.StatusCode, body, err)
	}
	var res knowledge.AddResult
	if err := json.Unmarshal(body, &res); err != nil || res.Source != "ports.md" || res.Chunks == 0 {
		t.Fatalf("POST document answered %s (%v)", body, err)
	}
	resp, err = client.Get(base + "/v1/kb/docs/search?q=port&mode=vector")
	if err != nil {
		t.Fatalf("a search outlasting the wait got no answer: %v", err)
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "ports.md") {
		t.Fatalf("search: %d %s, %v", resp.StatusCode, body, err)
	}
}
