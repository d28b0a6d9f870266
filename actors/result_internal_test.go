package actors

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/messages"
)

// TestEncodeResultFitsOneBusMessage: a result too large for the bus is cut to fit,
// at a UTF-8 boundary, and says so; escaping that makes the encoding longer than the
// text (each '<' is six bytes) is cut again until it fits; a result that fits is
// left whole.
func TestEncodeResultFitsOneBusMessage(t *testing.T) {
	for name, r := range map[string]messages.TaskResult{
		"multi-byte runes": {SessionID: "s", Status: messages.StatusCompleted, Output: strings.Repeat("ü€𝄞", 400_000)},
		"escaped":          {SessionID: "s", Status: messages.StatusCompleted, Output: strings.Repeat("<&>", 400_000)},
		"error and note":   {SessionID: "s", Status: messages.StatusFailed, Error: strings.Repeat("e", 900_000), Note: strings.Repeat("n", 900_000)},
	} {
		b, err := EncodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		var got messages.TaskResult
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if len(b) > messages.BusMessageMax || !got.Truncated {
			t.Errorf("%s: %d bytes, truncated %v", name, len(b), got.Truncated)
		}
		for _, f := range [][2]string{{got.Output, r.Output}, {got.Error, r.Error}, {got.Note, r.Note}} {
			if !utf8.ValidString(f[0]) || !strings.HasPrefix(f[1], f[0]) {
				t.Errorf("%s: a field was not cut to a prefix at a rune boundary", name)
			}
		}
		if len(b) < messages.BusMessageMax/2 {
			t.Errorf("%s: cut to %d bytes, far below the bound", name, len(b))
		}
	}
	small := messages.TaskResult{SessionID: "s", Status: messages.StatusCompleted, Output: "144"}
	b, err := EncodeResult(small)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := json.Marshal(small); string(b) != string(want) {
		t.Errorf("a small result changed: %s", b)
	}
}
