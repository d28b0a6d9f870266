package redact_test

import (
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/redact"
)

// A secret that is not valid UTF-8 (a configured value with a stray byte) can
// match inside a character of valid text: the character's first byte, left
// beside [REDACTED], made the redacted text invalid UTF-8, which JSON then
// wrote as U+FFFD while the text in hand kept the byte, so that a task's input
// as run and as logged differed. Redacted valid UTF-8 stays valid.
func TestRedactingValidUTF8KeepsItValid(t *testing.T) {
	r := redact.New("\xa9abcdefgh")
	for _, in := range []string{"xéabcdefgh y", "é\xa9abcdefgh", "\xa9abcdefgh"} {
		got := r.String(in)
		if !utf8.ValidString(got) {
			t.Errorf("String(%q) = %q, not UTF-8", in, got)
		}
		if got == in {
			t.Errorf("String(%q): nothing redacted", in)
		}
	}
	// Text that was not UTF-8 is left as it comes, redacted.
	if got := redact.New("abcdefgh1").String("\xffabcdefgh1"); got != "\xff[REDACTED]" {
		t.Errorf("String of invalid UTF-8 = %q", got)
	}
	if got := r.String("plain text"); got != "plain text" {
		t.Errorf("String(plain) = %q", got)
	}
}
