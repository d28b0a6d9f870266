package react_test

import (
	"context"
	"errors"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/react"
	"github.com/troupe-run/troupe/messages"
)

// A model whose replies stay unparseable spent tokens on each attempt: the error's
// response carries them, for the session to record in model.responded (the effect
// keeps a failed call's usage) and count against the task's budget.
func TestWrapKeepsTheUsageOfUnparseableAttempts(t *testing.T) {
	bad := react.Wrap(&textModel{replies: []string{"no", "still no", "never"}}, react.Options{MaxRetries: 2})
	req := llm.Request{Step: 1, Tools: tools, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "2+2?"}}}
	r, err := bad.Generate(context.Background(), req)
	if !errors.Is(err, react.ErrUnparseable) {
		t.Fatalf("garbage: %v", err)
	}
	if r.Usage.PromptTokens != 30 || r.Usage.CompletionTokens != 6 {
		t.Fatalf("usage of 3 unparseable attempts: %+v, want 30+6 tokens", r.Usage)
	}
}
