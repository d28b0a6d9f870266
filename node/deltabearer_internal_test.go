package node

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// A bearer token the model streams after "Bearer " never reaches a watcher: the
// model's own answer (model.responded) has it redacted by its shape ("Bearer"
// and the token together), so the deltas must not show it either. A tokenizer
// sends the white space before a word ("Bearer", " abc…"), so the shape's two
// halves fall into different runs of words.
func TestDeltaRedactorKeepsBearerWithItsToken(t *testing.T) {
	const tok = "Zq7mV2xK9pL4wR8tN3bH6cJ1"
	text := "curl -H 'Authorization: Bearer " + tok + "' https://api.example\n"
	if full := redact.New().String(text); strings.Contains(full, tok) {
		t.Fatalf("the shape does not cover the whole answer either: %q", full)
	}
	x := &deltaRedactor{r: redact.New()}
	var shown strings.Builder
	for _, piece := range []string{"curl", " -H", " 'Authorization:", " Bearer", " " + tok[:8], tok[8:] + "'", " https://api.example", "\n"} {
		if d, ok := x.pass(messages.ModelDelta{Content: piece}); ok {
			shown.WriteString(d.Content)
		}
	}
	if strings.Contains(shown.String(), tok) {
		t.Fatalf("the deltas show the bearer token the answer redacts: %q", shown.String())
	}
}
