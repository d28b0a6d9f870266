package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// pageCountingLog is a SQLite log that fails its test when session is read
// whole (Read, or ReadN unbounded) and records the most events and payload
// bytes one read of it returned. atEnd, when set, runs once, at the first read
// of session that finds its end (fewer events than asked for, not cut by bytes).
type pageCountingLog struct {
	*sqlite.Log
	t            *testing.T
	session      string
	reads        int
	mostEvents   int
	mostBytes    int
	atEnd        func()
	atEndStarted bool
}

func (l *pageCountingLog) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	if id == l.session {
		l.t.Errorf("session %s read whole, from seq %d", id, from)
	}
	return l.Log.Read(ctx, id, from)
}

func (l *pageCountingLog) ReadN(ctx context.Context, id string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	events, err := l.Log.ReadN(ctx, id, from, n, maxBytes)
	if id != l.session {
		return events, err
	}
	if n <= 0 || n > exportPageMax || maxBytes <= 0 || maxBytes > exportPageBytes {
		l.t.Errorf("session %s read from seq %d by a page of %d events and %d bytes", id, from, n, maxBytes)
	}
	l.reads++
	l.mostEvents = max(l.mostEvents, len(events))
	size := 0
	for _, e := range events {
		size += len(e.Payload)
	}
	l.mostBytes = max(l.mostBytes, size)
	if len(events) < n && size < maxBytes && l.atEnd != nil && !l.atEndStarted {
		l.atEndStarted = true
		l.atEnd()
	}
	return events, err
}

// wholeReadsLog is a log that reads no pages (no eventlog.PageReader) and counts
// the reads of session.
type wholeReadsLog struct {
	eventlog.Log
	session string
	reads   int
}

func (l *wholeReadsLog) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	if id == l.session {
		l.reads++
	}
	return l.Log.Read(ctx, id, from)
}

// A session of several pages (thousands of events, some of them large) is
// exported a page at a time, never read whole, and its export is byte for byte
// what writeExport makes of all of its events at once, with the configurations
// its tasks name on its first and its last pages (a log that reads no pages is
// read whole once, as before, for the same bytes). An event a node appends while
// the export runs is not in it: the header counts what the export holds.
func TestExportReadsTheSessionAPageAtATime(t *testing.T) {
	ctx := context.Background()
	const session, n = "paged", 2600
	digestA, digestB, digestLost, digestLate := strings.Repeat("cd", 32), strings.Repeat("ab", 32), strings.Repeat("ef", 32), strings.Repeat("12", 32)
	event := func(seq uint64, p *messages.TaskSubmitted) messages.Envelope {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("%s/%d", session, seq), session, seq, int64(1000+seq), "ingress"
		if seq > 1 {
			e.CausationID, e.CorrelationID = session+"/1", session+"/1"
		}
		return e
	}
	var events []messages.Envelope
	for seq := uint64(1); seq <= n; seq++ {
		p := &messages.TaskSubmitted{Input: fmt.Sprintf("event %d", seq)}
		switch {
		case seq == 1:
			p.Rules, p.ConfigDigest = 7, digestA
		case seq >= 1500 && seq < 1510:
			p.Input = strings.Repeat(fmt.Sprint(seq%10), 300<<10) // pages cut by their bytes
		case seq == 2550:
			p.Rules, p.ConfigDigest = 7, digestB
		case seq == 2560:
			p.Rules, p.ConfigDigest = 7, digestLost // no stream holds it: left out
		}
		events = append(events, event(seq, p))
	}
	var configs []messages.Envelope
	for _, d := range []string{digestB, digestA, digestLate} { // digest order
		c, err := messages.ConfigRecordedEvent(d, messages.AgentConfig{SystemPrompt: "You are " + d[:2] + "."}, 5)
		if err != nil {
			t.Fatal(err)
		}
		configs = append(configs, c)
	}
	var want bytes.Buffer
	if err := writeExport(&want, events, configs[:2]...); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	sl, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	for i := 0; i < len(events); i += 500 {
		if err := sl.Append(ctx, events[i:min(i+500, len(events))]); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range configs {
		if err := sl.Append(ctx, []messages.Envelope{c}); err != nil {
			t.Fatal(err)
		}
	}

	// A log that reads no pages (ClickHouse's) is read whole, once.
	whole := &wholeReadsLog{Log: sl, session: session}
	var stdout, stderr bytes.Buffer
	if code := export(ctx, whole, session, "", &stdout, &stderr); code != 0 || !bytes.Equal(stdout.Bytes(), want.Bytes()) || whole.reads != 1 {
		t.Errorf("export from a log that reads no pages: %d, %d bytes, of %d, in %d reads of the session; want one %s", code, stdout.Len(), want.Len(), whole.reads, stderr.String())
	}

	for _, out := range []string{"", filepath.Join(t.TempDir(), "paged.jsonl")} {
		log := &pageCountingLog{Log: sl, t: t, session: session}
		if out != "" {
			// A task a node appends once the export has counted the session's
			// events, naming a configuration of its own.
			log.atEnd = func() {
				if err := sl.Append(ctx, []messages.Envelope{event(n+1, &messages.TaskSubmitted{Input: "late", Rules: 7, ConfigDigest: digestLate})}); err != nil {
					t.Error(err)
				}
			}
		}
		var stdout, stderr bytes.Buffer
		if code := export(ctx, log, session, out, &stdout, &stderr); code != 0 {
			t.Fatalf("export to %q: %d %s", out, code, stderr.String())
		}
		got := stdout.Bytes()
		if out != "" {
			if got, err = os.ReadFile(out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(stderr.String(), fmt.Sprintf("exported %d events of session %s", n, session)) {
				t.Errorf("export to %s said %q", out, stderr.String())
			}
		}
		if log.atEnd != nil && !log.atEndStarted {
			t.Errorf("export to %q never read to the session's end", out)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("export to %q: %d bytes differ from the %d of the session's export at once", out, len(got), want.Len())
		}
		if _, cs, err := readExport(bytes.NewReader(got)); err != nil || len(cs) != 2 {
			t.Errorf("export to %q read back with %d configurations: %v", out, len(cs), err)
		}
		if log.reads < 3 || log.mostEvents > exportPageMax || log.mostBytes > exportPageBytes+(300<<10)+(64<<10) {
			t.Errorf("export to %q: %d reads of the session, the largest %d events and %d bytes of payload; want pages of at most %d events and about %d bytes",
				out, log.reads, log.mostEvents, log.mostBytes, exportPageMax, exportPageBytes)
		}
	}
}
