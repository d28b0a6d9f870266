package a2a

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// A running node posts the end of a task that ended a while ago and whose end was
// not posted (no A2APushFinal: the node posting it closed meanwhile, and no node
// started after it to post it, ResumePushes), and records it posted; the end of
// a task that just ended is left to the sender that posts it as it ends. Before,
// only a node that started posted such an end: with none starting, Prune deleted
// the config and the end was lost.
func TestFinishPushesPostsAnEndedTasksUnpostedEnd(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var mu sync.Mutex
	var got []sdk.TaskID
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var task sdk.Task
		if err := json.NewDecoder(r.Body).Decode(&task); err != nil || !task.Status.State.Terminal() {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, task.ID)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	// record records a task that ended at, in its own session.
	record := func(session, message string, at time.Time) sdk.TaskID {
		t.Helper()
		var events []messages.Envelope
		for i, p := range []messages.Payload{&messages.TaskSubmitted{Input: "hi"}, &messages.TaskCompleted{Output: "done", Steps: 1}} {
			e, err := messages.NewEnvelope(p)
			if err != nil {
				t.Fatal(err)
			}
			e.SessionID, e.Seq, e.TS, e.ID = session, uint64(i+1), at.UnixMicro()+int64(i), session+"-end"
			if i == 0 {
				e.ID = EnvelopeID(session, message)
			}
			events = append(events, e)
		}
		if err := l.Append(ctx, events); err != nil {
			t.Fatal(err)
		}
		return TaskIDFor(session, message)
	}
	old := record("old", "m-old", time.Now().Add(-time.Hour))
	recent := record("recent", "m-recent", time.Now())
	s, err := NewServer(&logBackend{log: l}, ServerConfig{PushLog: l, PushAllow: []string{"127.0.0.1"}}, []AgentInfo{{Name: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, task := range []sdk.TaskID{old, recent} {
		if _, err := s.pushes.Save(ctx, task, &sdk.PushConfig{ID: "c1", URL: hook.URL}); err != nil {
			t.Fatal(err)
		}
	}
	s.FinishPushes(ctx)
	deadline := time.Now().Add(20 * time.Second)
	for {
		u, err := NewPushStore(l, nil, nil).Unfinished(ctx, old)
		if err != nil {
			t.Fatal(err)
		}
		if len(u) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the end of the task that ended an hour ago was not posted (nor recorded posted)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []sdk.TaskID{old}) {
		t.Errorf("the webhook took the ends of %v; want the task's that ended an hour ago only", got)
	}
}

// The end of a task that ended long ago, posted again by a running node
// (FinishPushes) to a webhook that keeps failing, is posted without a lease of
// the task's notifications: no update of the task is posted any more. Before,
// each hourly try wrote a lease to the task's push stream, which kept the stream
// changed: Prune never gave the end up (PushUnpostedRetention), and the stream
// grew by a lease an hour for ever.
func TestFinishPushesTakesNoLease(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(hook.Close)
	var events []messages.Envelope
	for i, p := range []messages.Payload{&messages.TaskSubmitted{Input: "hi"}, &messages.TaskCompleted{Output: "done", Steps: 1}} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq, e.TS, e.ID = "old", uint64(i+1), time.Now().Add(-time.Hour).UnixMicro()+int64(i), "old-end"
		if i == 0 {
			e.ID = EnvelopeID("old", "m-old")
		}
		events = append(events, e)
	}
	if err := l.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	task := TaskIDFor("old", "m-old")
	s, err := NewServer(&logBackend{log: l}, ServerConfig{PushLog: l, PushAllow: []string{"127.0.0.1"}}, []AgentInfo{{Name: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.push.backoff, s.push.endAttempts, s.push.endBackoffMax = time.Millisecond, 2, time.Millisecond
	c, err := s.pushes.Save(ctx, task, &sdk.PushConfig{ID: "c1", URL: hook.URL})
	if err != nil {
		t.Fatal(err)
	}
	s.FinishPushes(ctx)
	deadline := time.Now().Add(20 * time.Second)
	for s.push.busy(task, c) {
		if time.Now().After(deadline) {
			t.Fatal("the end's tries did not end within 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stream, err := l.Read(ctx, PushStreamFor(task), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range stream {
		if p, err := e.Decode(); err == nil {
			if f, ok := p.(*messages.A2APushFinal); ok {
				t.Fatalf("the task's push stream has %+v at seq %d: the end posted again changed it", f, e.Seq)
			}
		}
	}
}
