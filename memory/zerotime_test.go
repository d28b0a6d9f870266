package memory_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/memory"
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
