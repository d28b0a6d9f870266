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
		// Corrupt: no retry mends it (a read that fails otherwise is retried in
		// place, the session waiting for the log).
		return nil, fmt.Errorf("%w: the store cannot read the session", messages.ErrCorrupt)
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
	err = n.handleTask(taskMessage(t, n, "broken"))
	if !errors.Is(err, actors.ErrSessionFailed) || errors.Is(err, errPermanent) {
		t.Errorf("the tasks handler returned %v for a task of a failing session; want ErrSessionFailed, retried (not permanent)", err)
	}
}

// taskMessage is a task "go" for session as troupe.tasks delivers it.
func taskMessage(t *testing.T, n *Node, session string) *message.Message {
	t.Helper()
	env, err := n.ingress.Admit(Task{Input: "go", SessionID: session})
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
	return msg
}

// buggyLog is a SQLite log whose reads and writes of one session panic, as a bug met on some
// data does (an index out of range): the session's actor panics on each attempt.
type buggyLog struct {
	*brokenLog
	session string
}

func (l *buggyLog) bug(id string) {
	if id == l.session {
		var none []messages.Envelope
		_ = none[len(id)] // a runtime error, as a bug's
	}
}

func (l *buggyLog) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	l.bug(id)
	return l.brokenLog.Read(ctx, id, from)
}

func (l *buggyLog) Claim(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 0 {
		l.bug(events[0].SessionID)
	}
	return l.brokenLog.Claim(ctx, events)
}

func (l *buggyLog) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 0 {
		l.bug(events[0].SessionID)
	}
	return l.brokenLog.Append(ctx, events)
}

// A task read from the bus whose session's actor panics on it every time goes to
// the poison topic after panicsBeforePoison attempts in a row, with the panic in its
// reason, instead of being retried for good (holding the session's later messages
// and its partition's commits); a session whose log fails with an error, which may
// pass, is retried however often it fails.
func TestATaskWhoseSessionPanicsEveryTimeIsPoisoned(t *testing.T) {
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
	n, err := New(ctx, Config{Log: &buggyLog{brokenLog: &brokenLog{Log: base, session: "broken"}, session: "buggy"}, NodeID: "a", Model: model, SubmitTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	buggy := taskMessage(t, n, "buggy")
	for i := 1; i <= panicsBeforePoison; i++ {
		err := n.handleTask(buggy)
		if !errors.Is(err, actors.ErrSessionPanicked) {
			t.Fatalf("attempt %d: %v; want ErrSessionPanicked", i, err)
		}
		if permanent := errors.Is(err, errPermanent); permanent != (i == panicsBeforePoison) {
			t.Fatalf("attempt %d: permanent %v: %v", i, permanent, err)
		}
		if i == panicsBeforePoison && !strings.Contains(err.Error(), "index out of range") {
			t.Fatalf("the poisoned task's reason does not name the panic: %v", err)
		}
	}
	broken := taskMessage(t, n, "broken")
	for i := range 2 * panicsBeforePoison {
		if err := n.handleTask(broken); !errors.Is(err, actors.ErrSessionFailed) || errors.Is(err, actors.ErrSessionPanicked) || errors.Is(err, errPermanent) {
			t.Fatalf("attempt %d of a session whose log fails: %v; want ErrSessionFailed, retried", i+1, err)
		}
	}
	// Another session is not held by them.
	if err := n.handleTask(taskMessage(t, n, "fine")); err != nil {
		t.Fatalf("a task of another session: %v", err)
	}
}
