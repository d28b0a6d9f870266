package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// appendCountingLog is a pageCountingLog that records the most events one
// append of session wrote.
type appendCountingLog struct {
	*pageCountingLog
	appendSession string
	mostAppended  int
}

func (l *appendCountingLog) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 0 && events[0].SessionID == l.appendSession {
		l.mostAppended = max(l.mostAppended, len(events))
	}
	return l.pageCountingLog.Append(ctx, events)
}

// recordLongSession records, in an embedded log in a new directory, a session
// of tasks whose events fill more than a page of the replay commands'
// (exportPageMax), and returns the directory, the session's ID and its events.
func recordLongSession(t *testing.T) (dir, id string, events []messages.Envelope) {
	t.Helper()
	dir, id = t.TempDir(), "long"
	var tasks []node.Task
	for i := range 130 { // 8 events each
		tasks = append(tasks, node.Task{Input: fmt.Sprintf("What is %d * (7 + 5)?", i), SessionID: id})
	}
	recordTasks(t, node.Config{DataDir: dir}, nil, tasks...)
	events = readWhole(t, dir, id)
	if len(events) <= exportPageMax {
		t.Fatalf("the session has %d events, not more than a page (%d)", len(events), exportPageMax)
	}
	return dir, id, events
}

// readWhole reads session id of the embedded log in dir whole.
func readWhole(t *testing.T, dir, id string) []messages.Envelope {
	t.Helper()
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	events, err := l.Read(context.Background(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// openCounting opens the embedded log in dir for writing, its session id's reads
// checked to be pages (pageCountingLog: a whole read fails t) and its appends
// of session appended counted.
func openCounting(t *testing.T, dir, id, appended string) *appendCountingLog {
	t.Helper()
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return &appendCountingLog{pageCountingLog: &pageCountingLog{pagedLog: l, t: t, session: id}, appendSession: appended}
}

// pageBound is the bound of one append (appendBound) of a page: a session
// longer than it is written a batch at a time.
func pageBound() appendBound { return appendBound{events: exportPageMax, bytes: exportPageBytes} }

// TestReplayReadsALongSessionInPages: verify, show and fork of a session of more
// than a page of events read it a page at a time (never whole, no read of more
// than a page), and import writes an export of it a batch at a time (no append
// of more than a page) when it is past the bound of one append, each with the
// result it had with the session held whole.
func TestReplayReadsALongSessionInPages(t *testing.T) {
	ctx := context.Background()
	dir, id, events := recordLongSession(t)

	t.Run("verify", func(t *testing.T) {
		log := openCounting(t, dir, id, "")
		ac, err := loadAgent(ctx, "", "", "", io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		defer ac.stop()
		var out, errb bytes.Buffer
		if code := verify(ctx, log, id, ac, false, false, &out, &errb); code != 0 {
			t.Fatalf("verify: %d\n%s\n%s", code, out.String(), errb.String())
		}
		if want := fmt.Sprintf("deterministic (%d events re-decided", len(events)); !strings.Contains(out.String(), want) {
			t.Fatalf("verify said %q, want %q", out.String(), want)
		}
		if log.mostEvents > exportPageMax || log.reads < 2 {
			t.Fatalf("verify read %d events at most in one of %d reads, want pages of at most %d", log.mostEvents, log.reads, exportPageMax)
		}
	})

	t.Run("show", func(t *testing.T) {
		log := openCounting(t, dir, id, "")
		var out, errb bytes.Buffer
		if code := show(ctx, log, id, true, &out, &errb); code != 0 {
			t.Fatalf("show: %d %s", code, errb.String())
		}
		whole, err := BuildTimeline(events)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.MarshalIndent(whole, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.TrimSpace(out.Bytes()); !bytes.Equal(got, want) {
			t.Fatalf("show of the session in pages (%d bytes) is not its timeline held whole (%d bytes)", len(got), len(want))
		}
		if log.mostEvents > exportPageMax || log.reads < 2 {
			t.Fatalf("show read %d events at most in one of %d reads, want pages of at most %d", log.mostEvents, log.reads, exportPageMax)
		}
	})

	t.Run("fork", func(t *testing.T) {
		// Into the second page, in the middle of a task: the fork continues it.
		const at, ts = 1010, int64(1 << 50)
		want, err := forkEvents(events, at, "long-fork", ts)
		if err != nil {
			t.Fatal(err)
		}
		log := openCounting(t, dir, id, "long-fork")
		made, err := makeFork(ctx, log, id, "long-fork", at, ts, "", pageBound())
		if err != nil {
			t.Fatal(err)
		}
		if made.state.Active() == "" || made.unfinished != 1 {
			t.Fatalf("the fork at %d has task %q running and %d unfinished, want one", at, made.state.Active(), made.unfinished)
		}
		got, err := log.pagedLog.Read(ctx, "long-fork", 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("the fork holds %d events, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i].ID != want[i].ID || got[i].CausationID != want[i].CausationID || !bytes.Equal(got[i].Payload, want[i].Payload) {
				t.Fatalf("the fork's event at seq %d is not the one of the fork made of the session held whole", got[i].Seq)
			}
		}
		if log.mostEvents > exportPageMax || log.mostAppended > exportPageMax+1 {
			t.Fatalf("fork read %d events and appended %d at most at once, want at most a page (%d)", log.mostEvents, log.mostAppended, exportPageMax)
		}
	})

	t.Run("import", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "long.jsonl")
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
		src := func() (io.ReadCloser, error) { return os.Open(file) }
		plan, err := planImport(ctx, src, unfinishedRefuse, 0)
		if err != nil {
			t.Fatal(err)
		}
		into := t.TempDir()
		log := openCounting(t, into, "none", id)
		if err := plan.write(ctx, log, src, pageBound()); err != nil {
			t.Fatal(err)
		}
		if log.mostAppended > importBatchMax || log.mostAppended == 0 {
			t.Fatalf("import appended %d events at most at once, want batches of at most %d", log.mostAppended, importBatchMax)
		}
		got, err := log.pagedLog.Read(ctx, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(events) {
			t.Fatalf("imported %d events of %d", len(got), len(events))
		}
		for i := range events {
			if got[i].ID != events[i].ID || !bytes.Equal(got[i].Payload, events[i].Payload) {
				t.Fatalf("imported event at seq %d differs", got[i].Seq)
			}
		}
	})
}

// TestImportOfALongFileWritesNothingOfABadOne: an export of more than a batch
// of events whose last event is bad is refused whole, from stdin too: nothing
// of the batches before it is written.
func TestImportOfALongFileWritesNothingOfABadOne(t *testing.T) {
	ctx := context.Background()
	_, id, events := recordLongSession(t)
	var b bytes.Buffer
	if err := writeExport(&b, events); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b.Bytes(), []byte("\n")), []byte("\n"))
	lines[len(lines)-1] = []byte(`{"not": "an event"}`)
	bad := append(bytes.Join(lines, []byte("\n")), '\n')
	for _, stdin := range []bool{false, true} {
		into := t.TempDir()
		file, in := filepath.Join(t.TempDir(), "bad.jsonl"), io.Reader(nil)
		if err := os.WriteFile(file, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if stdin {
			file, in = "-", bytes.NewReader(bad)
		}
		var out, errb bytes.Buffer
		if code := importFile(ctx, store{data: into}, file, unfinishedRefuse, in, &out, &errb); code != 1 || !strings.Contains(errb.String(), "bad session export") {
			t.Fatalf("import of a bad file (stdin %v): %d %s %s", stdin, code, out.String(), errb.String())
		}
		if _, err := os.Stat(filepath.Join(into, "events.db")); err == nil {
			if got := readWhole(t, into, id); len(got) > 0 {
				t.Fatalf("import of a bad file (stdin %v) wrote %d events", stdin, len(got))
			}
		}
		// The file whole is imported, from stdin too.
		if stdin {
			var out, errb bytes.Buffer
			if code := importFile(ctx, store{data: into}, "-", unfinishedRefuse, bytes.NewReader(b.Bytes()), &out, &errb); code != 0 {
				t.Fatalf("import from stdin: %d %s", code, errb.String())
			}
			if got := readWhole(t, into, id); len(got) != len(events) {
				t.Fatalf("import from stdin wrote %d events of %d", len(got), len(events))
			}
		}
	}
}
