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

// The memory tool's time filters refuse the zero time as its add does, naming
// the argument: "before" read as not given made a forget with max_importance
// forget the matching memories of every age (where the year 1 meant none), and
// "until" read so kept memories of every time.
func TestToolFiltersRefuseTheZeroTime(t *testing.T) {
	f := newWriteFixture(t, nil)
	box := memoryTool(t, f)
	if err := call(t, box, "k-low", "add", `{"content": "a passing remark", "importance": 0.1}`, nil); err != nil {
		t.Fatal(err)
	}
	const zero = "0001-01-01T00:00:00Z"
	for _, c := range []struct{ op, field, args string }{
		{"search", "since", `{"query": "remark", "since": "` + zero + `"}`},
		{"search", "until", `{"query": "remark", "until": " ` + zero + `"}`},
		{"forget", "before", `{"before": "` + zero + `", "max_importance": 0.5, "reason": "old and minor"}`},
		{"recall", "since", `{"query": "remark", "since": "0001-01-01T01:00:00+01:00"}`},
		{"recall", "until", `{"query": "remark", "until": "` + zero + `"}`},
	} {
		err := call(t, box, "k-"+c.op+"-"+c.field, c.op, c.args, nil)
		var ae *tools.ArgumentError
		if !errors.As(err, &ae) || ae.Field != c.field || !strings.Contains(err.Error(), "zero time") {
			t.Errorf("%s with %s the zero time: %v, want an invalid-arguments error naming %q and the zero time", c.op, c.field, err, c.field)
		}
	}
	events, err := f.log.Read(wctx(t), memory.Stream("agent:planner"), 1)
	if err != nil || len(events) != 1 {
		t.Fatalf("the namespace holds %d events (%v), want the add alone: a refused forget wrote", len(events), err)
	}
	if err := call(t, box, "k-year-1", "search", `{"query": "remark", "since": "0001-01-01T00:00:01Z"}`, nil); err != nil {
		t.Fatalf("a since of the year 1: %v", err)
	}
}
