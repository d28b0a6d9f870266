package node

import (
	"context"
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// historyWriter writes a session's events straight to a log, as its actor would
// have recorded them: tasks of tool-calling steps, some completed, some failed,
// and a task left waiting for a call's approval.
type historyWriter struct {
	t    testing.TB
	log  eventlog.Log
	id   string
	seq  uint64
	ts   int64
	task string // the correlation ID of the task being written
	// tag goes into what the events say, so that two histories of the same
	// shape and IDs differ in their content.
	tag     string
	pending []messages.Envelope
}

func newHistoryWriter(t testing.TB, log eventlog.Log, id string) *historyWriter {
	return &historyWriter{t: t, log: log, id: id, ts: 1_700_000_000_000_000}
}

// add queues the session's next event; its ID is its effect key (session/seq),
// as a decided event's.
func (w *historyWriter) add(actor string, p messages.Payload) string {
	w.t.Helper()
	e, err := messages.NewEnvelope(p)
	if err != nil {
		w.t.Fatal(err)
	}
	w.seq++
	w.ts += 1000
	e.ID, e.SessionID, e.Seq, e.Actor, e.TS = fmt.Sprintf("%s/%d", w.id, w.seq), w.id, w.seq, actor, w.ts
	if _, ok := p.(*messages.TaskSubmitted); ok {
		w.task = e.ID
	}
	e.CorrelationID = w.task
	w.pending = append(w.pending, e)
	return e.ID
}

// flush appends the queued events.
func (w *historyWriter) flush() {
	w.t.Helper()
	for len(w.pending) > 0 {
		k := min(len(w.pending), 500)
		if err := w.log.Append(context.Background(), w.pending[:k]); err != nil {
			w.t.Fatal(err)
		}
		w.pending = w.pending[k:]
	}
}

// step writes a model call answered with one tool call per name, the calls'
// requests, and returns their keys.
func (w *historyWriter) step(n int, tools ...string) []string {
	key := w.add("session", &messages.ModelRequested{Key: fmt.Sprintf("%s/%d", w.id, w.seq+1), Model: "scripted", Step: n, Messages: 2 * n})
	calls := make([]messages.ToolCall, len(tools))
	for i, tool := range tools {
		calls[i] = messages.ToolCall{ID: fmt.Sprintf("c%d-%d", n, i), Name: tool, Arguments: fmt.Sprintf(`{"n":%d,"tag":%q}`, n, w.tag)}
	}
	w.add("model/scripted", &messages.ModelResponded{Key: key, Model: "scripted",
		Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: calls}, Usage: messages.Usage{PromptTokens: 10 * n, CompletionTokens: 5}})
	keys := make([]string, len(calls))
	for i, c := range calls {
		keys[i] = w.add("session", &messages.ToolCallRequested{Key: fmt.Sprintf("%s/%d", w.id, w.seq+1), CallID: c.ID, Tool: c.Name, Arguments: c.Arguments, Step: n})
	}
	return keys
}

// complete writes a call's result.
func (w *historyWriter) complete(key, tool string) {
	w.add("tool/"+tool, &messages.ToolCallCompleted{Key: key, Tool: tool, Result: "ok " + w.tag})
}

// tasks writes n tasks of steps steps each, every third failing.
func (w *historyWriter) tasks(n, steps int) {
	for range n {
		w.add("session", &messages.TaskSubmitted{Input: "count " + w.tag, TaskID: fmt.Sprintf("task-%d", w.seq+1)})
		for s := 1; s <= steps; s++ {
			for _, k := range w.step(s, "echo") {
				w.complete(k, "echo")
			}
		}
		if w.seq%3 == 0 {
			w.add("session", &messages.TaskFailed{Reason: messages.ReasonMaxSteps, Error: "too many steps " + w.tag, Steps: steps})
		} else {
			w.add("session", &messages.TaskCompleted{Output: "done " + w.tag, Steps: steps, Note: "noted " + w.tag})
		}
	}
	w.flush()
}

// waiting writes a task whose step's second call waits for approval (its
// first call answered), and returns the waiting call's key.
func (w *historyWriter) waiting() string {
	w.add("session", &messages.TaskSubmitted{Input: "delete it " + w.tag})
	keys := w.step(1, "echo", "delete")
	w.add("session", &messages.ApprovalRequested{Key: keys[1], CallID: "c1-1", Tool: "delete", Arguments: `{"n":1}`})
	w.complete(keys[0], "echo")
	w.flush()
	return keys[1]
}

// approve writes the approval of the call key, its result and the end of its task.
func (w *historyWriter) approve(key string) {
	w.add("session", &messages.ApprovalResolved{Key: key, Approve: true, By: messages.ApprovedByHTTP})
	w.complete(key, "delete")
	w.add("session", &messages.TaskCompleted{Output: "deleted " + w.tag, Steps: 1})
	w.flush()
}
