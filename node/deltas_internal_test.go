package node

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// A secret the model streams in pieces never reaches a watcher: the deltas carry
// whole words, redacted; a reset drops the text held for the failed attempt.
func TestDeltaRedactorRedactsSecretsSplitOverDeltas(t *testing.T) {
	const key = "sk-troupe-test-0123456789abcdefSECRET"
	x := &deltaRedactor{r: redact.New(key)}
	var shown strings.Builder
	for _, piece := range []string{"your key ", key[:5], key[5:20], key[20:] + " wo", "rks", " fine\n"} {
		if d, ok := x.pass(messages.ModelDelta{Content: piece}); ok {
			shown.WriteString(d.Content)
		}
	}
	if got, want := shown.String(), "your key "+redact.Redacted+" works fine\n"; got != want {
		t.Fatalf("shown %q, want %q", got, want)
	}
	if _, ok := x.pass(messages.ModelDelta{Content: "half"}); ok {
		t.Fatal("a word without its end was let through")
	}
	d, ok := x.pass(messages.ModelDelta{Content: "again ", Reset: true})
	if !ok || d.Content != "again " {
		t.Fatalf("after a reset: %+v %v, want only the new attempt's text", d, ok)
	}
	d, ok = x.pass(messages.ModelDelta{ToolCallIndex: 1, ToolCallID: "c1", ToolName: "http", Arguments: `{"auth": "` + key[:9]})
	if !ok || d.ToolName != "http" || strings.Contains(d.Arguments, "sk-troupe") {
		t.Fatalf("arguments: %+v %v", d, ok)
	}
	d, _ = x.pass(messages.ModelDelta{ToolCallIndex: 1, Arguments: key[9:] + `"} `})
	if strings.Contains(d.Arguments, "0123456789") || !strings.Contains(d.Arguments, redact.Redacted) {
		t.Fatalf("arguments: %q", d.Arguments)
	}
	long := strings.Repeat("x", maxHeld+10)
	if d, ok := x.pass(messages.ModelDelta{Content: long}); !ok || d.Content != long {
		t.Fatalf("a word past maxHeld is held: %v %d", ok, len(d.Content))
	}
}
