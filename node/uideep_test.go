package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// deepSession appends to n's log a finished session of steps tool-calling steps
// as the agent loop records them: each event caused by the one before it (task →
// model.requested → model.responded → tool.requested → tool.completed → the next
// model.requested …), so the causation chain is as deep as the session is long.
func deepSession(t *testing.T, n *node.Node, id string, steps int) {
	t.Helper()
	var events []messages.Envelope
	ts := time.Now().Add(-time.Minute).UnixMicro()
	prev := ""
	add := func(actor string, p messages.Payload) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(events) + 1)
		e.ID, e.SessionID, e.Seq, e.Actor, e.CausationID, e.CorrelationID, e.TS =
			fmt.Sprintf("%s/%d", id, seq), id, seq, actor, prev, id+"/1", ts+int64(seq)
		prev = e.ID
		events = append(events, e)
	}
	add("session", &messages.TaskSubmitted{Input: "count to a thousand"})
	for s := 1; s <= steps; s++ {
		key := fmt.Sprintf("%s/%d", id, len(events)+1)
		add("session", &messages.ModelRequested{Key: key, Model: "scripted", Step: s, Messages: 2 * s})
		call := messages.ToolCall{ID: fmt.Sprint("c", s), Name: "echo", Arguments: fmt.Sprintf(`{"n":%d}`, s)}
		add("model/scripted", &messages.ModelResponded{Key: key, Model: "scripted",
			Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{call}},
			Usage:   messages.Usage{PromptTokens: 10, CompletionTokens: 5}})
		tkey := fmt.Sprintf("%s/%d", id, len(events)+1)
		add("session", &messages.ToolCallRequested{Key: tkey, CallID: call.ID, Tool: "echo", Arguments: call.Arguments, Step: s})
		add("tool/echo", &messages.ToolCallCompleted{Key: tkey, CallID: call.ID, Tool: "echo", Result: fmt.Sprint(s)})
	}
	add("session", &messages.TaskCompleted{Output: "done", Steps: steps})
	for len(events) > 0 {
		k := min(len(events), 500)
		if err := n.Log().Append(context.Background(), events[:k]); err != nil {
			t.Fatal(err)
		}
		events = events[k:]
	}
}

// A session of a thousand steps (max_steps allows 1000; each step's events are
// caused by the step before) is shown on the dashboard: its timeline nests each
// event under its cause, and the page drew it with one recursive call per level
// and a flat(Infinity) of arrays as deep, which a call stack does not hold.
func TestDashboardShowsALongSessionInChromium(t *testing.T) {
	bin := chromium(t)
	n := nodetest.Start(t, node.Config{})
	deepSession(t, n, "deep-1", 1000)
	base := serveUI(t, n.Handler())
	b := newBrowser(t, bin)
	b.navigate(base + "#/sessions/deep-1")
	b.waitTrue("the timeline drawn or an error shown", `document.querySelector(".tree .step") || !document.getElementById("error").hidden`)
	var errText string
	b.eval(`document.getElementById("error").hidden ? "" : document.getElementById("error").textContent`, &errText)
	if errText != "" {
		t.Fatalf("the timeline of a 1000-step session: error %q", errText)
	}
	// The timeline holds the rows in view; its end is drawn when scrolled to.
	last := timelineEnd(b, 4002)
	b.waitText("#events-count", "4,002")
	if !strings.Contains(last, "completed: done") {
		t.Errorf("the timeline's last row is %q, want the task's end, 4002", last)
	}
	var got struct{ Overflow, Indent int }
	b.eval(`({Overflow: document.documentElement.scrollWidth - window.innerWidth,
		Indent: Math.round([...document.querySelectorAll(".tree .step")].pop().getBoundingClientRect().left - document.querySelector(".tree").getBoundingClientRect().left)})`, &got)
	// Its indentation stops at a depth: the page is no wider than the window.
	if got.Overflow > 0 {
		t.Errorf("the timeline is %d px wider than the window", got.Overflow)
	}
	if got.Indent <= 0 {
		t.Errorf("the timeline's last row is indented %d px, want it under its cause", got.Indent)
	}
}
