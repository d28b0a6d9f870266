package gateway_test

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

// words counts space-separated words: a tokenizer whose counts a test can check by eye.
type words struct{}

func (words) Count(s string) int {
	n := 0
	for i, in := 0, false; i < len(s); i++ {
		if s[i] != ' ' && !in {
			n++
		}
		in = s[i] != ' '
	}
	return n
}

func TestCountTokensFillsInWhatAProviderDidNotReport(t *testing.T) {
	silent := &fakeModel{name: "silent", fn: func(int, llm.Request) (llm.Response, error) {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "three word answer",
			ToolCalls: []messages.ToolCall{{Name: "search", Arguments: "two words"}}}}, nil
	}}
	r, err := gateway.CountTokens(words{})(silent).Generate(context.Background(), ask("how long is this"))
	// Prompt: (4 + 1 "sys") + (4 + 4 words); completion: 4 + 3 words + 1 name + 2 arguments.
	if err != nil || r.Usage.PromptTokens != 5+8 || r.Usage.CompletionTokens != 4+3+1+2 {
		t.Fatalf("usage %+v %v", r.Usage, err)
	}
	r, _ = gateway.CountTokens(nil)(silent).Generate(context.Background(), ask("how long is this"))
	if r.Usage.PromptTokens == 0 || r.Usage.CompletionTokens == 0 {
		t.Fatalf("without a tokenizer, the offline estimate counts: %+v", r.Usage)
	}
}

func TestCountTokensKeepsReportedCounts(t *testing.T) {
	reported := withUsage("m", messages.Usage{PromptTokens: 0, CompletionTokens: 7})
	r, err := gateway.CountTokens(words{})(reported).Generate(context.Background(), ask("how long is this"))
	if err != nil || r.Usage.PromptTokens != 0 || r.Usage.CompletionTokens != 7 {
		t.Fatalf("usage %+v %v", r.Usage, err)
	}
}
