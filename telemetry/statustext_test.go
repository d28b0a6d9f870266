package telemetry_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/telemetry"
)

// A status message past MaxStatusText is cut at a character's start and marked;
// one within it is kept whole.
func TestStatusTextIsBounded(t *testing.T) {
	if got := telemetry.StatusText("tool failed"); got != "tool failed" {
		t.Errorf("a short message became %q", got)
	}
	long := strings.Repeat("é", telemetry.MaxStatusText) // two bytes each
	got := telemetry.StatusText(long)
	if len(got) > telemetry.MaxStatusText || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("a message of %d bytes became one of %d bytes (valid UTF-8 %v), ending %q", len(long), len(got), utf8.ValidString(got), got[max(0, len(got)-8):])
	}
}
