package node_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// textOnly is a model without native tool calling: it answers in the ReAct text
// protocol, and it records what it was sent.
type textOnly struct {
	mu   sync.Mutex
	reqs []llm.Request
}

func (m *textOnly) Name() string                   { return "text-only" }
func (m *textOnly) Capabilities() llm.Capabilities { return llm.Capabilities{} }
func (m *textOnly) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	last := req.Messages[len(req.Messages)-1].Content
	reply := "Thought: multiply\nAction: calculator[6 * 7]"
	if strings.HasPrefix(last, "Observation: ") {
		reply = "Thought: the tool said so\nFinish[" + strings.TrimPrefix(last, "Observation: ") + "]"
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: reply}}, nil
}

type failing struct{ calls int }

func (f *failing) Name() string { return "down" }
func (f *failing) Generate(context.Context, llm.Request) (llm.Response, error) {
	f.calls++
	return llm.Response{}, &llm.APIError{Provider: "fake", StatusCode: 401, Message: "invalid key"}
}

func responses(t *testing.T, events []messages.Envelope) []*messages.ModelResponded {
	var out []*messages.ModelResponded
	for _, e := range events {
		if e.Type == messages.TypeModelResponded {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p.(*messages.ModelResponded))
		}
	}
	return out
}

func TestTextProtocolModelCallsToolsThroughTheLoop(t *testing.T) {
	m := &textOnly{}
	n := nodetest.Start(t, node.Config{Model: m})
	events := nodetest.Run(t, n, "react", "What is 6 times 7?")
	last, _ := events[len(events)-1].Decode()
	if c, ok := last.(*messages.TaskCompleted); !ok || c.Output != "42" {
		t.Fatalf("result: %+v", last)
	}
	for _, r := range m.reqs {
		if len(r.Tools) != 0 {
			t.Fatal("a text-only model must not be sent native tools")
		}
	}
}

func TestFallbackCacheAndQuotaAreRecorded(t *testing.T) {
	down := &failing{}
	n := nodetest.Start(t, node.Config{Model: down, Fallbacks: []llm.Model{llm.Offline{}}, Gateway: gateway.Config{
		Cache:  &gateway.CacheConfig{TTL: time.Hour},
		Quotas: []gateway.Quota{{Scope: "agent:default", Tokens: 400, Window: time.Hour}},
		Prices: map[string]gateway.Price{"offline": {Prompt: 1, Completion: 2}},
	}})
	first := responses(t, nodetest.Run(t, n, "one", "What is 12 * (7 + 5)?"))
	if len(first) != 2 || first[0].Model != "offline" || first[0].Cached || first[0].Usage.CostUSD <= 0 {
		t.Fatalf("fallback: %+v", first[0])
	}
	if down.calls != 2 {
		t.Fatalf("a 401 must not be retried: %d calls", down.calls)
	}
	// The same opening request in another session comes from the exact cache.
	second := responses(t, nodetest.Run(t, n, "two", "What is 12 * (7 + 5)?"))
	if !second[0].Cached {
		t.Fatalf("second session's first step should be cached: %+v", second[0])
	}
	// Keep spending until the agent's quota refuses: the task fails with a clear reason.
	for i := 0; i < 20; i++ {
		events := nodetest.Run(t, n, "q"+string(rune('a'+i)), "echo "+strings.Repeat("word ", 40)+string(rune('a'+i)))
		last, _ := events[len(events)-1].Decode()
		if f, ok := last.(*messages.TaskFailed); ok {
			if f.Reason != messages.ReasonModelError || !strings.Contains(f.Error, "token quota exceeded for agent:default") {
				t.Fatalf("quota failure: %+v", f)
			}
			return
		}
	}
	t.Fatal("the quota never refused")
}

// The stable prefix of a request (system prompt, tool definitions) is byte-identical
// across the steps of a task, and each step's messages extend the previous step's, so
// provider-side prompt caches hit.
func TestRequestsKeepAByteIdenticalPrefix(t *testing.T) {
	var mu sync.Mutex
	var reqs []llm.Request
	rec := recordingModel{Model: llm.Offline{}, fn: func(r llm.Request) { mu.Lock(); reqs = append(reqs, r); mu.Unlock() }}
	n := nodetest.Start(t, node.Config{Model: rec})
	nodetest.Run(t, n, "prefix", "What is 2^10?")
	nodetest.Run(t, n, "prefix", "What is 3^3?")
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	tools0, _ := json.Marshal(reqs[0].Tools)
	for i := 1; i < len(reqs); i++ {
		toolsI, _ := json.Marshal(reqs[i].Tools)
		if string(toolsI) != string(tools0) {
			t.Fatal("tool definitions changed between steps")
		}
		prev, _ := json.Marshal(reqs[i-1].Messages)
		cur, _ := json.Marshal(reqs[i].Messages)
		if !strings.HasPrefix(string(cur), strings.TrimSuffix(string(prev), "]")) {
			t.Fatalf("request %d does not extend request %d:\n%s\n%s", i, i-1, prev, cur)
		}
	}
}

type recordingModel struct {
	llm.Model
	fn func(llm.Request)
}

func (r recordingModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	r.fn(req)
	return r.Model.Generate(ctx, req)
}
