package llm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/troupe-run/troupe/messages"
)

// Model generates the next assistant message of a conversation. Implementations are
// safe for concurrent use. Optional capabilities (streaming, embeddings) are found by
// type assertion, not added here.
type Model interface {
	// Name identifies the model in events, e.g. "offline" or "gpt-4o-mini".
	Name() string
	// Generate returns the assistant's next message. Errors that may succeed on retry
	// wrap ErrTransient.
	Generate(ctx context.Context, req Request) (Response, error)
}

// Request is one model call.
type Request struct {
	// Key is the call's idempotency key: a re-issued call carries the same Key.
	Key string
	// Step is the 1-based number of this call within the current task.
	Step     int
	Messages []messages.ChatMessage
	Tools    []messages.ToolSpec
}

// Response is a model's answer.
type Response struct {
	Message messages.ChatMessage
	Usage   messages.Usage
}

// Errors of the model layer.
var (
	// ErrTransient marks failures worth retrying (timeouts, 429, 5xx).
	ErrTransient = errors.New("llm: transient model failure")
	// ErrScriptExhausted means a scripted model has no response for the request.
	ErrScriptExhausted = errors.New("llm: script has no response for this step")
)

// PromptHash returns a stable hex SHA-256 of the request's messages and tools: two
// requests with the same prompt hash sent the model the same bytes. Replay
// verification compares it to notice a changed prompt or tool set.
func PromptHash(req Request) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	// Encoding fixed struct types cannot fail.
	_ = enc.Encode(req.Messages)
	_ = enc.Encode(req.Tools)
	return hex.EncodeToString(h.Sum(nil))
}

// EstimateTokens is a rough offline token count (about four bytes a token) for models
// that report no usage. It is labelled an estimate wherever it is shown.
func EstimateTokens(msgs []messages.ChatMessage) int {
	n := 0
	for _, m := range msgs {
		n += 4 + len(m.Content)/4
		for _, c := range m.ToolCalls {
			n += (len(c.Name) + len(c.Arguments)) / 4
		}
	}
	return n
}
