package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/pipelines/rag"
	"github.com/troupe-run/troupe/tools"
)

// The errors a rag call's arguments caused go back to the model as argument
// errors: among them a text the knowledge base refuses to take (a NUL byte in an
// add's content is rag.ErrUnsupported, as a file with one is). Other errors stay
// the tool's own.
func TestRAGToolFaultsTheArgumentsForWhatTheyCaused(t *testing.T) {
	tool := &ragTool{name: "rag"}
	for _, err := range []error{
		fmt.Errorf("knowledge: add notes.md: %w", rag.ErrUnsupported),
		fmt.Errorf("knowledge: add notes.md: %w", rag.ErrMalformed),
		fmt.Errorf("%w: no such document", knowledge.ErrNotFound),
	} {
		var ae *tools.ArgumentError
		if got := tool.fault(err); !errors.As(got, &ae) {
			t.Errorf("fault(%v) = %v (%T), want an argument error", err, got, got)
		}
	}
	other := errors.New("the log is down")
	if got := tool.fault(other); got != other {
		t.Errorf("fault(%v) = %v, want it unchanged", other, got)
	}
}

// A hit alone over the output limit is cut to fit, at a character boundary, and
// the others are counted as left out.
func TestFitKBHitsCutsABestHitOverTheLimit(t *testing.T) {
	hits := []knowledge.Hit{{ChunkID: "c1", Content: strings.Repeat("é<", 5000)}, {ChunkID: "c2", Content: "short"}}
	render := func(hits []knowledge.Hit, omitted int) string {
		out, _ := json.Marshal(KBHitsJSON{KB: "kb", Query: "q", Hits: hits, Omitted: omitted})
		return string(out)
	}
	out := fitKBHits(hits, 1000, render)
	var res KBHitsJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(out) > 1000 {
		t.Fatalf("%d bytes: %v", len(out), err)
	}
	if len(res.Hits) != 1 || res.Omitted != 1 || !strings.HasSuffix(res.Hits[0].Content, " …") ||
		!utf8.ValidString(res.Hits[0].Content) || len(out) < 900 {
		t.Fatalf("%d bytes: %+v", len(out), res)
	}
	if got := fitKBHits(hits, 1<<20, render); got != render(hits, 0) {
		t.Errorf("hits that fit were changed: %s", got)
	}
}
