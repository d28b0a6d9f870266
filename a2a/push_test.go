package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/tools"
)

func TestPushSenderRefusesLoopbackByDefault(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	s, err := NewPushSender(nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Send(context.Background(), &sdk.PushConfig{URL: srv.URL + "/hook"}, []byte(`{}`))
	if !errors.Is(err, tools.ErrAddressRefused) {
		t.Fatalf("err %v, want the address refused", err)
	}
	if hits.Load() != 0 {
		t.Fatalf("the webhook was called %d times", hits.Load())
	}
}

func TestPushSenderRetriesWithBackoffThenDelivers(t *testing.T) {
	var hits atomic.Int64
	var token, body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		token.Store(r.Header.Get("X-A2A-Notification-Token"))
		body.Store(string(b))
	}))
	defer srv.Close()
	s, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.backoff = 20 * time.Millisecond
	start := time.Now()
	if err := s.Send(context.Background(), &sdk.PushConfig{URL: srv.URL, Token: "tok"}, []byte(`{"id":"t1"}`)); err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 3 || token.Load() != "tok" || body.Load() != `{"id":"t1"}` {
		t.Fatalf("hits %d, token %v, body %v", hits.Load(), token.Load(), body.Load())
	}
	if waited := time.Since(start); waited < 60*time.Millisecond {
		t.Fatalf("two retries after 20ms and 40ms took %s", waited)
	}
}

func TestPushSenderGivesUpOnClientErrors(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	s, _ := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	s.backoff = time.Millisecond
	if err := s.Send(context.Background(), &sdk.PushConfig{URL: srv.URL}, []byte(`{}`)); err == nil || hits.Load() != 1 {
		t.Fatalf("err %v after %d calls; a 404 is not retried", err, hits.Load())
	}
}

// A webhook that answers with a redirect did not take the notification: the
// redirect is not followed (its target was never checked against the allow list)
// and the post is tried again, as after a 5xx; a task's end only redirected is
// never taken for posted.
func TestPushSenderRetriesARedirectWithoutFollowingIt(t *testing.T) {
	var followed atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { followed.Add(1) }))
	defer target.Close()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) <= 2 || r.URL.Path == "/always" {
			http.Redirect(w, r, target.URL, http.StatusFound)
		}
	}))
	defer srv.Close()
	s, _ := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	s.backoff = time.Millisecond
	if err := s.Send(context.Background(), &sdk.PushConfig{URL: srv.URL}, []byte(`{}`)); err != nil || hits.Load() != 3 {
		t.Fatalf("err %v after %d posts; want two redirects tried again, the third post taken", err, hits.Load())
	}
	var finals atomic.Int64
	s.final = func(context.Context, sdk.TaskID, string, sdk.TaskState, int) { finals.Add(1) }
	s.endAttempts, s.endBackoffMax = 2, time.Millisecond
	s.send(context.Background(), pushItem{cfg: &sdk.PushConfig{ID: "c", URL: srv.URL + "/always"}, body: []byte(`{}`), state: sdk.TaskStateCompleted}, "t1", nil)
	if finals.Load() != 0 || hits.Load() != 5 {
		t.Fatalf("an end answered only with redirects: %d posts (want 5), taken for posted %d times", hits.Load(), finals.Load())
	}
	if followed.Load() != 0 {
		t.Fatalf("the redirect was followed %d times", followed.Load())
	}
}

// A task's notifications to a config are posted one at a time, in the order the
// updates came, even when the first is slow or retried; an update of an earlier
// state that comes after the end is not posted: a webhook never sees a task go back.
func TestPushSenderPostsATasksUpdatesInOrder(t *testing.T) {
	var (
		mu     sync.Mutex
		states []string
		first  = true
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var task sdk.Task
		_ = json.NewDecoder(r.Body).Decode(&task)
		mu.Lock()
		slow := first
		first = false
		mu.Unlock()
		if slow {
			time.Sleep(200 * time.Millisecond) // the first post is slow, then refused once
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		states = append(states, string(task.Status.State))
		mu.Unlock()
	}))
	defer hook.Close()
	s, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.backoff = time.Millisecond
	cfg := &sdk.PushConfig{ID: "c", URL: hook.URL}
	send := func(states ...sdk.TaskState) {
		t.Helper()
		for _, st := range states {
			if err := s.SendPush(context.Background(), cfg, &sdk.Task{ID: "t1", Status: sdk.TaskStatus{State: st}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(sdk.TaskStateWorking, sdk.TaskStateInputRequired, sdk.TaskStateWorking)
	// The end, once the updates before it were posted (queued before they
	// were, it supersedes them: TestPushEndIsNotHeldBehindStaleUpdates).
	waitUntil := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(states)
		mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(waitUntil) {
			t.Fatalf("the webhook got %d updates within 10 s, want 3", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	send(sdk.TaskStateCompleted, sdk.TaskStateWorking)
	want := []string{"working", "input-required", "working", "completed"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := slices.Clone(states)
		mu.Unlock()
		if len(got) >= len(want) {
			time.Sleep(50 * time.Millisecond) // a stale post would come now
			mu.Lock()
			got = slices.Clone(states)
			mu.Unlock()
			if !slices.Equal(got, want) {
				t.Fatalf("the webhook got %v, want %v", got, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook got %v within 10 s, want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A task's end is tried for longer than an update of a running task: a webhook
// that refuses eight posts in a row (a restart) still gets the end, while a
// running task's update is given up after four tries (the next update supersedes
// it). A 429 or 503 answer's Retry-After is waited for.
func TestPushSenderTriesATasksEndLonger(t *testing.T) {
	var (
		mu    sync.Mutex
		hits  = map[string]int{}
		times = map[string][]time.Time{}
		got   []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var task sdk.Task
		_ = json.NewDecoder(r.Body).Decode(&task)
		id := string(task.ID)
		mu.Lock()
		defer mu.Unlock()
		hits[id]++
		times[id] = append(times[id], time.Now())
		switch {
		case id == "later" && hits[id] == 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case id != "later" && hits[id] <= 8:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			got = append(got, id+" "+string(task.Status.State))
		}
	}))
	defer hook.Close()
	s, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.backoff, s.endBackoffMax = time.Millisecond, 4*time.Second
	cfg := &sdk.PushConfig{ID: "c", URL: hook.URL}
	for _, task := range []*sdk.Task{
		{ID: "running", Status: sdk.TaskStatus{State: sdk.TaskStateWorking}},
		{ID: "ended", Status: sdk.TaskStatus{State: sdk.TaskStateCompleted}},
		{ID: "later", Status: sdk.TaskStatus{State: sdk.TaskStateFailed}},
	} {
		if err := s.SendPush(context.Background(), cfg, task); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		done := len(got) == 2 && hits["running"] == 4
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("delivered %q; posts %v", got, hits)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a fifth try of the running task's update would come now
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(got)
	if !slices.Equal(got, []string{"ended completed", "later failed"}) {
		t.Fatalf("delivered %q", got)
	}
	if hits["running"] != 4 || hits["ended"] != 9 {
		t.Fatalf("posts %v: want the running task's update tried 4 times, the end until taken (9)", hits)
	}
	if gap := times["later"][1].Sub(times["later"][0]); gap < 900*time.Millisecond {
		t.Fatalf("the post after a Retry-After of 1 s came %s later", gap)
	}
}
