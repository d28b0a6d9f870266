package gateway

import (
	"context"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// CountTokens fills in the prompt and completion token counts of an answer whose model
// reported neither, counting the request's messages and the answer's message with t
// (nil: the offline estimate of package llm). Counts a model reported are kept as
// they are.
func CountTokens(t Tokenizer) Middleware {
	return func(next llm.Model) llm.Model {
		return &counted{Model: next, tokenizer: t}
	}
}

type counted struct {
	llm.Model
	tokenizer Tokenizer
}

func (m *counted) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	resp, err := m.Model.Generate(ctx, req)
	if err != nil {
		return resp, err
	}
	if u := &resp.Usage; u.PromptTokens == 0 && u.CompletionTokens == 0 {
		u.PromptTokens = m.count(req.Messages)
		u.CompletionTokens = m.count([]messages.ChatMessage{resp.Message})
	}
	return resp, nil
}

func (m *counted) count(msgs []messages.ChatMessage) int {
	if m.tokenizer == nil {
		return llm.EstimateTokens(msgs)
	}
	n := 0
	for _, msg := range msgs {
		n += 4 + m.tokenizer.Count(msg.Content) // 4: the per-message overhead of chat formats
		for _, c := range msg.ToolCalls {
			n += m.tokenizer.Count(c.Name) + m.tokenizer.Count(c.Arguments)
		}
	}
	return n
}
