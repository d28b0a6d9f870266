package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools/notes"
)

// answers returns what each tool call of a session's events answered, the calls
// that gather a task's context (actors/gather.go) aside.
func answers(events []messages.Envelope) []string {
	var out []string
	gathering := map[string]bool{} // the keys of the calls that gather a task's context
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			continue
		}
		switch p := p.(type) {
		case *messages.ToolCallRequested:
			if p.Purpose == actors.PurposeEvidence || p.Purpose == actors.PurposeRecall || p.Purpose == actors.PurposeNotes {
				gathering[p.Key] = true
			}
		case *messages.ToolCallCompleted:
			if !gathering[p.Key] {
				out = append(out, p.Result+p.Error)
			}
		}
	}
	return out
}

func scripted(t *testing.T, call messages.ToolCall) llm.Model {
	t.Helper()
	m, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{call}},
		{Content: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A note the agent adds in one node's session is in the log: a node started later on
// the same data directory finds it, and does not take the notes stream for an
// unfinished session.
func TestNotesOutliveTheNode(t *testing.T) {
	dir := t.TempDir()
	const secret = "sk-live-0123456789abcdefghij"
	first, stop := nodetest.StartWithStop(t, node.Config{DataDir: dir, Notes: &notes.Config{}, Secrets: []string{secret},
		Model: scripted(t, messages.ToolCall{ID: "c1", Name: "notes",
			Arguments: `{"op":"add","args":{"type":"preference","tags":["alice"],"body":"Alice likes aisle seats; her key is ` + secret + `"}}`})})
	added := answers(nodetest.Run(t, first, "s-1", "remember Alice's seat"))
	stop()
	if len(added) != 1 || !strings.Contains(added[0], `"id":"n1"`) || strings.Contains(added[0], secret) {
		t.Fatalf("the add answered %q; want note n1, its secret redacted", added)
	}

	// The node resumes every unfinished session it is offered (Resume says yes to
	// all, as a nil Resume does) and must not be offered the notes stream, which has
	// no task and so looks unfinished by the rules of sessions.
	var offeredMu sync.Mutex
	var offered []string
	second := nodetest.Start(t, node.Config{DataDir: dir, Notes: &notes.Config{},
		Resume: func(id string) bool {
			offeredMu.Lock()
			defer offeredMu.Unlock()
			offered = append(offered, id)
			return true
		},
		Model: scripted(t, messages.ToolCall{ID: "c1", Name: "notes", Arguments: `{"op":"search","args":{"query":"alice seat"}}`})})
	found := answers(nodetest.Run(t, second, "s-2", "where does Alice sit?"))
	if len(found) != 1 || !strings.Contains(found[0], "Alice likes aisle seats") || !strings.Contains(found[0], "[REDACTED]") {
		t.Fatalf("the search in the second node answered %q", found)
	}

	offeredMu.Lock()
	if slices.Contains(offered, notes.Stream("default")) {
		t.Errorf("the second node offered the notes stream for resuming as a session: %v", offered)
	}
	offeredMu.Unlock()

	// The sessions the API lists show the stream as notes, not as a running session;
	// asked for the agents' sessions only, or for a status, it lists no notes.
	listed := func(query string) map[string]string {
		t.Helper()
		rec := httptest.NewRecorder()
		second.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/sessions"+query, nil))
		var infos []eventlog.SessionInfo
		if err := json.Unmarshal(rec.Body.Bytes(), &infos); err != nil {
			t.Fatalf("GET /v1/sessions%s: %v\n%s", query, err, rec.Body.String())
		}
		statuses := map[string]string{}
		for _, info := range infos {
			statuses[info.ID] = info.Status
		}
		return statuses
	}
	if statuses := listed(""); statuses["notes/default"] != notes.Status || statuses["s-2"] != messages.StatusCompleted {
		t.Errorf("GET /v1/sessions: %v", statuses)
	}
	for _, query := range []string{"?sessions_only=true", "?status=completed", "?sessions_only=true&detail=true"} {
		if statuses := listed(query); len(statuses) != 2 || statuses["s-2"] != messages.StatusCompleted {
			t.Errorf("GET /v1/sessions%s: %v, want the sessions s-1 and s-2 only", query, statuses)
		}
	}
	if statuses := listed("?status=running"); len(statuses) != 0 {
		t.Errorf("GET /v1/sessions?status=running: %v, want none (the notes stream has no task)", statuses)
	}
	rec := httptest.NewRecorder()
	second.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/sessions?sessions_only=maybe", nil))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("GET /v1/sessions?sessions_only=maybe: %d, want 400", rec.Code)
	}

	// The stream holds the note's event and nothing a session would write.
	events, err := second.Log().Read(context.Background(), notes.Stream("default"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Type != messages.TypeNoteAdded {
		t.Fatalf("the notes stream: %+v; want one note.added", events)
	}
	if p, err := events[0].Decode(); err != nil || !strings.HasPrefix(p.(*messages.NoteAdded).Key, "s-1/") {
		t.Errorf("the note.added: %+v, %v; want it keyed by the tool call of s-1", p, err)
	}
}
