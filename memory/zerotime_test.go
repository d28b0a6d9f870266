package memory_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/tools"
)

// The zero time ("0001-01-01T00:00:00Z", .NET's DateTime.MinValue, Go's
// time.Time{}) is what clients send for a time they did not set: it was stored
// as now without a word, while the README says a timestamp of the year 1 is
// kept. It is refused, saying to leave the timestamp out; the year 1's later
// instants are kept as written.
func TestInputRefusesTheZeroTime(t *testing.T) {
	for _, ts := range []string{"0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000Z", "0001-01-01T01:00:00+01:00"} {
		_, err := memory.DecodeInput([]byte(`{"namespace":"user:alice","tier":"episodic","content":"x","timestamp":"` + ts + `"}`))
		if !errors.Is(err, memory.ErrInvalid) || !strings.Contains(err.Error(), "leave timestamp out") {
			t.Errorf("timestamp %s: %v, want ErrInvalid saying to leave timestamp out", ts, err)
		}
	}
	in, err := memory.DecodeInput([]byte(`{"namespace":"user:alice","tier":"episodic","content":"x","timestamp":"0001-01-01T00:00:01Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := in.Request("added").Timestamp; got.IsZero() || got.Year() != 1 {
		t.Errorf("timestamp of the year 1: %s, want it as written", got)
	}
}

// The memory tool's add refuses the zero time as POST /v1/memories does, with an
// error the model can act on, and writes nothing: it was stored as now.
func TestToolRefusesTheZeroTime(t *testing.T) {
	f := newWriteFixture(t, nil)
	box := memoryTool(t, f)
	for i, ts := range []string{"0001-01-01T00:00:00Z", " 0001-01-01T00:00:00.000Z", "0001-01-01T01:00:00+01:00"} {
		err := call(t, box, fmt.Sprintf("k-zero-%d", i), "add", `{"content": "x", "timestamp": "`+ts+`"}`, nil)
		if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), "leave timestamp out") {
			t.Errorf("timestamp %q: %v, want an invalid-arguments error saying to leave timestamp out", ts, err)
		}
	}
	if events, err := f.log.Read(wctx(t), memory.Stream("agent:planner"), 1); err != nil || len(events) != 0 {
		t.Fatalf("refused calls wrote %d events (%v)", len(events), err)
	}
	if err := call(t, box, "k-year-1", "add", `{"content": "y", "timestamp": "0001-01-01T00:00:01Z"}`, nil); err != nil {
		t.Fatalf("a timestamp of the year 1: %v", err)
	}
	if err := call(t, box, "k-no-ts", "add", `{"content": "z"}`, nil); err != nil {
		t.Fatalf("no timestamp: %v", err)
	}
}
