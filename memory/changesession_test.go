package memory_test

import (
	"testing"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// A change's session is the one whose event its key names: a memory tool
// call's, or a key made from one; no session made an HTTP request's change,
// a client's keyed request, or a consolidation run's.
func TestChangeSession(t *testing.T) {
	for key, want := range map[string]string{
		"s-mem/6":                          "s-mem",
		"s-mem/16/forget-7b67":             "s-mem",
		"lead-1.sub4/9/task-1/0":           "lead-1.sub4",
		"http/k1/user:alice":               "",
		memory.RequestKey("s-mem/6", "d1"): "",
		"cli/0543/distill-e127":            "",
		"s-mem/06":                         "",
		"s-mem":                            "",
		"":                                 "",
	} {
		got, ok := memory.ChangeSession(&messages.MemoryAdded{Key: key})
		if got != want || ok != (want != "") {
			t.Errorf("key %q: %q %v, want %q", key, got, ok, want)
		}
	}
	if got, ok := memory.ChangeSession(&messages.MemoryCleared{Key: "s/3"}); got != "s" || !ok {
		t.Errorf("a clear under s/3: %q %v", got, ok)
	}
}
