package node

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// armedLog is an event log whose next read of session s, once armed, says so on
// entered and waits for release.
type armedLog struct {
	eventlog.Log
	armed            atomic.Bool
	entered, release chan struct{}
}

func (l *armedLog) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	if session == "s" && l.armed.CompareAndSwap(true, false) {
		l.entered <- struct{}{}
		<-l.release
	}
	return l.Log.Read(ctx, session, from)
}

// A client that opens a session's stream (GET /v1/sessions/{id}/stream) while a
// model call streams is caught up on the call (its text so far, then its next
// deltas); when the call is answered before the stream's first read of the log
// returns, that read sends the call's model.responded first, and the deltas the
// watch holds came after it: the dashboard showed fragments of the call after
// its answer. The stream now sends no delta of a call it sent the answer of.
func TestStreamSendsNoDeltaAfterItsCallsAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	n, err := New(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	gate := &armedLog{Log: n.log, entered: make(chan struct{}), release: make(chan struct{})}
	n.log = gate
	defer n.Close()
	record := func(seq uint64, typ messages.Type, causation string) {
		t.Helper()
		e := messages.Envelope{ID: fmt.Sprintf("e%d", seq), SessionID: "s", Seq: seq, Type: typ, CausationID: causation, Version: 1, Actor: "session", Payload: []byte(`{}`)}
		if err := gate.Log.Append(ctx, []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
		n.hub.deliver("s", []messages.Envelope{e})
	}
	delta := func(seq uint64, text string) messages.ModelDelta {
		return messages.ModelDelta{Key: "s/2", Step: 1, Seq: seq, Attempt: 1, Content: text}
	}
	record(1, messages.TypeTaskSubmitted, "")
	record(2, messages.TypeModelRequested, "")
	n.hub.openCall("s", "s/2")
	n.hub.deliverDeltas("s", "", delta(1, "one "))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions/{id}/stream", n.stream)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	gate.armed.Store(true)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/sessions/s/stream", nil)
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			close(answered)
			return
		}
		answered <- resp
	}()
	select {
	case <-gate.entered: // watching, and reading the log
	case resp := <-answered:
		t.Fatalf("the stream answered %v before it read the log", resp)
	}
	n.hub.deliverDeltas("s", "", delta(2, "two "))
	n.hub.endDeltas("s", "", messages.DeltaEnd{Key: "s/2", Sent: 2})
	record(3, messages.TypeModelResponded, "s/2")
	record(4, messages.TypeTaskCompleted, "")
	close(gate.release)
	record(5, messages.TypeTaskSubmitted, "") // the next task: after everything above
	resp := <-answered
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	isAnswered := false
	for sc.Scan() {
		line := sc.Text()
		if line == "event: model.delta" && isAnswered {
			t.Fatalf("a delta of call s/2 after its answer")
		}
		if line == "event: model.responded" {
			isAnswered = true
		}
		if strings.HasPrefix(line, "id: 5") {
			return
		}
	}
	t.Fatalf("the stream ended before event 5: %v", sc.Err())
}
