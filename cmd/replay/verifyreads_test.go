package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// readingsLog counts the readings of session: the page reads from its first
// seq, each of which begins a reading of the session.
type readingsLog struct {
	pagedLog
	session  string
	readings int
}

func (l *readingsLog) ReadN(ctx context.Context, id string, from uint64, n, maxBytes int) ([]messages.Envelope, error) {
	if id == l.session && from == 1 {
		l.readings++
	}
	return l.pagedLog.ReadN(ctx, id, from, n, maxBytes)
}

// verifyReadings verifies session id of the embedded log in dir and returns how
// many times it read the session.
func verifyReadings(tb testing.TB, dir, id string) int {
	tb.Helper()
	ctx := context.Background()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	log := &readingsLog{pagedLog: l, session: id}
	ac, err := loadAgent(ctx, "", "", "", io.Discard)
	if err != nil {
		tb.Fatal(err)
	}
	defer ac.stop()
	var out, errb bytes.Buffer
	if code := verify(ctx, log, id, ac, false, false, &out, &errb); code != 0 || !strings.Contains(out.String(), "deterministic") {
		tb.Fatalf("verify: %d\n%s\n%s", code, out.String(), errb.String())
	}
	return log.readings
}

// verify read a session four times (its count and fork point, its models and
// tools, its seqs and rules, its fold) where three serve: the check of its seqs
// and rules reads the pages the models and tools are read from.
func TestVerifyReadsASessionThrice(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "What is 12 * (7 + 5)?")
	if n := verifyReadings(t, dir, id); n != 3 {
		t.Fatalf("verify read the session %d times, want 3 (its count and fork point; its models, tools, seqs and rules; its fold)", n)
	}
}

// BenchmarkVerify verifies a session of 130 tasks (over a thousand events, more
// than a page) read from an embedded log.
func BenchmarkVerify(b *testing.B) {
	dir, id := b.TempDir(), "long"
	var tasks []node.Task
	for i := range 130 {
		tasks = append(tasks, node.Task{Input: fmt.Sprintf("What is %d * (7 + 5)?", i), SessionID: id})
	}
	recordTasks(b, node.Config{DataDir: dir}, nil, tasks...)
	b.ResetTimer()
	readings := 0
	for b.Loop() {
		readings += verifyReadings(b, dir, id)
	}
	b.ReportMetric(float64(readings)/float64(b.N), "readings/op")
}
