package node_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// A document refused because its conversion passes a bound (HTML nested deeper
// than rag.MaxHTMLDepth, a zip that expands too far) is 413 with the reason, as
// one over 32 MiB is: the request is at fault, sending it again fails the same
// way. It was 503, "send it again", which a client's retry policy repeats forever.
func TestKBDocumentOverAConversionBoundIs413(t *testing.T) {
	k := newKBNode(t, node.Config{})
	deep := strings.Repeat("<div>", 600) + "deep" + strings.Repeat("</div>", 600)
	code, b := k.upload(t, "docs", "deep.html", deep)
	var e struct{ Error string }
	if code != http.StatusRequestEntityTooLarge || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, "nested too deep") ||
		strings.Contains(e.Error, "send it again") {
		t.Fatalf("upload of HTML nested 600 deep: %d %s; want 413 saying it is nested too deep", code, b)
	}
	if code, b := k.postText(t, "docs", "fine.md", "# Fine\n\nA document."); code != http.StatusCreated {
		t.Fatalf("setup: %d %s", code, b)
	}
	if got := k.ingested(t, "docs"); len(got) != 1 || got["fine.md"] != 1 {
		t.Fatalf("ingested %v; want fine.md only", got)
	}
}
