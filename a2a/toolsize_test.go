package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// MaxAnswerBytes counts all that the tool keeps of a streamed answer, not only
// the text and files of its artifacts: a stream of new artifacts that hold no
// text (empty parts, none at all) but names and metadata grew the task the call
// assembles without bound, until the call's timeout. Now each artifact and part
// counts what it holds and a few bytes besides, and past the bound the call fails
// and cancels the remote task.
func TestToolCountsAllOfAnArtifactTowardItsBound(t *testing.T) {
	meta := `{"trace":"` + strings.Repeat("m", 4000) + `"}`
	artifact := func(i int, body string) string {
		return fmt.Sprintf(`{"kind":"artifact-update","taskId":"t-1","contextId":"c-1","artifact":{"artifactId":"a-%d",%s}}`, i, body)
	}
	done := `{"kind":"status-update","taskId":"t-1","contextId":"c-1","final":true,"status":{"state":"completed"}}`
	for _, c := range []struct {
		name string
		body func(i int) string
	}{
		{"empty artifacts", func(int) string { return `"parts":[]` }},
		{"empty text parts", func(int) string { return `"parts":[{"kind":"text","text":""},{"kind":"text","text":""}]` }},
		{"artifact metadata", func(int) string { return `"parts":[],"metadata":` + meta }},
		{"part metadata", func(int) string { return `"parts":[{"kind":"text","text":"","metadata":` + meta + `}]` }},
		{"names", func(int) string { return `"name":"` + strings.Repeat("n", 4000) + `","parts":[]` }},
	} {
		t.Run(c.name, func(t *testing.T) {
			events := []string{workingTask}
			for i := range 2000 {
				events = append(events, artifact(i, c.body(i)))
			}
			events = append(events, done)
			ra := newRemoteAgent(t, true, map[string]rpcAnswer{
				"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { sse(w, id, events...) },
				"tasks/cancel":   func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { rpcResult(w, id, canceled) },
			})
			tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, MaxAnswerBytes: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			out, err := tool.Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"hi"}`})
			if !errors.Is(err, a2a.ErrAnswerTooLarge) {
				t.Fatalf("Call = %d bytes, %.200v; want ErrAnswerTooLarge", len(out), err)
			}
			ra.next(t)
			if m := ra.next(t); m != "tasks/cancel" {
				t.Errorf("after the answer was refused the agent was asked %s, want tasks/cancel", m)
			}
		})
	}
	// A few small artifacts with some metadata stay well within it.
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			sse(w, id, workingTask, artifact(1, `"parts":[{"kind":"text","text":"one"}],"metadata":`+meta),
				artifact(2, `"parts":[{"kind":"text","text":"two","metadata":{"k":1}}]`), done)
		},
	})
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, MaxAnswerBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tool.Call(context.Background(), tools.Call{Key: "s/5", Arguments: `{"message":"hi"}`}); err != nil || out != "one\ntwo\n\n(context_id: c-1)" {
		t.Fatalf("Call = %q, %v", out, err)
	}
}

// An agent that streams its answer a token at a time, each an append of one text
// part to one artifact, is counted by its text: 300 tokens of 4 bytes (1.2 KB) are
// within a bound of 8 KiB, which a few dozen bytes counted for each part besides
// its text passed.
func TestToolCountsAStreamOfTokensByItsText(t *testing.T) {
	events := []string{workingTask}
	for i := range 300 {
		events = append(events, fmt.Sprintf(`{"kind":"artifact-update","taskId":"t-1","contextId":"c-1","append":%t,"artifact":{"artifactId":"a-1","parts":[{"kind":"text","text":"tok "}]}}`, i > 0))
	}
	events = append(events, `{"kind":"status-update","taskId":"t-1","contextId":"c-1","final":true,"status":{"state":"completed"}}`)
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { sse(w, id, events...) },
	})
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, MaxAnswerBytes: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/6", Arguments: `{"message":"hi"}`})
	if err != nil || strings.Count(out, "tok") != 300 {
		t.Fatalf("Call = %.200q, %v; want the 300 tokens", out, err)
	}
}

// Parts of one byte each count at least a few bytes, as each costs tens to
// keep: a stream of them fails the call well before it holds its bound in parts.
func TestToolCountsEachPartAtLeastAFewBytes(t *testing.T) {
	events := []string{workingTask}
	for i := range 2000 {
		events = append(events, fmt.Sprintf(`{"kind":"artifact-update","taskId":"t-1","contextId":"c-1","append":%t,"artifact":{"artifactId":"a-1","parts":[{"kind":"text","text":"x"}]}}`, i > 0))
	}
	events = append(events, `{"kind":"status-update","taskId":"t-1","contextId":"c-1","final":true,"status":{"state":"completed"}}`)
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { sse(w, id, events...) },
		"tasks/cancel":   func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { rpcResult(w, id, canceled) },
	})
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, MaxAnswerBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/7", Arguments: `{"message":"hi"}`})
	if !errors.Is(err, a2a.ErrAnswerTooLarge) {
		t.Fatalf("Call = %d bytes, %.200v; want ErrAnswerTooLarge (2,000 parts of one byte count more than 16 KiB)", len(out), err)
	}
}
