package a2a

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
)

// A task's update that its webhook refuses (a 503, or no answer in time) is not
// tried again once the task's end is queued behind it, nor are the updates
// waiting before the end posted: each post is the whole task, and the end says
// more than they do. (They were tried 4 times each, 0.5, 1 and 2 s apart, or
// 10 s each for a webhook that does not answer, before the end was posted: a
// slow webhook heard of a task's end some 85 s late.)
func TestPushEndIsNotHeldBehindStaleUpdates(t *testing.T) {
	var mu sync.Mutex
	var states []string
	firstSeen := make(chan struct{})
	endQueued := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var task sdk.Task
		_ = json.Unmarshal(b, &task)
		mu.Lock()
		states = append(states, string(task.Status.State))
		mu.Unlock()
		if task.Status.State.Terminal() {
			return
		}
		once.Do(func() { close(firstSeen) })
		<-endQueued
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	s, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.backoff = time.Millisecond
	ended := make(chan struct{})
	s.final = func(context.Context, sdk.TaskID, string, sdk.TaskState, int) { close(ended) }
	cfg := &sdk.PushConfig{ID: "c1", URL: srv.URL}
	task := func(state sdk.TaskState) *sdk.Task {
		return &sdk.Task{ID: "t1", ContextID: "c", Status: sdk.TaskStatus{State: state}}
	}
	ctx := context.Background()
	if err := s.SendPush(ctx, cfg, task(sdk.TaskStateSubmitted)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-firstSeen:
	case <-time.After(10 * time.Second):
		t.Fatal("the first update was never posted")
	}
	for _, st := range []sdk.TaskState{sdk.TaskStateWorking, sdk.TaskStateCompleted} {
		if err := s.SendPush(ctx, cfg, task(st)); err != nil {
			t.Fatal(err)
		}
	}
	close(endQueued)
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the task's end was never posted")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{string(sdk.TaskStateSubmitted), string(sdk.TaskStateCompleted)}
	if len(states) != len(want) || states[0] != want[0] || states[1] != want[1] {
		t.Fatalf("the webhook got %v, want %v: the refused update not tried again, the one waiting not posted, once the end was queued", states, want)
	}
}

// A post of an update that its webhook does not answer is not tried again when
// the task's end is queued: the end is posted once that attempt timed out (it is
// not cut: its request may have reached the webhook, which would take it after
// the end, TestPushEndWaitsForTheUpdateInFlight), not after that post's four
// tries of up to 10 s each (the transport's wait for an answer) and the next
// update's.
func TestPushEndIsNotHeldBehindASlowStaleUpdatesTries(t *testing.T) {
	var mu sync.Mutex
	var states []string
	firstSeen := make(chan struct{})
	var once sync.Once
	stop := make(chan struct{})
	defer close(stop)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var task sdk.Task
		_ = json.Unmarshal(b, &task)
		mu.Lock()
		states = append(states, string(task.Status.State))
		mu.Unlock()
		if task.Status.State.Terminal() {
			return
		}
		once.Do(func() { close(firstSeen) })
		select { // a webhook that does not answer
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer srv.Close()
	s, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.backoff = time.Millisecond
	s.client.Timeout = 300 * time.Millisecond // the webhook's answer is waited for this long
	ended := make(chan struct{})
	s.final = func(context.Context, sdk.TaskID, string, sdk.TaskState, int) { close(ended) }
	cfg := &sdk.PushConfig{ID: "c1", URL: srv.URL}
	task := func(state sdk.TaskState) *sdk.Task {
		return &sdk.Task{ID: "t1", ContextID: "c", Status: sdk.TaskStatus{State: state}}
	}
	ctx := context.Background()
	if err := s.SendPush(ctx, cfg, task(sdk.TaskStateWorking)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-firstSeen:
	case <-time.After(10 * time.Second):
		t.Fatal("the first update was never posted")
	}
	if err := s.SendPush(ctx, cfg, task(sdk.TaskStateFailed)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the task's end was not posted after the stale update's post timed out")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(states) != 2 || states[1] != string(sdk.TaskStateFailed) {
		t.Fatalf("the webhook got %v, want the working update once, then the end", states)
	}
}
