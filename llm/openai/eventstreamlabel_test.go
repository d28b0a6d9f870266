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

// A chunk of an event stream sent bare (no "data:") under the label
// text/event-stream is no whole answer: read as one, it was an answer with no
// content and no error. The same chunk answering Generate is no answer either.
func TestStreamLabelledBareChunkIsMalformed(t *testing.T) {
	const key = "gw7f3c9a1b2d4e6f80aa11"
	bare := `{"object":"chat.completion.chunk","choices":[{"delta":{"content":"hello ` + key + `"},"finish_reason":"stop"}]}`
	for name, body := range map[string]string{
		"chunk":               bare,
		"choice no message":   `{"object":"chat.completion","choices":[{"index":0,"delta":{"content":"hello"},"finish_reason":"stop"}]}`,
		"choice null message": `{"id":"hello","choices":[{"index":0,"message":null,"finish_reason":"stop"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Header: map[string]string{"Content-Type": "text/event-stream"}, Body: body}))
			_, r, err := stream(t, newModel(t, srv, func(c *openai.Config) { c.APIKey = key }))
			if !errors.Is(err, openai.ErrMalformedResponse) || errors.Is(err, llm.ErrTransient) || !strings.Contains(err.Error(), "hello") {
				t.Fatalf("%+v, %v, want ErrMalformedResponse quoting the body", r, err)
			}
			if strings.Contains(err.Error(), key) {
				t.Fatalf("%v: the key shows", err)
			}
		})
	}
	t.Run("generate", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Body: bare}))
		r, err := newModel(t, srv, func(c *openai.Config) { c.APIKey = key }).Generate(deadline(t), llm.Request{Messages: conversation()[:2]})
		if !errors.Is(err, openai.ErrMalformedResponse) || !strings.Contains(err.Error(), "hello") || strings.Contains(err.Error(), key) {
			t.Fatalf("%+v, %v, want ErrMalformedResponse quoting the body", r, err)
		}
	})
}
