package openai_test

import (
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// Some OpenAI-compatible servers give an answer's content as an array of parts
// (Mistral's reasoning models: a "thinking" part, then "text" parts) rather than a
// string. The answer is its text parts, joined; the thinking is not the answer.
// The answer was the array's JSON, and the user read it as the model's reply.
func TestContentGivenAsPartsIsItsText(t *testing.T) {
	const parts = `[{"type":"thinking","thinking":[{"type":"text","text":"2 and 2 make 4"}]},{"type":"text","text":"The answer"},{"type":"text","text":" is 4."}]`
	whole := `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` + parts +
		`},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":4}}`
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Body: whole}))
	r, err := newModel(t, srv).Generate(deadline(t), hello())
	if err != nil || r.Message.Content != "The answer is 4." {
		t.Fatalf("whole: %q %v", r.Message.Content, err)
	}
	chunk := func(content string) string {
		return `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":` + content + `},"finish_reason":null}]}`
	}
	srv = openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(openaitest.RoleChunk(),
		chunk(`[{"type":"thinking","thinking":[{"type":"text","text":"hmm"}]}]`), chunk(`[{"type":"text","text":"The answer"}]`), chunk(`" is 4."`),
		openaitest.FinishChunk("stop"), openaitest.UsageChunk(messages.Usage{PromptTokens: 5, CompletionTokens: 4}), openaitest.Done)))
	deltas, r, err := stream(t, newModel(t, srv))
	if err != nil || r.Message.Content != "The answer is 4." {
		t.Fatalf("streamed: %q %v", r.Message.Content, err)
	}
	text := ""
	for _, d := range deltas {
		text += d.Content
	}
	if text != "The answer is 4." {
		t.Fatalf("deltas %+v", deltas)
	}
}
