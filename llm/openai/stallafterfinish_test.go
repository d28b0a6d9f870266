package openai_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A stream that finished every choice and then stalls before [DONE] (a server or
// proxy that keeps the connection open) has answered: the answer is returned, with
// its usage if it came, once no chunk came for a grace of a few seconds; not when
// Config.Timeout ends, which here is past the caller's deadline.
func TestStreamStalledAfterFinishAnswersBeforeTheTimeout(t *testing.T) {
	u := messages.Usage{PromptTokens: 9, CompletionTokens: 2}
	finish := []string{openaitest.RoleChunk(), openaitest.ContentChunk("Hi"), openaitest.FinishChunk("stop")}
	for _, c := range []struct {
		name   string
		events []string
		want   messages.Usage
	}{
		{"after its usage", append(finish[:len(finish):len(finish)], openaitest.UsageChunk(u)), u},
		{"after its finish_reason", finish, messages.Usage{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Events: c.events, Stall: true}))
			m := newModel(t, srv, func(c *openai.Config) { c.Timeout = time.Hour })
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			r, err := m.Stream(ctx, llm.Request{Messages: conversation()[:2]}, nil)
			if err != nil || r.Message.Content != "Hi" || r.Usage != c.want {
				t.Fatalf("%+v %v: want the answer %q with usage %+v", r, err, "Hi", c.want)
			}
		})
	}
}

// A finish_reason does not end a stream: [DONE] does. Proxies send one early or
// more than once (one after each tool call and another at the end, one on each
// chunk of a tool call), a server may report usage in every chunk or compute it
// some time after the answer, and Azure annotates the answer after its finish with
// chunks whose finish_reason is null. The chunks after a finish_reason are part of
// the answer, however long they take to come (while each comes within the grace of
// a stalled stream), and a later chunk without one does not undo it.
func TestStreamGoesOnAfterAFinishReason(t *testing.T) {
	u := messages.Usage{PromptTokens: 9, CompletionTokens: 2}
	u2 := messages.Usage{PromptTokens: 9, CompletionTokens: 7}
	callA := openaitest.ToolCallChunk(0, "call_a", "calculator", `{"expression":"6*7"}`)
	callB := openaitest.ToolCallChunk(1, "call_b", "clock", `{}`)
	twoCalls := []messages.ToolCall{
		{ID: "call_a", Name: "calculator", Arguments: `{"expression":"6*7"}`},
		{ID: "call_b", Name: "clock", Arguments: `{}`},
	}
	bs := []string{openaitest.RoleChunk(), finishing(openaitest.ContentChunk("a"), "stop")}
	pauses := map[int]time.Duration{}
	for range 8 {
		pauses[len(bs)] = 300 * time.Millisecond
		bs = append(bs, openaitest.ContentChunk("b"))
	}
	bs = append(bs, openaitest.FinishChunk("stop"), openaitest.UsageChunk(u), openaitest.Done)
	azure := `{"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1700000000,"model":"fake-model",` +
		`"choices":[{"index":0,"delta":{},"finish_reason":null,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}`
	for _, c := range []struct {
		name  string
		reply openaitest.Reply
		want  messages.ChatMessage
		usage messages.Usage
	}{
		{"more text a while after a finish_reason", openaitest.Reply{
			Events: []string{openaitest.RoleChunk(), finishing(openaitest.ContentChunk("Hel"), "stop"),
				finishing(openaitest.ContentChunk("lo"), "stop"), openaitest.UsageChunk(u), openaitest.Done},
			Pauses: map[int]time.Duration{2: 1500 * time.Millisecond},
		}, messages.ChatMessage{Content: "Hello"}, u},
		{"a tool call a while after another's finish_reason", openaitest.Reply{
			Events: []string{openaitest.RoleChunk(), callA, openaitest.FinishChunk("tool_calls"),
				callB, openaitest.FinishChunk("tool_calls"), openaitest.UsageChunk(u), openaitest.Done},
			Pauses: map[int]time.Duration{3: 1500 * time.Millisecond},
		}, messages.ChatMessage{ToolCalls: twoCalls}, u},
		{"usage and a finish_reason in every chunk", openaitest.Reply{
			Events: []string{openaitest.RoleChunk(), withUsage(t, finishing(callA, "tool_calls"), u),
				withUsage(t, finishing(callB, "tool_calls"), u2), openaitest.Done},
			Pauses: map[int]time.Duration{2: 10 * time.Millisecond},
		}, messages.ChatMessage{ToolCalls: twoCalls}, u2},
		{"text coming slowly after a finish_reason", openaitest.Reply{Events: bs, Pauses: pauses},
			messages.ChatMessage{Content: "abbbbbbbb"}, u},
		{"usage a while after the finish_reason", openaitest.Reply{
			Events: []string{openaitest.RoleChunk(), openaitest.ContentChunk("Hi"), openaitest.FinishChunk("stop"),
				openaitest.UsageChunk(u), openaitest.Done},
			Pauses: map[int]time.Duration{3: 1500 * time.Millisecond},
		}, messages.ChatMessage{Content: "Hi"}, u},
		{"a null finish_reason after the finish", openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("Hi"),
			openaitest.FinishChunk("stop"), azure, openaitest.UsageChunk(u), openaitest.Done),
			messages.ChatMessage{Content: "Hi"}, u},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := openaitest.NewServer(t, openaitest.Sequence(c.reply))
			m := newModel(t, srv, func(c *openai.Config) { c.Timeout = time.Hour })
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			r, err := m.Stream(ctx, llm.Request{Messages: conversation()[:2]}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var calls []messages.ToolCall
			for _, tc := range r.Message.ToolCalls {
				calls = append(calls, messages.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
			}
			if r.Message.Content != c.want.Content || !reflect.DeepEqual(calls, c.want.ToolCalls) || r.Usage != c.usage || r.FinishReason != "" {
				t.Fatalf("%+v: want %q with tool calls %+v and usage %+v", r, c.want.Content, c.want.ToolCalls, c.usage)
			}
		})
	}
}

// finishing is chunk (of one choice) with the finish_reason reason.
func finishing(chunk, reason string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(chunk), &m); err != nil {
		panic(err) // the chunks of openaitest are JSON objects
	}
	m["choices"].([]any)[0].(map[string]any)["finish_reason"] = reason
	b, _ := json.Marshal(m)
	return string(b)
}

// withUsage is chunk with the usage u, as a server that reports usage in every
// chunk sends it.
func withUsage(t *testing.T, chunk string, u messages.Usage) string {
	t.Helper()
	var m, usage map[string]any
	if err := json.Unmarshal([]byte(chunk), &m); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(openaitest.UsageChunk(u)), &usage); err != nil {
		t.Fatal(err)
	}
	m["usage"] = usage["usage"]
	b, _ := json.Marshal(m)
	return string(b)
}
