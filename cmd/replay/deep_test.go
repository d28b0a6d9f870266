package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// A session whose causation chain is thousands deep (an imported file's events, each
// caused by the one before) is printed with a bounded indent: each line's length does
// not grow with its depth, so show's output grows with the events, not their square.
func TestShowOfADeepChainHasABoundedIndent(t *testing.T) {
	var events []messages.Envelope
	const n = 3000
	for seq := uint64(1); seq <= n; seq++ {
		var p messages.Payload = &messages.ModelRequested{Key: fmt.Sprintf("deep/%d", seq), Model: "m", Step: int(seq), Messages: 2}
		if seq == 1 {
			p = &messages.TaskSubmitted{Input: "loop"}
		}
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("deep/%d", seq), "deep", seq, int64(seq), "session"
		if seq > 1 {
			e.CausationID = fmt.Sprintf("deep/%d", seq-1)
		}
		events = append(events, e)
	}
	tl, err := BuildTimeline(events)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tl.Render(&out)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != n+1 {
		t.Fatalf("%d lines for %d events", len(lines), n)
	}
	for _, l := range lines {
		if len(l) > 200 {
			t.Fatalf("show of a chain %d deep printed a line of %d bytes (%d bytes in all): %.120q…", n, len(l), out.Len(), l)
		}
	}
	if !strings.Contains(lines[n], fmt.Sprintf("%5d ", n)) {
		t.Fatalf("the last line is not the last event's: %q", lines[n])
	}
}
