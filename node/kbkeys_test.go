package node_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// A JSON document whose key comes twice, or miscased, is refused and writes
// nothing: encoding/json takes the last of them, matched without regard to case,
// so {"source":"a.md","content":"x","Content":"y"} stored the text y, and
// {"source":"a.md","source":"b.md",...} a document named b.md.
func TestKBJSONDocumentWithDuplicateOrMiscasedKeysIsRefused(t *testing.T) {
	k := newKBNode(t, node.Config{})
	if code, _ := k.postText(t, "docs", "a.md", kbInstall); code != http.StatusCreated {
		t.Fatal("setup")
	}
	for _, body := range []string{
		`{"source":"b.md","content":"# B\n\nshown","Content":"# B\n\nhidden"}`,
		`{"source":"b.md","source":"c.md","content":"# C\n\nsome text"}`,
		`{"Source":"d.md","content":"# D\n\nsome text"}`,
	} {
		code, b := k.do(t, http.MethodPost, "/v1/kb/docs/documents", "application/json", strings.NewReader(body))
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Error == "" {
			t.Errorf("%s: %d %s; want 400", body, code, b)
		}
	}
	if got := k.ingested(t, "docs"); len(got) != 1 || got["a.md"] != 1 {
		t.Fatalf("ingested %v; want a.md only", got)
	}
}

// An ask body whose key comes twice or miscased is refused, as a document's is.
func TestKBAskWithDuplicateKeysIsRefused(t *testing.T) {
	k := newKBNode(t, node.Config{})
	if code, _ := k.postText(t, "docs", "a.md", kbInstall); code != http.StatusCreated {
		t.Fatal("setup")
	}
	for _, body := range []string{
		`{"question":"how to install on linux","limit":1,"limit":100}`,
		`{"question":"how to install on linux","Extractive":true}`,
		`{"question":"how to install on linux"} {"question":"more"}`,
	} {
		code, b := k.do(t, http.MethodPost, "/v1/kb/docs/ask", "application/json", strings.NewReader(body))
		if code != http.StatusBadRequest {
			t.Errorf("%s: %d %s; want 400", body, code, b)
		}
	}
	// Every field, each once and spelled as documented, is taken.
	body := `{"question":"how to install on linux","limit":1,"mode":"bm25","multi_query":0,"hyde":false,"fusion":"rrf","alpha":0.5,"extractive":true}`
	if code, b := k.do(t, http.MethodPost, "/v1/kb/docs/ask", "application/json", strings.NewReader(body)); code != http.StatusOK {
		t.Errorf("%s: %d %s; want 200", body, code, b)
	}
}
