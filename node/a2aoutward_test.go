package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// messageIDs serves h and records the messageId of every message/send and
// message/stream it is sent, in order.
type messageIDs struct {
	mu  sync.Mutex
	ids []string
	got chan struct{}
}

func recordMessageIDs(t *testing.T, h http.Handler) (*messageIDs, string) {
	t.Helper()
	m := &messageIDs{got: make(chan struct{}, 64)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req struct {
				Method string `json:"method"`
				Params struct {
					Message struct {
						ID string `json:"messageId"`
					} `json:"message"`
				} `json:"params"`
			}
			if json.Unmarshal(body, &req) == nil && strings.HasPrefix(req.Method, "message/") {
				m.mu.Lock()
				m.ids = append(m.ids, req.Params.Message.ID)
				m.mu.Unlock()
				m.got <- struct{}{}
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return m, srv.URL
}

func (m *messageIDs) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		m.mu.Lock()
		ids := append([]string(nil), m.ids...)
		m.mu.Unlock()
		if len(ids) >= n {
			return ids
		}
		select {
		case <-m.got:
		case <-deadline:
			t.Fatalf("the remote agent was sent %d messages (%q), want %d", len(ids), ids, n)
		}
	}
}

// echoModel answers each task with its last user message: "you said: <it>".
type echoModel struct{}

func (echoModel) Name() string { return "echo" }

func (echoModel) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	said := ""
	for _, m := range req.Messages {
		if m.Role == messages.RoleUser {
			said = m.Content
		}
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "you said: " + said}}, nil
}

// toolResult is the result of the session's one a2a__b call.
func toolResult(t *testing.T, events []messages.Envelope) string {
	t.Helper()
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			c := p.(*messages.ToolCallCompleted)
			return c.Result + c.Error
		}
	}
	t.Fatal("the session recorded no tool result")
	return ""
}

// Two deployments (two event logs) whose sessions have the same name call one
// Troupe remote agent at the same seq: each call is its own message, which the
// remote runs and answers, rather than the second caller getting the first
// one's answer and conversation. The call's key ("support/4") is unique only
// within one log; the messageId is unique across logs.
func TestA2ACallsOfTwoLogsWithOneSessionNameAreTwoMessages(t *testing.T) {
	_, remote := a2aNode(t, node.Config{Model: echoModel{}})
	caller := func(ask string) []messages.Envelope {
		tool, err := a2a.NewTool(a2a.ToolConfig{Name: "b", CardURL: remote + a2a.CardPath})
		if err != nil {
			t.Fatal(err)
		}
		args, _ := json.Marshal(map[string]string{"message": ask})
		n := nodetest.Start(t, node.Config{Tools: []tools.Tool{tool}, Model: a2aScript(t,
			llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "a2a__b", Arguments: string(args)}}},
			llm.ScriptStep{Content: "done"})})
		return nodetest.Run(t, n, "support", ask)
	}
	alice := toolResult(t, caller("alice: my account number is 123"))
	bob := toolResult(t, caller("bob: what is my account number?"))
	if !strings.Contains(alice, "you said: alice: my account number is 123") {
		t.Fatalf("the first caller's answer: %s", alice)
	}
	if strings.Contains(bob, "123") || !strings.Contains(bob, "you said: bob: what is my account number?") {
		t.Fatalf("the second caller (another log, the same session name and seq) was answered %q, want its own answer", bob)
	}
	_, aliceCtx, _ := strings.Cut(alice, "context_id: ")
	_, bobCtx, _ := strings.Cut(bob, "context_id: ")
	if aliceCtx == bobCtx {
		t.Fatalf("both callers were given the remote context %s", aliceCtx)
	}
}

// A node that stops after its call reached the remote agent, and resumes the
// session from its log, sends the call again with the same messageId: the remote
// runs it once, and the running task answers the resumed call.
func TestA2ACallResumedAfterARestartIsTheSameMessage(t *testing.T) {
	gate := &gateTool{started: make(chan struct{}, 4), open: make(chan struct{})}
	b, _ := a2aNode(t, node.Config{Tools: []tools.Tool{gate}, Model: a2aScript(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "g1", Name: "gate", Arguments: "{}"}}},
		llm.ScriptStep{Content: "the remote task's one answer"})})
	sent, remote := recordMessageIDs(t, b.Handler())
	dir := t.TempDir()
	cfg := func() node.Config {
		tool, err := a2a.NewTool(a2a.ToolConfig{Name: "b", CardURL: remote + a2a.CardPath})
		if err != nil {
			t.Fatal(err)
		}
		return node.Config{DataDir: dir, Tools: []tools.Tool{tool}, Model: a2aScript(t,
			llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "a2a__b", Arguments: `{"message":"hello B"}`}}},
			llm.ScriptStep{Content: "done"})}
	}
	a, stop := nodetest.StartWithStop(t, cfg())
	if _, err := a.Submit(context.Background(), node.Task{Input: "ask B", SessionID: "support"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.started:
	case <-time.After(60 * time.Second):
		t.Fatal("the remote agent's task never started")
	}
	stop() // the call is left unanswered in the log; the remote task runs on

	again := nodetest.Start(t, cfg())
	ids := sent.wait(t, 2)
	if ids[0] != ids[1] || ids[0] == "" {
		t.Fatalf("the call was sent as %q, then resumed as %q: want one messageId", ids[0], ids[1])
	}
	close(gate.open)
	deadline := time.After(60 * time.Second)
	for {
		events, err := again.Log().Read(context.Background(), "support", 1)
		if err != nil {
			t.Fatal(err)
		}
		if last := events[len(events)-1]; last.Type == messages.TypeTaskCompleted || last.Type == messages.TypeTaskFailed {
			if out := toolResult(t, events); !strings.Contains(out, "the remote task's one answer") {
				t.Fatalf("the resumed call was answered %q", out)
			}
			break
		}
		select {
		case <-deadline:
			t.Fatalf("the resumed session did not end; its last event is %s", events[len(events)-1].Type)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if n := len(gate.started); n != 0 {
		t.Fatalf("the remote agent ran the call %d more times", n)
	}
}
