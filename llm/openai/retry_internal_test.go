package openai

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	h := func(kv ...string) http.Header {
		x := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			x.Set(kv[i], kv[i+1])
		}
		return x
	}
	for _, c := range []struct {
		status int
		header http.Header
		want   time.Duration
	}{
		{429, h("Retry-After", "12"), 12 * time.Second},
		{429, h("Retry-After", "0.5"), 500 * time.Millisecond},
		{503, h("Retry-After", "Sat, 01 Mar 2025 12:00:30 GMT"), 30 * time.Second},
		{503, h("Retry-After", "Saturday, 01-Mar-25 12:01:00 GMT"), time.Minute}, // RFC 850
		{503, h("Retry-After", "Sat, 01 Mar 2025 11:00:00 GMT"), 0},              // in the past
		{429, h("Retry-After-Ms", "250"), 250 * time.Millisecond},
		{429, h("Retry-After", "1e30"), maxRetryAfter},
		{429, h("Retry-After", "-3"), 0},
		{429, h("Retry-After", "soon"), 0},
		{429, h("X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "1.5s"), 1500 * time.Millisecond},
		{429, h("X-Ratelimit-Remaining-Requests", "3", "X-Ratelimit-Reset-Requests", "1.5s"), 0},
		{500, h("X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "1.5s"), 0},
		{429, h(), 0},
	} {
		if got := retryAfter(c.status, c.header, now); got != c.want {
			t.Errorf("%d %v: got %s, want %s", c.status, c.header, got, c.want)
		}
	}
}

func TestErrorMessageIsClipped(t *testing.T) {
	long := strings.Repeat("é", 400)
	got := caller{}.errorMessage([]byte(long))
	if len(got) > 310 || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "éé") {
		t.Fatalf("%d bytes: %q", len(got), got)
	}
}

// A provider's message with a byte that is not UTF-8 keeps its text: the clip cut
// everything from the first such byte, so "a\xffbad request..." became "a…".
func TestErrorMessageWithInvalidUTF8KeepsItsText(t *testing.T) {
	body := "a\xff" + strings.Repeat("the model is overloaded ", 20) + "\xc3"
	got := caller{}.errorMessage([]byte(body))
	if !utf8.ValidString(got) || len(got) > 300+len("…") || !strings.HasSuffix(got, "…") ||
		!strings.HasPrefix(got, "a\uFFFDthe model is overloaded the model") {
		t.Fatalf("%d bytes: %q", len(got), got)
	}
	short := caller{}.errorMessage([]byte("bad \xfe\xff byte"))
	if short != "bad \uFFFD byte" {
		t.Fatalf("short: %q", short)
	}
}
