package node_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// TestAskerPrintsAnAnswerURLThatWorks: node run on a cluster node without a
// terminal prints where to answer an approval. A model's call ID is any string:
// the printed URL names a call whose ID is ".." by its key, so that curl posting
// to it answers the call. It printed the call ID raw, and curl took ".." for a dot
// segment and posted to the session's URL (404).
func TestAskerPrintsAnAnswerURLThatWorks(t *testing.T) {
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "..", Name: "send_email", Arguments: `{"to":"bob@example.com"}`}}},
		{Content: "handled"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	n := nodetest.Start(t, node.Config{Model: model, Tools: []tools.Tool{emailTool{&sent}},
		Agents: []node.NamedAgent{{Name: "mailer", Tools: []string{"send_email"}, Approvals: []string{"send_email"}}}})
	const session = "asker-1"
	live, stop := n.Watch(session)
	defer stop()
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: session, Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	var req *messages.ApprovalRequested
	for e := range live {
		if e.Type != messages.TypeApprovalRequested {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		req = p.(*messages.ApprovalRequested)
		break
	}
	if req == nil || req.CallID != ".." {
		t.Fatalf("approval requested: %+v; want one for call ..", req)
	}

	var out bytes.Buffer
	a := node.NewAsker(n, "node run", session, nil, false, true, &out)
	if err := a.Answer(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`POST (\S+) on a node`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("printed %q; want the URL to POST an answer to", out.String())
	}
	path := m[1]
	for _, seg := range strings.Split(path, "/") {
		if seg == "." || seg == ".." {
			t.Fatalf("printed %s: a dot segment, which a client removes", path)
		}
	}
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(`{"approve":true}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s (the printed URL): %s", path, resp.Status)
	}
	if events := waitEnded(t, n, session); events[len(events)-1].Type != messages.TypeTaskCompleted {
		t.Errorf("the task ended with %s", events[len(events)-1].Type)
	}
	if sent.Load() != 1 {
		t.Errorf("the approved tool ran %d times, want 1", sent.Load())
	}
}

// TestAskerTakesATerminalsReasonThatIsNoValidAnswer: on a terminal, the user
// answers y and a reason the node's bound on an answer refuses: bytes that are not
// UTF-8 (a Latin-1 terminal's "café"), or a line longer than 4096 bytes (a terminal
// out of canonical mode). The answer was refused ("the answer was not recorded")
// and nothing asked again: the call waited until its approval expired (for ever
// with no timeout), with nobody able to answer it, as node run serves no API. The
// reason is now made valid and cut, and the user's y is taken.
func TestAskerTakesATerminalsReasonThatIsNoValidAnswer(t *testing.T) {
	for name, reason := range map[string]string{
		"latin1": "caf\xe9",
		"long":   strings.Repeat("é", 3000),
	} {
		t.Run(name, func(t *testing.T) {
			model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
				{ToolCalls: []messages.ToolCall{{ID: "call_1", Name: "send_email", Arguments: `{"to":"bob@example.com"}`}}},
				{Content: "handled"},
			}})
			if err != nil {
				t.Fatal(err)
			}
			var sent atomic.Int64
			n := nodetest.Start(t, node.Config{Model: model, Tools: []tools.Tool{emailTool{&sent}},
				Agents: []node.NamedAgent{{Name: "mailer", Tools: []string{"send_email"}, Approvals: []string{"send_email"}}}})
			const session = "asker-reason"
			if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: session, Agent: "mailer"}); err != nil {
				t.Fatal(err)
			}
			p := waitApproval(t, n, session)
			var out bytes.Buffer
			a := node.NewAsker(n, "node run", session, strings.NewReader("y\n"+reason+"\n"), true, false, &out)
			if err := a.Answer(context.Background(), &messages.ApprovalRequested{Key: p.Key, CallID: p.Call, Tool: p.Tool, Arguments: p.Arguments}); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out.String(), "not recorded") {
				t.Fatalf("the terminal's answer was refused: %q", out.String())
			}
			if events := waitEnded(t, n, session); events[len(events)-1].Type != messages.TypeTaskCompleted {
				t.Errorf("the task ended with %s", events[len(events)-1].Type)
			}
			if sent.Load() != 1 {
				t.Errorf("the approved tool ran %d times, want 1", sent.Load())
			}
		})
	}
}

// TestAskerReadsOnAfterALineLongerThanTheScannersBuffer: a reason pasted on the
// terminal longer than 64 KiB (a log, a diff) ended the terminal's lines (the
// bufio.Scanner's token limit): the call was approved with no reason, and every
// later call rejected, "the terminal closed before anyone answered", the user never
// asked. The line is read whole, its reason cut as any long one, and the terminal
// answers on.
func TestAskerReadsOnAfterALineLongerThanTheScannersBuffer(t *testing.T) {
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "call_1", Name: "send_email", Arguments: `{"to":"bob@example.com"}`}}},
		{ToolCalls: []messages.ToolCall{{ID: "call_2", Name: "send_email", Arguments: `{"to":"carol@example.com"}`}}},
		{Content: "handled"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	n := nodetest.Start(t, node.Config{Model: model, Tools: []tools.Tool{emailTool{&sent}},
		Agents: []node.NamedAgent{{Name: "mailer", Tools: []string{"send_email"}, Approvals: []string{"send_email"}}}})
	const session = "asker-long-line"
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob and carol", SessionID: session, Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	a := node.NewAsker(n, "node run", session, strings.NewReader("y\n"+strings.Repeat("x", 70000)+"\ny\nsecond\n"), true, false, &out)
	answered := ""
	for range 2 {
		var p node.PendingApproval
		waitFor(t, 30*time.Second, "the next approval", func() bool {
			p = waitApproval(t, n, session)
			return p.Key != answered
		})
		if err := a.Answer(context.Background(), &messages.ApprovalRequested{Key: p.Key, CallID: p.Call, Tool: p.Tool, Arguments: p.Arguments}); err != nil {
			t.Fatal(err)
		}
		answered = p.Key
	}
	events := waitEnded(t, n, session)
	var reasons []string
	for _, e := range events {
		if e.Type == messages.TypeApprovalResolved {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			r := p.(*messages.ApprovalResolved)
			if !r.Approve {
				t.Errorf("call %s rejected: %q; the terminal said y (%q)", r.Key, r.Reason, out.String())
			}
			reasons = append(reasons, r.Reason)
		}
	}
	if len(reasons) != 2 || !strings.HasPrefix(reasons[0], "xxxx") || len(reasons[0]) > 4096 || reasons[1] != "second" {
		t.Errorf("the reasons recorded are %.40q; want the long line cut, then %q", reasons, "second")
	}
	if sent.Load() != 2 {
		t.Errorf("the approved tool ran %d times, want 2", sent.Load())
	}
}
