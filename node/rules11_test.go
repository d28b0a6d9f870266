package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// r11Model calls the tool "big" calls times, then answers "done"; a compression
// call (one with a Purpose) is answered by summary.
type r11Model struct {
	calls   int
	summary string
	mu      sync.Mutex
	loop    int
	reqs    []llm.Request
}

func (m *r11Model) Name() string { return "r11" }

func (m *r11Model) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs = append(m.reqs, req)
	if req.Purpose != "" {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: m.summary}}, nil
	}
	m.loop++
	if m.loop <= m.calls {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant,
			ToolCalls: []messages.ToolCall{{ID: fmt.Sprintf("c%d", m.loop), Name: "big", Arguments: fmt.Sprintf(`{"i":%d}`, m.loop)}}}}, nil
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "done"}}, nil
}

func (m *r11Model) requests() []llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]llm.Request(nil), m.reqs...)
}

func r11BigTool(t *testing.T, out string) tools.Tool {
	big, err := tools.Func("big", "Returns a big output.", func(context.Context, struct {
		I int `json:"i"`
	}) (string, error) {
		return out, nil
	}, tools.WithMaxOutput(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	return big
}

// A digest (proactive compression) whose answer is longer than the tool result
// it stands for: from rules 11 the request after it sends the result's
// truncation, as for a digest call that failed; under rules 10 it sent the
// answer whole (30,000 bytes for a result of 2,850).
func TestDigestLongerThanItsInputIsNotSent(t *testing.T) {
	out := strings.Repeat("observation words, ", 150) // 2,850 bytes: ~712 estimated tokens, over the default 500
	long := strings.Repeat("a digest that grows ", 1500)
	for _, rules := range []int{0, 10} {
		t.Run(fmt.Sprintf("rules %d", rules), func(t *testing.T) {
			m := &r11Model{calls: 1, summary: long}
			n := nodetest.Start(t, node.Config{Model: m, Tools: []tools.Tool{r11BigTool(t, out)}, DecisionRules: rules,
				Context: actors.ContextOptions{Window: 128000, Compression: actors.Compression{Strategy: "proactive"}}})
			events := runAgentTask(t, n, node.Task{Input: "Look at the output.", SessionID: "digest"})
			if end := lastEndOf(t, events); end != "completed: done" {
				t.Fatalf("the task: %s", end)
			}
			reqs := m.requests()
			last := reqs[len(reqs)-1]
			if last.Purpose != "" {
				t.Fatalf("the last request is a %q call", last.Purpose)
			}
			digests := 0
			for _, r := range reqs {
				if r.Purpose == "digest" {
					digests++
				}
			}
			if digests != 1 {
				t.Fatalf("%d digest calls, want 1", digests)
			}
			var sent string
			for _, msg := range last.Messages {
				if msg.Role == messages.RoleTool {
					sent = msg.Content
				}
			}
			if rules == 10 {
				if !strings.Contains(sent, strings.TrimSpace(long)) {
					t.Errorf("rules 10: the tool result was sent as %d bytes, not as the %d-byte digest", len(sent), len(long))
				}
				return
			}
			if len(sent) > len(out)+200 || strings.Contains(sent, "a digest that grows") {
				t.Errorf("the tool result (%d bytes) was sent as a %d-byte digest", len(out), len(sent))
			}
			if !strings.Contains(sent, "[the summary call failed (its answer of ") || !strings.Contains(sent, "is longer than the") {
				t.Errorf("the truncation does not say why it stands for the digest: %.200q", sent)
			}
		})
	}
}

// lastEndOf returns how the last task of events ended: "completed: OUTPUT" or
// "failed REASON: ERROR".
func lastEndOf(t *testing.T, events []messages.Envelope) string {
	t.Helper()
	for i := len(events) - 1; i >= 0; i-- {
		p, err := events[i].Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch x := p.(type) {
		case *messages.TaskCompleted:
			return "completed: " + x.Output
		case *messages.TaskFailed:
			return "failed " + string(x.Reason) + ": " + x.Error
		}
	}
	return "no end"
}
