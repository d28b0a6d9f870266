package consolidator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// A memory of a time more than 292 years ago (an imported historical event: its
// timestamp may be any from the year 1) is older than a time.Duration holds: the
// reason of its forgetting said the age the subtraction saturated at, "106752d",
// whatever the memory's time. It says the memory's age.
func TestForgetReasonSaysTheAgeOfAVeryOldMemory(t *testing.T) {
	m := mem("ancient", memory.Episodic, 0.1, 0)
	m.Timestamp = time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)
	m.Created = m.Timestamp
	ds := consolidator.Plan(now, []memory.Memory{m}, consolidator.Policy{})
	if len(ds) != 1 || ds[0].Kind != consolidator.Forget {
		t.Fatalf("plan: %v", ds)
	}
	if want := "age 119220d > 30d"; !strings.Contains(ds[0].Reason, want) {
		t.Errorf("reason %q; want it to say %q", ds[0].Reason, want)
	}
}
