package openai_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// An answer the provider did not finish says why: its finish reason, as
// llm.AbnormalFinish keeps it; a whole one (stop, tool_calls) says nothing.
func TestFinishReasonOfAnUnfinishedAnswer(t *testing.T) {
	u := messages.Usage{PromptTokens: 10, CompletionTokens: 16}
	whole := func(finish string) openaitest.Reply {
		body := openaitest.CompletionJSON(messages.ChatMessage{Content: "The answer is"}, u)
		return openaitest.Reply{Body: strings.Replace(body, `"finish_reason":"stop"`, `"finish_reason":"`+finish+`"`, 1)}
	}
	streamed := func(finish string) openaitest.Reply {
		return openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("The answer is"),
			openaitest.FinishChunk(finish), openaitest.UsageChunk(u), openaitest.Done)
	}
	for _, c := range []struct{ finish, want string }{
		{"length", llm.FinishLength},
		{"content_filter", llm.FinishContentFilter},
		{"max_tokens", llm.FinishLength},
		{"stop", ""},
		{"recitation", "recitation"},
		// Other providers' words, and Gemini's own API's in capitals, through
		// OpenAI-compatible endpoints: a whole answer's say nothing, a cut is
		// length, any other word is kept (a session fails a final answer with it).
		{"STOP", ""},
		{"end_turn", ""},
		{"eos_token", ""},
		{"MAX_TOKENS", llm.FinishLength},
		{"model_length", llm.FinishLength},
		{"SAFETY", "SAFETY"},
		{"malformed_function_call", "malformed_function_call"},
		{"other", "other"},
	} {
		srv := openaitest.NewServer(t, openaitest.Sequence(whole(c.finish), streamed(c.finish)))
		m := newModel(t, srv)
		r, err := m.Generate(deadline(t), llm.Request{Messages: conversation()})
		if err != nil || r.FinishReason != c.want || r.Message.Content != "The answer is" {
			t.Errorf("finish_reason %q: Generate gave %+v, %v; want finish reason %q", c.finish, r, err, c.want)
		}
		_, r, err = stream(t, m)
		if err != nil || r.FinishReason != c.want || r.Message.Content != "The answer is" {
			t.Errorf("finish_reason %q: Stream gave %+v, %v; want finish reason %q", c.finish, r, err, c.want)
		}
	}
}

func TestAbnormalFinishIsBounded(t *testing.T) {
	long := strings.Repeat("é", 100)
	got := llm.AbnormalFinish(long)
	if len(got) > 64 || !strings.HasPrefix(long, got) || !strings.HasSuffix(got, "é") {
		t.Fatalf("AbnormalFinish kept %q (%d bytes)", got, len(got))
	}
}

// An answer the provider withheld (Gemini's finish_reason "safety" with no
// content) is an answer with its finish reason, not a malformed response.
func TestWithheldAnswerIsNoDecodeError(t *testing.T) {
	body := `{"id":"x","object":"chat.completion","created":1,"model":"gemini","choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"safety"}],"usage":{"prompt_tokens":5,"completion_tokens":0,"total_tokens":5}}`
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Body: body},
		openaitest.Stream(openaitest.RoleChunk(), openaitest.FinishChunk("safety"), openaitest.Done)))
	m := newModel(t, srv)
	r, err := m.Generate(deadline(t), llm.Request{Messages: conversation()})
	if err != nil || r.FinishReason != "safety" || r.Message.Content != "" {
		t.Fatalf("Generate gave %+v, %v; want an empty answer with finish reason safety", r, err)
	}
	_, r, err = stream(t, m)
	if err != nil || r.FinishReason != "safety" || r.Message.Content != "" {
		t.Fatalf("Stream gave %+v, %v; want an empty answer with finish reason safety", r, err)
	}
}
