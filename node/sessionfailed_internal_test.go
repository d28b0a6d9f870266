package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// brokenLog is a SQLite log that refuses every write of one session for its content
// and cannot read it, as a bug or a corrupt store would: the session's actor fails
// on each attempt, and its supervisor gives it up.
type brokenLog struct {
	*sqlite.Log
	session string
}

func (l *brokenLog) broken(events []messages.Envelope) bool {
	return len(events) > 0 && events[0].SessionID == l.session
}

func (l *brokenLog) Append(ctx context.Context, events []messages.Envelope) error {
	if l.broken(events) {
		return fmt.Errorf("%w: the store rejects the batch", eventlog.ErrInvalidEvent)
	}
	return l.Log.Append(ctx, events)
}

func (l *brokenLog) Claim(ctx context.Context, events []messages.Envelope) error {
	if l.broken(events) {
		return fmt.Errorf("%w: the store rejects the batch", eventlog.ErrInvalidEvent)
	}
	return l.Log.Claim(ctx, events)
}

func (l *brokenLog) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	if id == l.session {
		return nil, errors.New("the store cannot read the session")
	}
	return l.Log.Read(ctx, id, from)
}

// TestAFailedSessionAnswersSessionFailed: a session whose actor fails on a task (and
// on every restart) is reported as failed, with the cause, not as a session this
// node does not own: POST /v1/tasks answers 500 at once (not 503 after
// SubmitTimeout), and the tasks handler retries such a task rather than send it to
// the poison topic (the session's next actor may take it).
func TestAFailedSessionAnswersSessionFailed(t *testing.T) {
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(ctx, Config{Log: &brokenLog{Log: base, session: "broken"}, NodeID: "a", Model: model, SubmitTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)

	resp, err := http.Post(srv.URL+"/v1/tasks", "application/json", strings.NewReader(`{"input": "go", "session_id": "broken"}`))
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body["error"], "session failed") || !strings.Contains(body["error"], "the store rejects the batch") {
		t.Errorf("POST /v1/tasks to a failing session: %d %v; want 500 saying the session failed, and why", resp.StatusCode, body)
	}

	// The same task read from troupe.tasks.
	env, err := n.ingress.Admit(Task{Input: "go", SessionID: "broken"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := messages.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	msg := message.NewMessage(env.ID, b)
	msg.Metadata.Set(messages.MetaSessionID, env.SessionID)
	msg.Metadata.Set(messages.MetaType, string(env.Type))
	err = n.handleTask(msg)
	if !errors.Is(err, actors.ErrSessionFailed) || errors.Is(err, errPermanent) {
		t.Errorf("the tasks handler returned %v for a task of a failing session; want ErrSessionFailed, retried (not permanent)", err)
	}
}
