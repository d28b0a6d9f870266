package tools

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// The list of known names in "unknown name" errors matches the tables.
func TestKnownNamesMatchTables(t *testing.T) {
	want := slices.Sorted(maps.Keys(functions))
	want = append([]string{"pi", "e"}, want...)
	if got := strings.Join(want, ", "); got != knownNames {
		t.Errorf("knownNames = %q, tables say %q", knownNames, got)
	}
	for name := range constants {
		if _, clash := functions[name]; clash {
			t.Errorf("%s is both a constant and a function", name)
		}
	}
}
