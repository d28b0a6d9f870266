package openai_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
)

// A key that an error quotes is hidden whole, though the quote is cut across it:
// the quote was cut to 300 bytes first and redacted after, so the head of a key
// across the cut, which the redaction no longer recognized, stayed in the error
// ("gw7f3c9a1b2d4e…"). So for an event of a stream that does not decode, for a body
// that is not JSON and for a provider's error message.
func TestQuotedKeyAcrossTheCutIsHidden(t *testing.T) {
	const key = "gw7f3c9a1b2d4e6f80aa11" // no credential shape: only the key itself is known
	pad := strings.Repeat("a", 270)
	sse := map[string]string{"Content-Type": "text/event-stream"}
	type reply = openaitest.Reply
	for name, c := range map[string]struct {
		reply    reply
		generate bool // Generate quotes it too
	}{
		"stream event": {reply: openaitest.Stream(openaitest.RoleChunk(), `{"x":"`+pad+`","echo":"`+key+`"`, openaitest.FinishChunk("stop"), openaitest.Done)},
		"not JSON": {reply: reply{Header: map[string]string{"Content-Type": "text/html"},
			Body: "<html><body><p>" + pad + " echo " + key + "</p></body></html>"}, generate: true},
		"page labelled event stream": {reply: reply{Header: sse, Body: "<html><body><p>" + pad + " echo " + key + "</p></body></html>"}},
		"error message": {reply: reply{Status: 401, Header: map[string]string{"Content-Type": "text/plain"},
			Body: pad + " bad key: " + key + " (echoed)"}, generate: true},
		"error event":  {reply: openaitest.Stream(openaitest.RoleChunk(), `{"error":{"message":"`+pad+` bad key `+key+`"}}`)},
		"error object": {reply: reply{Header: sse, Body: `{"error":{"message":"` + pad + ` bad key ` + key + `"}}`}},
	} {
		t.Run(name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(c.reply, c.reply))
			m := newModel(t, srv, func(c *openai.Config) { c.APIKey = key })
			_, _, err := stream(t, m)
			if err == nil {
				t.Fatal("no error")
			}
			if msg := err.Error(); strings.Contains(msg, key[:8]) || !strings.Contains(msg, "aaaa") {
				t.Fatalf("%s: want the quote without the key's head", msg)
			}
			if c.generate {
				_, err := m.Generate(deadline(t), llm.Request{Messages: conversation()[:2]})
				if msg := err.Error(); strings.Contains(msg, key[:8]) || !strings.Contains(msg, "aaaa") {
					t.Fatalf("generate: %s: want the quote without the key's head", msg)
				}
			}
		})
	}
}
