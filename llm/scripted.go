package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"unicode/utf8"

	"github.com/troupe-run/troupe/messages"
)

// Scripted replays a fixed list of responses: the response for a call is chosen by the
// call's Step (the first model call of a task gets Steps[0], and so on), so many
// sessions can share one script and each sees the same conversation regardless of how
// their calls interleave. It is what tests and benchmarks run against.
type Scripted struct {
	name  string
	steps []Response
	cache *PromptCache
	// chunk is the size in bytes of the pieces Stream sends the content in; 0: Stream
	// sends none (WithStreaming).
	chunk int
}

var (
	_ Model    = (*Scripted)(nil)
	_ Streamer = (*Scripted)(nil)
)

// ScriptStep is one response in a script file.
type ScriptStep struct {
	Content   string              `json:"content,omitempty"`
	ToolCalls []messages.ToolCall `json:"tool_calls,omitempty"`
	Usage     messages.Usage      `json:"usage,omitempty"`
	// FinishReason, when set, is the answer's Response.FinishReason, kept as
	// AbnormalFinish keeps a provider's ("length" for an answer cut at the output
	// limit, "content_filter", "safety", …; "stop" and "tool_calls" are no
	// reason). A step with one that is not a whole answer's may have no content.
	FinishReason string `json:"finish_reason,omitempty"`
}

// Script is the JSON form of a scripted model: {"name": "...", "steps": [...]}.
type Script struct {
	Name  string       `json:"name"`
	Steps []ScriptStep `json:"steps"`
	// StreamChunk, when positive, streams each answer's content in pieces of about
	// this many bytes (Scripted.WithStreaming).
	StreamChunk int `json:"stream_chunk,omitempty"`
}

// NewScripted builds a scripted model from a script.
func NewScripted(s Script) (*Scripted, error) {
	if len(s.Steps) == 0 {
		return nil, fmt.Errorf("llm: script %q has no steps", s.Name)
	}
	name := s.Name
	if name == "" {
		name = "scripted"
	}
	m := &Scripted{name: name, chunk: max(s.StreamChunk, 0)}
	for i, st := range s.Steps {
		if st.Content == "" && len(st.ToolCalls) == 0 && AbnormalFinish(st.FinishReason) == "" {
			// An empty answer is a provider's only when it withheld it (a finish
			// reason such as "safety").
			return nil, fmt.Errorf("llm: script %q step %d has neither content nor tool calls", name, i+1)
		}
		for j, c := range st.ToolCalls {
			if c.ID == "" || c.Name == "" {
				return nil, fmt.Errorf("llm: script %q step %d tool call %d needs an id and a name", name, i+1, j+1)
			}
		}
		m.steps = append(m.steps, Response{
			Message:      messages.ChatMessage{Role: messages.RoleAssistant, Content: st.Content, ToolCalls: st.ToolCalls},
			Usage:        st.Usage,
			FinishReason: AbnormalFinish(st.FinishReason),
		})
	}
	return m, nil
}

// LoadScript reads a script file.
func LoadScript(path string) (*Scripted, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("llm: read script: %w", err)
	}
	var s Script
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("llm: script %s: %w", path, err)
	}
	return NewScripted(s)
}

// Name implements Model.
func (m *Scripted) Name() string { return m.name }

// WithPromptCache returns a copy of m that reports the cached tokens c simulates
// (PromptCache) in the usage it estimates: a step whose script gives its usage
// keeps it as given.
func (m *Scripted) WithPromptCache(c *PromptCache) *Scripted {
	cp := *m
	cp.cache = c
	return &cp
}

// WithStreaming returns a copy of m whose Stream delivers each answer's content in
// pieces of about chunk bytes (never splitting a UTF-8 character), then each tool
// call as one increment, as a streaming provider would; chunk <= 0 turns streaming
// off (Stream then delivers nothing, like Generate). Tests use it to see increments
// flow without a provider.
func (m *Scripted) WithStreaming(chunk int) *Scripted {
	cp := *m
	cp.chunk = max(chunk, 0)
	return &cp
}

// Stream implements Streamer: the answer Generate gives, delivered in pieces when
// WithStreaming set a chunk size.
func (m *Scripted) Stream(ctx context.Context, req Request, onDelta func(Delta) error) (Response, error) {
	r, err := m.Generate(ctx, req)
	if err != nil || m.chunk == 0 || onDelta == nil {
		return r, err
	}
	for rest := r.Message.Content; rest != ""; {
		n := min(m.chunk, len(rest))
		for n < len(rest) && !utf8.RuneStart(rest[n]) {
			n++
		}
		if err := onDelta(Delta{Content: rest[:n]}); err != nil {
			return Response{}, fmt.Errorf("llm: scripted %s: delta callback: %w", m.name, err)
		}
		rest = rest[n:]
		if err := ctx.Err(); err != nil {
			return Response{}, err
		}
	}
	for i, c := range r.Message.ToolCalls {
		if err := onDelta(Delta{ToolCallIndex: i, ToolCallID: c.ID, ToolName: c.Name, ArgumentsDelta: c.Arguments}); err != nil {
			return Response{}, fmt.Errorf("llm: scripted %s: delta callback: %w", m.name, err)
		}
	}
	return r, nil
}

// Generate implements Model.
func (m *Scripted) Generate(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	if req.Step < 1 || req.Step > len(m.steps) {
		return Response{}, fmt.Errorf("%w: step %d of %d", ErrScriptExhausted, req.Step, len(m.steps))
	}
	r := m.steps[req.Step-1]
	if r.Usage == (messages.Usage{}) {
		r.Usage = messages.Usage{PromptTokens: EstimateTokens(req.Messages), CompletionTokens: EstimateTokens([]messages.ChatMessage{r.Message}),
			CachedTokens: m.cache.Observe(req)}
	}
	return r, nil
}
