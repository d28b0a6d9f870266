package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// pagedLog is a log that reads pages: SQLite's, ClickHouse's.
type pagedLog interface {
	eventlog.Log
	eventlog.PageReader
}

// pageCountingLog is a log that fails its test when session is read whole
// (Read, or ReadN unbounded) and records the most events and payload bytes one
// read of it returned. atEnd, when set, runs once, at the first read of session
// that finds its end (fewer events than asked for, not cut by bytes).
type pageCountingLog struct {
	pagedLog
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
	return l.pagedLog.Read(ctx, id, from)
}

func (l *pageCountingLog) ReadN(ctx context.Context, id string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	events, err := l.pagedLog.ReadN(ctx, id, from, n, maxBytes)
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
// pagedSession is a session of several pages for export: thousands of events,
// some of them large, whose tasks name configurations, with the configurations
// its export holds first.
type pagedSession struct {
	id      string
	events  []messages.Envelope
	configs []messages.Envelope // the first two are the export's
	want    []byte              // the export of the session
	// late is the session's next event, a task naming the third configuration.
	late messages.Envelope
}

func newPagedSession(t *testing.T) pagedSession {
	t.Helper()
	const session, n = "paged", 2600
	// Each configuration under its own digest (import checks it); digestLost
	// names one no stream holds.
	cfgA, cfgB, cfgLate := messages.AgentConfig{SystemPrompt: "You are A."}, messages.AgentConfig{SystemPrompt: "You are B."}, messages.AgentConfig{SystemPrompt: "You are late."}
	digestA, digestB, digestLost, digestLate := actors.ConfigDigest(&cfgA), actors.ConfigDigest(&cfgB), strings.Repeat("ef", 32), actors.ConfigDigest(&cfgLate)
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
	named := []struct {
		digest string
		config messages.AgentConfig
	}{{digestA, cfgA}, {digestB, cfgB}}
	if digestB < digestA { // digest order
		named[0], named[1] = named[1], named[0]
	}
	var configs []messages.Envelope
	for _, n := range named {
		c, err := messages.ConfigRecordedEvent(n.digest, n.config, 5)
		if err != nil {
			t.Fatal(err)
		}
		configs = append(configs, c)
	}
	late, err := messages.ConfigRecordedEvent(digestLate, cfgLate, 5)
	if err != nil {
		t.Fatal(err)
	}
	configs = append(configs, late)
	var want bytes.Buffer
	if err := writeExport(&want, events, configs[:2]...); err != nil {
		t.Fatal(err)
	}
	return pagedSession{id: session, events: events, configs: configs, want: want.Bytes(),
		late: event(n+1, &messages.TaskSubmitted{Input: "late", Rules: 7, ConfigDigest: digestLate})}
}

// store appends the session's events and the configurations to l.
func (s pagedSession) store(t *testing.T, ctx context.Context, l eventlog.Log) {
	t.Helper()
	for i := 0; i < len(s.events); i += 500 {
		if err := l.Append(ctx, s.events[i:min(i+500, len(s.events))]); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range s.configs {
		if err := l.Append(ctx, []messages.Envelope{c}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkExportPages exports the session from l through a pageCountingLog, to
// stdout and to a file (where a task is appended once the export found the
// session's end), and fails t unless each export is the session's, read in
// pages.
func (s pagedSession) checkExportPages(t *testing.T, ctx context.Context, l pagedLog) {
	t.Helper()
	for _, out := range []string{"", filepath.Join(t.TempDir(), "paged.jsonl")} {
		log := &pageCountingLog{pagedLog: l, t: t, session: s.id}
		if out != "" {
			// A task a node appends once the export has counted the session's
			// events, naming a configuration of its own.
			log.atEnd = func() {
				if err := l.Append(ctx, []messages.Envelope{s.late}); err != nil {
					t.Error(err)
				}
			}
		}
		var stdout, stderr bytes.Buffer
		if code := export(ctx, log, s.id, out, &stdout, &stderr); code != 0 {
			t.Fatalf("export to %q: %d %s", out, code, stderr.String())
		}
		got := stdout.Bytes()
		if out != "" {
			var err error
			if got, err = os.ReadFile(out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(stderr.String(), fmt.Sprintf("exported %d events of session %s", len(s.events), s.id)) {
				t.Errorf("export to %s said %q", out, stderr.String())
			}
		}
		if log.atEnd != nil && !log.atEndStarted {
			t.Errorf("export to %q never read to the session's end", out)
		}
		if !bytes.Equal(got, s.want) {
			t.Errorf("export to %q: %d bytes differ from the %d of the session's export at once", out, len(got), len(s.want))
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

func TestExportReadsTheSessionAPageAtATime(t *testing.T) {
	ctx := context.Background()
	s := newPagedSession(t)
	sl, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	s.store(t, ctx, sl)

	// A log that reads no pages is read whole, once.
	whole := &wholeReadsLog{Log: sl, session: s.id}
	var stdout, stderr bytes.Buffer
	if code := export(ctx, whole, s.id, "", &stdout, &stderr); code != 0 || !bytes.Equal(stdout.Bytes(), s.want) || whole.reads != 1 {
		t.Errorf("export from a log that reads no pages: %d, %d bytes, of %d, in %d reads of the session; want one %s", code, stdout.Len(), len(s.want), whole.reads, stderr.String())
	}
	s.checkExportPages(t, ctx, sl)
}

// The same export from the ClickHouse log (which a node writes to in a
// cluster) reads the session a page at a time too: it is never read whole
// (each page reads about itself from ClickHouse, see eventlog/clickhouse's
// TestReadNReadsAWindowNotTheSession). Needs TROUPE_TEST_CLICKHOUSE.
func TestExportFromClickHouseReadsPages(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: no ClickHouse server to test against")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db := chtest.Database(t, addr, "troupe_export_pages_")
	cl, err := clickhouse.Open(ctx, clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s := newPagedSession(t)
	s.store(t, ctx, cl)
	var log eventlog.Log = cl
	pl, ok := log.(pagedLog)
	if !ok {
		t.Fatal("the ClickHouse log reads no pages (eventlog.PageReader): export reads its sessions whole")
	}
	s.checkExportPages(t, ctx, pl)
}
