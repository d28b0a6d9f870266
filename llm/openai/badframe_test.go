package openai_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
)

// An event of a stream that does not decode (a frame cut short or garbled by the
// server or a proxy) is reported as such, quoting that event: the error said the
// server "answered HTTP 200 with Content-Type text/event-stream, not JSON (is the
// base URL the API's?)", quoting the stream's first events, which are well formed,
// and sent the user to check a base URL that was right.
func TestStreamMalformedEventIsQuoted(t *testing.T) {
	for _, bad := range []string{`{"id":"x","choices":[{"index":0,"delta":{"content":"b"`, `<html>502 Bad Gateway</html>`} {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("a"),
			bad, openaitest.FinishChunk("stop"), openaitest.Done)))
		_, _, err := stream(t, newModel(t, srv))
		if !errors.Is(err, openai.ErrMalformedResponse) || errors.Is(err, llm.ErrTransient) {
			t.Fatalf("%q: %v, want ErrMalformedResponse, not transient", bad, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "an event of the stream is not a chat completion chunk") ||
			!strings.Contains(msg, strings.ReplaceAll(bad, `"`, `\"`)) || strings.Contains(msg, "base URL") {
			t.Fatalf("%q: %v, want the error to quote the event", bad, err)
		}
	}
}
