package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// A stream pruned and then stored again starts anew, summary included: its
// started_us is the smallest stamp of its new events, also when an event stamped
// earlier than the first one stored again comes after it (the writer's cache of
// the sessions' starts, which skips the statement that lowers a row's start, must
// not remember the start of the stream that was pruned); its events, steps and
// last seq are the new events'. Alike after PruneListed and PruneStreams, by the
// writer or by another one sharing the log.
func TestStreamStoredAgainAfterPruneStartsAnew(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	l, err := Open(ctx, Config{Dir: dir, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// other is another writer of the same log, as another process's.
	other, err := Open(ctx, Config{Dir: dir, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	event := func(id string, seq uint64, ts int64) messages.Envelope {
		t.Helper()
		e, err := messages.NewEnvelope(&messages.MCPSubscribed{URI: fmt.Sprintf("notes://%d", seq)})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS = fmt.Sprintf("%s-%d-%d", id, seq, ts), id, seq, ts
		return e
	}
	appendAll := func(events ...messages.Envelope) {
		t.Helper()
		for _, e := range events { // one transaction each
			if err := l.Append(ctx, []messages.Envelope{e}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const s = int64(time.Second / time.Microsecond)
	for _, c := range []struct {
		name  string
		prune func(id string) (int, error)
	}{
		{"PruneListed", func(id string) (int, error) {
			return l.PruneListed(ctx, []eventlog.StreamBound{{ID: id, BeforeUS: 100 * s}})
		}},
		{"PruneStreams", func(id string) (int, error) {
			return l.PruneStreams(ctx, id, 100*s, 10)
		}},
		{"PruneListedByAnother", func(id string) (int, error) {
			return other.PruneListed(ctx, []eventlog.StreamBound{{ID: id, BeforeUS: 100 * s}})
		}},
	} {
		id := eventlog.A2APushStreamPrefix + c.name
		appendAll(event(id, 1, 1*s), event(id, 2, 2*s))
		if n, err := c.prune(id); err != nil || n != 1 {
			t.Fatalf("%s: %d, %v; want the stream pruned", c.name, n, err)
		}
		// Stored again: its first event at 50 s, then one stamped earlier, at 30 s.
		appendAll(event(id, 1, 50*s), event(id, 2, 30*s))
		infos, err := l.Sessions(ctx, eventlog.Filter{Prefix: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 1 {
			t.Fatalf("%s: Sessions = %+v; want the stream stored again", c.name, infos)
		}
		got := infos[0]
		if got.StartedUS != 30*s || got.UpdatedUS != 50*s || got.Events != 2 || got.LastSeq != 2 || got.Steps != 0 {
			t.Errorf("%s: the summary of the stream stored again: started %d µs, updated %d µs, %d events, last seq %d, %d steps; "+
				"want started 30 s, updated 50 s, 2 events, last seq 2, no steps", c.name, got.StartedUS, got.UpdatedUS, got.Events, got.LastSeq, got.Steps)
		}
	}
}
