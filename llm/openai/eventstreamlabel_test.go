package openai_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A body labelled text/event-stream that holds no event but a JSON object (a
// router's error object, a whole answer of a server that does not stream) or a
// page is read as a whole answer is: every one of them failed as "stream ended
// before the answer was complete (no finish_reason)", transient, so the gateway
// sent it again and again, the provider's message lost and a whole answer thrown
// away.
func TestStreamLabelledBodyThatIsNoEventStream(t *testing.T) {
	sse := map[string]string{"Content-Type": "text/event-stream; charset=utf-8"}
	whole := openaitest.CompletionJSON(messages.ChatMessage{Content: "The answer is 42."}, messages.Usage{PromptTokens: 9, CompletionTokens: 5})
	t.Run("whole answer", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Header: sse, Body: "\n" + whole}))
		deltas, r, err := stream(t, newModel(t, srv))
		if err != nil || r.Message.Content != "The answer is 42." || r.Usage.CompletionTokens != 5 || len(deltas) != 0 {
			t.Fatalf("%+v, %+v, %v", deltas, r, err)
		}
	})
	t.Run("error object", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Header: sse,
			Body: `{"error":{"message":"this token's quota is used up","type":"new_api_error"}}`}))
		_, _, err := stream(t, newModel(t, srv))
		if err == nil || !strings.Contains(err.Error(), "this token's quota is used up") || errors.Is(err, openai.ErrTruncatedStream) {
			t.Fatalf("%v, want the provider's message", err)
		}
	})
	t.Run("page", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Header: sse, Body: "<html><body>502 Bad Gateway</body></html>"}))
		_, _, err := stream(t, newModel(t, srv))
		if !errors.Is(err, openai.ErrMalformedResponse) || errors.Is(err, llm.ErrTransient) || !strings.Contains(err.Error(), "502 Bad Gateway") {
			t.Fatalf("%v, want ErrMalformedResponse quoting the page", err)
		}
	})
}
