package actors_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// permanentReads is a store whose reads of one session fail with err.
type permanentReads struct {
	actors.EventStore
	session string
	err     error
}

func (s *permanentReads) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	if s.err != nil && id == s.session {
		return nil, s.err
	}
	return s.EventStore.Read(ctx, id, from)
}

// A session whose start read fails with an error no retry mends (a ClickHouse
// schema or auth error: UNKNOWN_TABLE, AUTHENTICATION_FAILED) fails as it did
// before start reads were retried: the task it started for and a cancellation
// queued behind it are answered ErrSessionFailed, not left waiting for a log that
// will never answer (readDurably, eventlog.ClassifyFailure).
func TestASessionWhoseLogReadFailsForGoodFailsAtOnce(t *testing.T) {
	for _, c := range []struct {
		fault string
		code  int32
	}{{"read", 60}, {"epoch", 516}} {
		t.Run(c.fault, func(t *testing.T) {
			exc := fmt.Errorf("eventlog/clickhouse: read: %w", &clickhouse.Exception{Code: c.code, Message: "no such table, or no access"})
			store := &permanentReads{session: "s"}
			h := newHarness(t, harnessOpts{
				model: script(t, llm.ScriptStep{Content: "done"}),
				store: func(lg *sqlite.Log) actors.EventStore { store.EventStore = lg; return store },
			})
			h.submit("s", "t-0", "go")
			h.wait("s")
			var stillOwned func(context.Context, string) error
			if c.fault == "read" {
				store.err = exc
			} else {
				stillOwned = func(context.Context, string) error { return exc }
			}
			restartHost(t, h, store, stillOwned)

			root := h.system.Root
			first := futureResult(root.RequestFuture(h.host, &actors.SubmitTask{Envelope: taskEnvelope(t, "s", "t-1")}, 60*time.Second))
			cancel := futureResult(root.RequestFuture(h.host, &actors.CancelTask{SessionID: "s"}, 60*time.Second))
			for what, r := range map[string]<-chan futureAnswer{"the task the session started for": first, "a queued cancellation": cancel} {
				a := <-r
				if a.err != nil {
					t.Fatalf("%s got no answer (%v); want ErrSessionFailed at once", what, a.err)
				}
				if err, ok := a.res.(error); !ok || !errors.Is(err, actors.ErrSessionFailed) {
					t.Errorf("%s was answered %v; want ErrSessionFailed", what, a.res)
				}
			}
		})
	}
}
