package a2a

import (
	"bufio"
	"context"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
)

// finalThenHold is a request handler whose subscription yields a task that
// ended, then holds the stream until its context ends: the moment between a
// task's final event and the stream's close, stretched.
type finalThenHold struct {
	a2asrv.RequestHandler
	sent chan struct{} // closed once the final event is handed over
}

func (h *finalThenHold) OnResubscribeToTask(ctx context.Context, p *sdk.TaskIDParams) iter.Seq2[sdk.Event, error] {
	return endOnStop(ctx, func(ctx context.Context) iter.Seq2[sdk.Event, error] {
		return func(yield func(sdk.Event, error) bool) {
			done := &sdk.Task{ID: p.ID, ContextID: "c-1", Status: sdk.TaskStatus{State: sdk.TaskStateCompleted}}
			if !yield(done, nil) {
				return
			}
			close(h.sent)
			<-ctx.Done()
		}
	})
}

// A stream whose task ends as the server stops ends with the task's final event
// alone: the server's stop, come after it, adds no error saying the stream ends
// while the task goes on (a client took the task for completed, then raised the
// error, or resubscribed to a task that had ended).
func TestAStreamEndedByItsTaskGetsNoStopEvent(t *testing.T) {
	stop := make(chan struct{})
	s, err := NewServer(&silentBackend{}, ServerConfig{Stopping: stop}, []AgentInfo{{Name: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	h := &finalThenHold{sent: make(chan struct{})}
	srv := httptest.NewServer(s.guard(a2asrv.NewJSONRPCHandler(h)))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tasks/resubscribe","params":{"id":"t-1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-h.sent
	close(stop)
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, data)
		}
	}
	if len(events) != 1 || !strings.Contains(events[0], `"completed"`) {
		t.Errorf("the stream: %q, want the completed task alone", events)
	}
}

// quietThenStop is a request handler whose subscription yields nothing before
// the server stops: a stream cut before its first event.
type quietThenStop struct {
	a2asrv.RequestHandler
	in chan struct{} // closed once the stream waits for its first event
}

func (h *quietThenStop) OnResubscribeToTask(ctx context.Context, p *sdk.TaskIDParams) iter.Seq2[sdk.Event, error] {
	return endOnStop(ctx, func(ctx context.Context) iter.Seq2[sdk.Event, error] {
		return func(yield func(sdk.Event, error) bool) {
			close(h.in)
			<-ctx.Done()
		}
	})
}

// A stream the server's stop cuts before its first event is a stream all the
// same, of one event, the error saying that it ends while the task goes on: in
// A2A 0.3 as in 1.0. A 1.0 stream (SubscribeToTask) was answered a JSON error
// instead, "the server answered nothing", which a client of a stream takes for a
// broken answer and which says neither why nor what to do.
func TestAStreamCutBeforeItsFirstEventSaysTheServerStops(t *testing.T) {
	for _, c := range []struct{ method, version string }{{"tasks/resubscribe", ""}, {"SubscribeToTask", "1.0"}} {
		t.Run(c.method, func(t *testing.T) {
			stop := make(chan struct{})
			s, err := NewServer(&silentBackend{}, ServerConfig{Stopping: stop}, []AgentInfo{{Name: "default"}})
			if err != nil {
				t.Fatal(err)
			}
			h := &quietThenStop{in: make(chan struct{})}
			srv := httptest.NewServer(s.guard(a2asrv.NewJSONRPCHandler(h)))
			defer srv.Close()
			req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"`+c.method+`","params":{"id":"t-1"}}`))
			if err != nil {
				t.Fatal(err)
			}
			if c.version != "" {
				req.Header.Set(VersionHeader, c.version)
			}
			go func() {
				<-h.in
				close(stop)
			}()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Errorf("Content-Type %q, want text/event-stream", ct)
			}
			var events []string
			for _, line := range strings.Split(string(body), "\n") {
				if data, ok := strings.CutPrefix(line, "data: "); ok {
					events = append(events, data)
				}
			}
			if len(events) != 1 || !strings.Contains(events[0], "-32603") || !strings.Contains(events[0], "stops serving") {
				t.Errorf("the stream: %q (body %q), want the one event saying the server stops", events, body)
			}
		})
	}
}
