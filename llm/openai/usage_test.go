package openai_test

import (
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

func hello() llm.Request {
	return llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}}
}

// Token counts a provider reports below zero are no counts: a negative prompt count
// would price the answer below nothing and take tokens off the task's spend.
func TestNegativeUsageIsNotKept(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Completion(messages.ChatMessage{Content: "x"},
		messages.Usage{PromptTokens: -100, CompletionTokens: 5, CachedTokens: -3})))
	r, err := newModel(t, srv).Generate(deadline(t), hello())
	if err != nil {
		t.Fatal(err)
	}
	if want := (messages.Usage{CompletionTokens: 5}); r.Usage != want {
		t.Fatalf("usage %+v, want %+v", r.Usage, want)
	}
}
