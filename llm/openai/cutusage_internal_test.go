package openai

import (
	"runtime"
	"strings"
	"testing"

	sdk "github.com/openai/openai-go/v3"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// Looking for the usage in a cut answer's body takes work in proportion to the
// body, whatever it holds. A body of "usage" members opening objects that never
// close ({"usage":{"usage":{…, as a broken or hostile provider or proxy may send,
// then cut) had each candidate decoded to the end of the body: work in the square
// of its length, seconds of a core for a 128 KiB tail (a cut Generate's) and, for
// a cut whole answer read by Stream (up to 64 MiB), longer than any call, while
// nothing could stop it. Each candidate is now read within a usage object's
// bounds, and few are tried.
func TestCutAnswerUsageSearchIsLinear(t *testing.T) {
	req := llm.Request{Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "Say something."}}}
	b := []byte(`{"id":"c1","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"x":` + strings.Repeat(`{"usage":`, 4<<10))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	u := partialUsage(req, b)
	runtime.ReadMemStats(&after)
	if want := estimatedUsage(req, sdk.ChatCompletion{}); u != want {
		t.Errorf("usage of a body whose usage members never close = %+v, want the estimate %+v", u, want)
	}
	// Decoding each candidate to the body's end allocates its rest: 4096
	// candidates of a 36 KiB body, some 150 MB.
	if got, bound := after.TotalAlloc-before.TotalAlloc, uint64(8<<20); got > bound {
		t.Errorf("the usage search of a %d-byte body allocated %d bytes, want at most %d: its work grows with the square of the body", len(b), got, bound)
	}
}
