package openai_test

import (
	"bytes"
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// Some OpenAI-compatible APIs refuse stream_options (Mistral answers 422
// extra_forbidden; they report usage in the stream unasked): a streamed call, made
// because someone watches the session, is sent again once without it, and the
// model's later streamed calls leave it out. The call failed as a 4xx, where the
// same call unwatched (not streamed) succeeded.
func TestStreamToAnAPIThatRefusesStreamOptions(t *testing.T) {
	const refusal = `{"object":"error","message":{"detail":[{"type":"extra_forbidden","loc":["body","stream_options","include_usage"],"msg":"Extra inputs are not permitted","input":true}]},"type":"invalid_request_error","param":null,"code":null}`
	u := messages.Usage{PromptTokens: 7, CompletionTokens: 2}
	srv := openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
		if bytes.Contains(r.Body, []byte("stream_options")) {
			return openaitest.Reply{Status: 422, Body: refusal}
		}
		return openaitest.TextStream(u, "Bon", "jour")
	})
	m := newModel(t, srv)
	for call := 1; call <= 2; call++ {
		_, r, err := stream(t, m)
		if err != nil || r.Message.Content != "Bonjour" || r.Usage != u {
			t.Fatalf("call %d: %+v %v", call, r, err)
		}
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d requests, want 3: the first refused, then one a call", n)
	}
}
