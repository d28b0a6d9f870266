package node

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// downSubscriber is a bus that cannot subscribe (a broker that does not answer).
type downSubscriber struct{}

func (downSubscriber) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	return nil, errors.New("the broker does not answer")
}
func (downSubscriber) Close() error { return nil }

// A stream whose session another node runs, while the bus cannot be read (every
// watch ends at once, with nothing), keeps its client (heartbeats) and reads the
// log a few times, not in a loop.
func TestStreamPausesBetweenWatchesThatEndAtOnce(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &readCountingLog{Log: base, reads: map[string]int{}}
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Seq, e.TS = "e1", "s1", 1, time.Now().UnixMicro()
	if err := log.Append(context.Background(), []messages.Envelope{e}); err != nil {
		t.Fatal(err)
	}
	elsewhere := func(string) bool { return false }
	n := &Node{cfg: Config{HTTP: HTTPConfig{WriteTimeout: 30 * time.Second}}, log: log,
		hub: newHub(downSubscriber{}, elsewhere), streamsDone: make(chan struct{})}

	const window = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	req := httptest.NewRequest(http.MethodGet, "/v1/sessions/s1/stream", nil).WithContext(ctx)
	req.SetPathValue("id", "s1")
	rec := httptest.NewRecorder()
	n.stream(rec, req) // returns when ctx ends
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "id: 1\n") {
		t.Fatalf("stream: %d %q", rec.Code, rec.Body.String())
	}
	log.mu.Lock()
	reads := log.reads["s1"]
	log.mu.Unlock()
	t.Logf("%d reads of the log in %v", reads, window)
	// Pauses of 50 ms, 100 ms, 200 ms, ... in a second: 5 watches and their reads,
	// and the first read. Without them, thousands.
	if reads > 20 {
		t.Fatalf("the stream read the log %d times in %v while the bus was down", reads, window)
	}
}
