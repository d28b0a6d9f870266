package llm

import (
	"context"
	"sync"
)

// Delta is one increment of a streamed answer, in the order the provider sent it.
// A text increment has Content set and the tool fields empty. A tool-call increment
// names the call by ToolCallIndex (its position in the final message's ToolCalls);
// ToolCallID and ToolName usually arrive only with a call's first increment and
// ArgumentsDelta is the next piece of its JSON arguments. Parallel tool calls may
// interleave. Concatenating the increments gives the final Response's message.
type Delta struct {
	Content        string
	ToolCallIndex  int
	ToolCallID     string
	ToolName       string
	ArgumentsDelta string
}

// Streamer is the optional streaming capability of a model, found by type assertion.
type Streamer interface {
	// Stream generates like Model.Generate, calling onDelta with each increment as it
	// arrives, on the calling goroutine, and returns the assembled response. When
	// Stream fails, the increments already delivered belong to no answer. An error
	// from onDelta stops the stream and is returned (wrapped).
	Stream(ctx context.Context, req Request, onDelta func(Delta) error) (Response, error)
}

// DeltaFunc receives the increments of the streamed model calls made under a context
// (WithDeltas). attempt numbers the provider calls streamed under that context from
// 1: a retry or a fallback streams again from the start under a higher attempt, and
// the increments of a lower attempt belong to no answer. It is called on the
// goroutine of the call and must not block: increments are a courtesy to a reader
// watching the answer form, never the answer (the call's Response is).
type DeltaFunc func(attempt int, d Delta)

// deltaSink is what WithDeltas puts in a context: the function and the attempt count.
type deltaSink struct {
	fn       DeltaFunc
	mu       sync.Mutex
	attempts int
}

type deltaSinkKey struct{}

// WithDeltas returns a context under which a streaming model call delivers its
// increments to fn (see StreamOrGenerate), the way net/http/httptrace carries its
// hooks: every layer between the caller and the provider (the gateway's retries,
// fallback, caches) passes the context down unchanged, so the increments of
// whichever provider call answers reach fn without each layer knowing of them.
func WithDeltas(ctx context.Context, fn DeltaFunc) context.Context {
	if fn == nil {
		return ctx
	}
	return context.WithValue(ctx, deltaSinkKey{}, &deltaSink{fn: fn})
}

// StreamOrGenerate calls m: through its Stream when m is a Streamer and ctx carries a
// DeltaFunc (WithDeltas), as a new attempt of that context, else through Generate.
// Either way it returns what the call returned; a streamed call that fails never
// returns a partial answer.
func StreamOrGenerate(ctx context.Context, m Model, req Request) (Response, error) {
	s, ok := m.(Streamer)
	sink, _ := ctx.Value(deltaSinkKey{}).(*deltaSink)
	if !ok || sink == nil {
		return m.Generate(ctx, req)
	}
	sink.mu.Lock()
	sink.attempts++
	attempt := sink.attempts
	sink.mu.Unlock()
	return s.Stream(ctx, req, func(d Delta) error {
		sink.fn(attempt, d)
		return nil
	})
}
