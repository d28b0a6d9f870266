package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// chasingLog appends one event to its session after each page read of it, as a
// node appending between an export's reads would: up to limit events.
type chasingLog struct {
	*sqlite.Log
	t               *testing.T
	session         string
	next            uint64
	appended, limit int
	reads           int
}

func (l *chasingLog) ReadN(ctx context.Context, id string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	events, err := l.Log.ReadN(ctx, id, from, n, maxBytes)
	if id == l.session {
		l.reads++
		if l.appended < l.limit {
			if err := l.Log.Append(ctx, []messages.Envelope{chaseEvent(l.t, id, l.next)}); err != nil {
				l.t.Fatal(err)
			}
			l.next++
			l.appended++
		}
	}
	return events, err
}

func chaseEvent(t *testing.T, session string, seq uint64) messages.Envelope {
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "x"})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("%s/%d", session, seq), session, seq, int64(1000+seq), "ingress"
	return e
}

// An export of a session a node appends to between every two reads ends: it
// exports the session as its first read found it (the events up to its first
// short page), consistent, and importable, instead of reading on as long as
// the node appends.
func TestExportDoesNotChaseAWriter(t *testing.T) {
	ctx := context.Background()
	sl, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	if err := sl.Append(ctx, []messages.Envelope{chaseEvent(t, "c", 1)}); err != nil {
		t.Fatal(err)
	}
	l := &chasingLog{Log: sl, t: t, session: "c", next: 2, limit: 500}
	var out, errb bytes.Buffer
	if code := export(ctx, l, "c", "", &out, &errb); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errb.String())
	}
	if l.reads > 4 {
		t.Errorf("export read the session %d times while a node appended to it (%d events appended): it chased the writer", l.reads, l.appended)
	}
	events, _, err := readExport(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatalf("the export does not read back: %v", err)
	}
	if len(events) != 1 || events[0].Seq != 1 {
		t.Errorf("exported %d events, want the one the first read found", len(events))
	}
}
