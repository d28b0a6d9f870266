package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

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
			if !strings.Contains(sent, "[the summary call answered, but its answer of ") || !strings.Contains(sent, "is longer than the") {
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

// r11Tokens counts what requests sent with tiktoken-go's cl100k_base: each
// message's text and tool calls, and the tools' schemas as JSON.
func r11Tokens(t *testing.T, reqs []llm.Request) []int {
	t.Helper()
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	enc, err := tiktoken.GetEncoding("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(reqs))
	for i, r := range reqs {
		for _, m := range r.Messages {
			out[i] += len(enc.Encode(m.Content, nil, nil))
			for _, c := range m.ToolCalls {
				out[i] += len(enc.Encode(c.Name+c.Arguments, nil, nil))
			}
		}
		if len(r.Tools) > 0 {
			specs, _ := json.Marshal(r.Tools)
			out[i] += len(enc.Encode(string(specs), nil, nil))
		}
	}
	return out
}

// r11TextModel is a model without native tools (it speaks the ReAct text
// protocol): it answers Finish[done], and a compression call a short summary.
type r11TextModel struct{ r11Model }

func (m *r11TextModel) Capabilities() llm.Capabilities { return llm.Capabilities{NativeTools: false} }

func (m *r11TextModel) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs = append(m.reqs, req)
	content := "Finish[done]"
	if req.Purpose != "" {
		content = "a short summary"
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: content}}, nil
}

// A react agent whose task's input fills its budget: from rules 11 its context
// counts the tools as the text protocol writes them into the system message, so
// what the model is sent stays within the window less the answer's reserve;
// under rules 10 it counted their JSON schemas, which the protocol does not send,
// and its request was some 30 tokens over (3,527 of 3,500).
func TestReActWrittenToolsCountAgainstTheWindow(t *testing.T) {
	for _, rules := range []int{0, 10} {
		t.Run(fmt.Sprintf("rules %d", rules), func(t *testing.T) {
			m := &r11TextModel{}
			n := nodetest.Start(t, node.Config{Model: m, DecisionRules: rules, Agents: []node.NamedAgent{{Name: "r", Paradigm: node.ParadigmReAct}},
				Context: actors.ContextOptions{Window: 4000, ReservedOutput: 500}})
			events := runAgentTask(t, n, node.Task{Input: strings.Repeat("the budget is near ", 740), SessionID: "react", Agent: "r"})
			if end := lastEndOf(t, events); end != "completed: done" {
				t.Fatalf("the task: %s", end)
			}
			reqs := m.requests()
			counts := r11Tokens(t, reqs)
			over := 0
			for i, r := range reqs {
				t.Logf("request %d (%q): %d tokens", i+1, r.Purpose, counts[i])
				if r.Purpose == "" && !strings.Contains(r.Messages[0].Content, "You can use these tools:") {
					t.Fatalf("request %d does not write its tools in the text protocol", i+1)
				}
				if counts[i] > 3500 {
					over++
				}
			}
			switch {
			case rules == 10 && over == 0:
				t.Errorf("rules 10: no request over the budget, where it sent one (its tools' schemas counted)")
			case rules != 10 && over > 0:
				t.Errorf("%d requests over the window less the reserve (3,500 tokens)", over)
			}
		})
	}
}

// r11Catalog is a catalog of tools (an MCP server's) whose set grows while the
// node runs.
type r11Catalog struct {
	mu sync.Mutex
	ts []tools.Tool
}

func (c *r11Catalog) add(t *testing.T, from, n int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := from; i < from+n; i++ {
		tl, err := tools.Func(fmt.Sprintf("srv__tool_%04d", i), fmt.Sprintf("Does thing number %d of the server, with care and many words.", i),
			func(context.Context, struct {
				Q string `json:"q"`
			}) (string, error) {
				return "ok", nil
			}, tools.WithSource("mcp:srv"))
		if err != nil {
			t.Fatal(err)
		}
		c.ts = append(c.ts, tl)
	}
}

func (c *r11Catalog) Tools() []tools.Tool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]tools.Tool(nil), c.ts...)
}

func (c *r11Catalog) Specs() []messages.ToolSpec {
	var s []messages.ToolSpec
	for _, t := range c.Tools() {
		s = append(s, t.Spec())
	}
	return s
}

func (c *r11Catalog) Tool(name string) (tools.Tool, bool) {
	for _, t := range c.Tools() {
		if t.Spec().Name == name {
			return t, true
		}
	}
	return nil, false
}

// A catalog that grows past the window after the node started: the system
// prompt and the tools' schemas alone are larger than the window, so no request
// can fit. From rules 11 the task fails with context_overflow without a model
// call; under rules 10 it first condensed its input (a condense-section call),
// whose tokens it paid for nothing.
func TestNoCompressionCallWhenThePrefixIsOverTheWindow(t *testing.T) {
	for _, rules := range []int{0, 10} {
		t.Run(fmt.Sprintf("rules %d", rules), func(t *testing.T) {
			cat := &r11Catalog{}
			cat.add(t, 0, 5)
			m := &r11Model{summary: "a short summary"}
			n := nodetest.Start(t, node.Config{Model: m, ToolCatalog: cat, DecisionRules: rules,
				Context: actors.ContextOptions{Window: 4000, ReservedOutput: 500}})
			cat.add(t, 5, 195)
			events := runAgentTask(t, n, node.Task{Input: "Use the server's tool 123.", SessionID: "grow"})
			if end := lastEndOf(t, events); !strings.HasPrefix(end, "failed context_overflow") {
				t.Fatalf("the task: %s", end)
			}
			var purposes []string
			for _, r := range m.requests() {
				purposes = append(purposes, r.Purpose)
			}
			want := []string(nil)
			if rules == 10 {
				want = []string{"condense-section"}
			}
			if fmt.Sprint(purposes) != fmt.Sprint(want) {
				t.Errorf("model calls of purposes %q, want %q", purposes, want)
			}
		})
	}
}
