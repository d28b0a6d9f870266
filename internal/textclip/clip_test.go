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

// Head keeps a text that fits, and of a longer one at most n bytes, cut between
// characters, marked with "…".
func TestHead(t *testing.T) {
	if got := Head("short", 5); got != "short" {
		t.Fatalf("a text that fits: %q", got)
	}
	if got := Head("ab"+strings.Repeat("é", 3), 5); got != "abé…" {
		t.Fatalf("cut inside a character: %q, want %q", got, "abé…")
	}
	if got := Head("é", 1); got != "…" {
		t.Fatalf("no whole character fits: %q", got)
	}
}
