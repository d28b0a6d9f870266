package textclip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Middle keeps a text that fits, and of a longer one its head and tail, cut
// between characters, around the marker.
func TestMiddle(t *testing.T) {
	if got := Middle("short", 3, 2, ""); got != "short" {
		t.Fatalf("a text that fits: %q", got)
	}
	s := strings.Repeat("é", 100) + strings.Repeat("ü", 100) // 400 bytes
	got := Middle(s, 41, 20, " of this reply")
	want := strings.Repeat("é", 20) + "\n[… 340 bytes of this reply left out …]\n" + strings.Repeat("ü", 10)
	if !utf8.ValidString(got) || got != want {
		t.Fatalf("clipped: %q, want %q", got, want)
	}
}
