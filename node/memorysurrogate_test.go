package node_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A \u escape of half a UTF-16 surrogate pair (a text cut in the middle of an
// emoji) is valid JSON but no character: decoded, it is U+FFFD, another text than
// the one sent. POST /v1/memories refuses it; so must the memory tool (the model's
// arguments: its result is an error the model can act on, and nothing is
// written) and a knowledge base's document sent as JSON. Before, both stored
// U+FFFD in its place.
func TestMemoryLoneSurrogateIsRefusedNotReplaced(t *testing.T) {
	mn := newMemoryNode(t, node.Config{
		MemoryTool: &memory.ToolConfig{Namespace: "agent:planner"},
		Knowledge:  &knowledge.Config{},
		Model: script(t,
			llm.ScriptStep{ToolCalls: []messages.ToolCall{memoryCall("c1", "add", `{"content":"The user smiled \ud83d"}`)}},
			llm.ScriptStep{ToolCalls: []messages.ToolCall{memoryCall("c2", "add", `{"content":"The user smiled","metadata":{"mood":"\udc00"}}`)}},
			llm.ScriptStep{ToolCalls: []messages.ToolCall{memoryCall("c3", "add", `{"content":"The user smiled \ud83d\ude00"}`)}},
			llm.ScriptStep{Content: "Noted."},
		),
	})
	results := answers(nodetest.Run(t, mn.n, "smile-1", "remember my smile"))
	if len(results) != 3 {
		t.Fatalf("tool results %q; want three", results)
	}
	for i, want := range []string{`\ud83d`, `\udc00`} {
		if !strings.Contains(results[i], want) || !strings.Contains(results[i], "surrogate") {
			t.Errorf("the add with %s answered %q; want an error naming it", want, results[i])
		}
	}
	events := memoryEvents(t, mn.log, "agent:planner")
	if len(events) != 1 {
		t.Fatalf("the namespace holds %d events; want the one of the whole emoji", len(events))
	}
	p, err := events[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	if got := p.(*messages.MemoryAdded).Memory.Content; got != "The user smiled 😀" {
		t.Errorf("stored %q; want the whole emoji", got)
	}

	// A knowledge base's document sent as JSON, over HTTP.
	srv := httptest.NewServer(mn.n.Handler())
	defer srv.Close()
	for _, body := range []string{`{"source":"a.md","content":"# A\n\nsmile \ud83d"}`, `{"source":"a\udc00.md","content":"# A"}`} {
		resp, err := http.Post(srv.URL+"/v1/kb/docs/documents", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "surrogate") {
			t.Errorf("POST %s: %d %s; want 400 naming the half surrogate", body, resp.StatusCode, b)
		}
	}
	if events, err := mn.log.Read(t.Context(), "kb/docs", 1); err != nil || len(events) != 0 {
		t.Errorf("the base holds %d events (%v); want none", len(events), err)
	}
}
