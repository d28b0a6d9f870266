package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// errDiskFull is the error of failingLog's appends.
var errDiskFull = errors.New("disk full")

// failingLog is a log whose appends of session fail from the failFrom-th on (a
// full disk, a log gone down), writing nothing; it counts those appends and the
// events each held.
type failingLog struct {
	pagedLog
	session  string
	failFrom int   // 0: none fails
	appends  []int // the events of each append of session tried
}

func (l *failingLog) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 0 && events[0].SessionID == l.session {
		l.appends = append(l.appends, len(events))
		if l.failFrom > 0 && len(l.appends) >= l.failFrom {
			return errDiskFull
		}
	}
	return l.pagedLog.Append(ctx, events)
}

// openFailing opens the embedded log in dir, its appends of session failing
// from the failFrom-th on.
func openFailing(t *testing.T, dir, session string, failFrom int) *failingLog {
	t.Helper()
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return &failingLog{pagedLog: l, session: session, failFrom: failFrom}
}

// writeExportFile writes an export of events to a new file, and returns its
// name and what opens it.
func writeExportFile(t *testing.T, events []messages.Envelope) (string, func() (io.ReadCloser, error)) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "session.jsonl")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeExport(f, events); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return file, func() (io.ReadCloser, error) { return os.Open(file) }
}

// sameEvents fails t unless got are want (IDs, seqs and payloads).
func sameEvents(t *testing.T, what string, got, want []messages.Envelope) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Seq != want[i].Seq || string(got[i].Payload) != string(want[i].Payload) {
			t.Fatalf("%s: the event at seq %d is not the one wanted", what, want[i].Seq)
		}
	}
}

// TestImportAndForkWriteASessionInOneAppend: a session within the bound of one
// append (here of 1,040 events, more than a page) is imported, and forked, in
// one append: an append that fails leaves nothing of it in the log, where a
// write in batches left the batches before it, a session a node resumed.
func TestImportAndForkWriteASessionInOneAppend(t *testing.T) {
	ctx := context.Background()
	dir, id, events := recordLongSession(t)
	_, src := writeExportFile(t, events)

	t.Run("import", func(t *testing.T) {
		plan, err := planImport(ctx, src, unfinishedRefuse, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, failFrom := range []int{0, 1, 2} {
			log := openFailing(t, t.TempDir(), id, failFrom)
			err := plan.write(ctx, log, src, oneAppend())
			got, rerr := log.pagedLog.Read(ctx, id, 1)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if len(log.appends) != 1 || log.appends[0] != len(events) {
				t.Fatalf("import (appends failing from the %dth) appended the session in %v events, want one append of %d", failFrom, log.appends, len(events))
			}
			switch {
			case failFrom == 1 && (!errors.Is(err, errDiskFull) || len(got) != 0):
				t.Fatalf("import whose append failed: %v, and %d events in the log, want none", err, len(got))
			case failFrom != 1 && err != nil:
				t.Fatal(err)
			case failFrom != 1:
				sameEvents(t, "the session imported", got, events)
			}
		}
	})

	t.Run("fork", func(t *testing.T) {
		const at, ts = 1010, int64(1 << 50)
		want, err := forkEvents(events, at, "long-fork", ts)
		if err != nil {
			t.Fatal(err)
		}
		for _, failFrom := range []int{1, 0} {
			log := openFailing(t, dir, "long-fork", failFrom)
			_, err := makeFork(ctx, log, id, "long-fork", at, ts, "", oneAppend())
			got, rerr := log.pagedLog.Read(ctx, "long-fork", 1)
			if cerr := log.pagedLog.Close(); rerr == nil {
				rerr = cerr
			}
			if rerr != nil {
				t.Fatal(rerr)
			}
			if len(log.appends) != 1 || log.appends[0] != at+1 {
				t.Fatalf("fork (appends failing from the %dth) appended %v events, want one append of %d", failFrom, log.appends, at+1)
			}
			if failFrom == 1 {
				if !errors.Is(err, errDiskFull) || len(got) != 0 {
					t.Fatalf("fork whose append failed: %v, and %d events in the log, want none", err, len(got))
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			sameEvents(t, "the fork", got, want)
		}
	})
}

// checkInert checks that the log holds events of session id, but not its first:
// a session actor's fold of them, from seq 1, fails at once, so no node resumes
// it nor performs anything of it.
func checkInert(t *testing.T, l pagedLog, id string) {
	t.Helper()
	got, err := l.Read(context.Background(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatalf("session %s: nothing appended before the append that failed", id)
	}
	if got[0].Seq == 1 {
		t.Fatalf("session %s: the log holds %d events of it from seq 1, a session a node folds and resumes", id, len(got))
	}
	if err := actors.NewSessionState(id).Apply(got[0]); err == nil {
		t.Fatalf("session %s: its events, without the first, fold", id)
	}
}

// sessionInfo is the listing of session id in l.
func sessionInfo(t *testing.T, l pagedLog, id string) eventlog.SessionInfo {
	t.Helper()
	infos, err := l.Sessions(context.Background(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if i.ID == id {
			return i
		}
	}
	t.Fatalf("session %s is not listed", id)
	return eventlog.SessionInfo{}
}

// TestImportAndForkLeftPartWayAreInert: a session past the bound of one append
// (a page here) is written a batch at a time, its first event last: an append
// that fails part way leaves it without its seq 1, which no node folds nor
// resumes (where the batches before it were a session running a task, which a
// node serving the log resumed, calling its model again); and the same import
// again completes it.
func TestImportAndForkLeftPartWayAreInert(t *testing.T) {
	ctx := context.Background()
	dir, id, events := recordLongSession(t)
	_, src := writeExportFile(t, events)

	t.Run("import", func(t *testing.T) {
		plan, err := planImport(ctx, src, unfinishedRefuse, 0)
		if err != nil {
			t.Fatal(err)
		}
		into := t.TempDir()
		log := openFailing(t, into, id, 2)
		err = plan.write(ctx, log, src, pageBound())
		if !errors.Is(err, errDiskFull) || !strings.Contains(err.Error(), "but not its first") || !strings.Contains(err.Error(), "import the file again") {
			t.Fatalf("import whose second append failed: %v", err)
		}
		checkInert(t, log.pagedLog, id)
		// Imported again, it is completed.
		log.failFrom = 0
		if err := plan.write(ctx, log, src, pageBound()); err != nil {
			t.Fatal(err)
		}
		got, err := log.pagedLog.Read(ctx, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		sameEvents(t, "the session imported again", got, events)
		// The log's summary of it is that of the session written in one append.
		whole := openFailing(t, t.TempDir(), id, 0)
		if err := plan.write(ctx, whole, src, oneAppend()); err != nil {
			t.Fatal(err)
		}
		if got, want := sessionInfo(t, log.pagedLog, id), sessionInfo(t, whole.pagedLog, id); got != want {
			t.Fatalf("the session imported in batches, its first event last, is listed as %+v, want %+v", got, want)
		}
		// Whole, it is not imported a third time.
		if err := plan.write(ctx, log, src, pageBound()); err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("import of a session the log holds: %v", err)
		}
	})

	t.Run("fork", func(t *testing.T) {
		const at, ts = 1010, int64(1 << 50)
		log := openFailing(t, dir, "long-fork", 2)
		_, err := makeFork(ctx, log, id, "long-fork", at, ts, "", pageBound())
		if !errors.Is(err, errDiskFull) || !strings.Contains(err.Error(), "but not its first") {
			t.Fatalf("fork whose second append failed: %v", err)
		}
		checkInert(t, log.pagedLog, "long-fork")
	})
}
