package node_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node/nodetest"
)

// sessionReads counts the events of one session that Read and ReadN return.
type sessionReads struct {
	eventlog.Log
	session string
	mu      sync.Mutex
	read    int
}

func (l *sessionReads) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	events, err := l.Log.Read(ctx, session, from)
	l.count(session, len(events))
	return events, err
}

func (l *sessionReads) ReadN(ctx context.Context, session string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	var events []messages.Envelope
	var err error
	if pr, ok := l.Log.(eventlog.PageReader); ok {
		events, err = pr.ReadN(ctx, session, from, n, maxBytes)
	} else {
		events, err = eventlog.ReadPage(ctx, l.Log, session, from, n)
	}
	l.count(session, len(events))
	return events, err
}

func (l *sessionReads) count(session string, n int) {
	if session != l.session {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.read += n
}

func (l *sessionReads) events() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.read
}

// The recovery of the write after task at a start read the whole log of each
// session updated within the hour (up to 4,096 of them) to find the turns that
// completed within it. It reads the end of a session's log now, back to the
// hour (and to the task.submitted of a turn in it): a long session with one
// recent turn costs that turn's events, not its thousand older ones.
func TestWriteAfterTaskRecoveryReadsOnlyTheRecentEvents(t *testing.T) {
	w := newDurableWorld(t)
	const session, old = "s-long", 1000
	ctx := context.Background()
	start := time.Now().Add(-3 * time.Hour).UnixMicro()
	var batch []messages.Envelope
	for i := range old / 2 {
		sub, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: fmt.Sprintf("old question %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		done, err := messages.NewEnvelope(&messages.TaskCompleted{Output: "old answer"})
		if err != nil {
			t.Fatal(err)
		}
		sub.ID, sub.SessionID, sub.Seq, sub.TS, sub.Actor = fmt.Sprintf("old-%d", i), session, uint64(2*i+1), start+int64(2*i), "session"
		sub.CorrelationID = sub.ID
		done.ID, done.SessionID, done.Seq, done.TS, done.Actor = fmt.Sprintf("old-%d/done", i), session, uint64(2*i+2), start+int64(2*i+1), "session"
		done.CorrelationID, done.CausationID = sub.ID, sub.ID
		batch = append(batch, sub, done)
	}
	if err := w.log.Append(ctx, batch); err != nil {
		t.Fatal(err)
	}
	n1, stop1 := w.start(t, &switchEmbedder{}, w.data)
	nodetest.Run(t, n1, session, "I live in Oslo and I like tea.")
	rememberedFrom(t, n1, "Oslo", session)
	stop1()
	counting := &sessionReads{Log: w.log, session: session}
	n2, _ := durableWorld{log: counting, data: w.data}.start(t, &switchEmbedder{}, w.data)
	// The recovery runs before the turns of the start, in order.
	nodetest.Run(t, n2, "s-next", "I play chess on Sundays.")
	rememberedFrom(t, n2, "chess", "s-next")
	if got := counting.events(); got > 100 {
		t.Errorf("the recovery read %d events of %s, whose log has %d older than the hour; want its recent turn's few", got, session, old)
	}
}
