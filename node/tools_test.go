package node_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// recording is a model that remembers the requests it was sent.
type recording struct {
	llm.Model
	mu   sync.Mutex
	reqs []llm.Request
}

func (r *recording) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Model.Generate(ctx, req)
}

func (r *recording) requests() []llm.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]llm.Request(nil), r.reqs...)
}

type noArgs struct{}

// A tool that panics, one that hangs past its timeout (ignoring its context) and one
// that returns 10 MB: the model gets an error or a truncated result for each, and the
// session goes on to its answer.
func TestFailingToolsReachTheModelAndTheSessionGoesOn(t *testing.T) {
	hung := make(chan struct{})
	t.Cleanup(func() { close(hung) })
	panics := tools.MustFunc("panics", "Panics.", func(context.Context, noArgs) (string, error) { panic("tool bug") })
	hangs := tools.MustFunc("hangs", "Hangs.", func(context.Context, noArgs) (string, error) {
		<-hung
		return "too late", nil
	}, tools.WithTimeout(50*time.Millisecond))
	floods := tools.MustFunc("floods", "Returns 10 MB.", func(context.Context, noArgs) (string, error) {
		return strings.Repeat("y", 10<<20), nil
	}, tools.WithMaxOutput(16384))
	strict := tools.MustFunc("strict", "Takes a count.", func(_ context.Context, a struct {
		N int `json:"n"`
	}) (int, error) {
		return a.N, nil
	})
	script, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{
			{ID: "c1", Name: "panics", Arguments: "{}"},
			{ID: "c2", Name: "hangs", Arguments: "{}"},
			{ID: "c3", Name: "floods", Arguments: "{}"},
			{ID: "c4", Name: "strict", Arguments: `{"n":"many","m":1}`},
		}},
		{Content: "done despite the tools"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	model := &recording{Model: script}
	n := nodetest.Start(t, node.Config{Model: model, Tools: []tools.Tool{panics, hangs, floods, strict}, MaxParallelTools: 4})
	events := nodetest.Run(t, n, "failing-tools", "use the tools")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the session ended with %s", last.Type)
	}
	reqs := model.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	results := map[string]string{}
	for _, m := range reqs[1].Messages {
		if m.Role == messages.RoleTool {
			results[m.Name] = m.Content
		}
	}
	for tool, want := range map[string]string{
		"panics": "error: tool panicked: tool bug",
		"hangs":  "error: tool timed out after 50ms",
		"floods": strings.Repeat("y", 16384) + "\n[truncated: 10485760 bytes, showing the first 16384]",
		"strict": `error: strict: invalid arguments: unknown field "m" (the fields are n); "n" must be an integer, not the string "many"`,
	} {
		if got := results[tool]; got != want {
			t.Errorf("the model got from %s %d bytes: %.200q…, want %.200q…", tool, len(got), got, want)
		}
	}
}
