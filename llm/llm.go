package llm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/troupe-run/troupe/messages"
)

// Model generates the next assistant message of a conversation. Implementations are
// safe for concurrent use. Optional capabilities (streaming, embeddings) are found by
// type assertion, not added here.
type Model interface {
	// Name identifies the model in events, e.g. "offline" or "gpt-4o-mini".
	Name() string
	// Generate returns the assistant's next message. Errors that may succeed on retry
	// wrap ErrTransient. A call that fails after it spent tokens (replies it could not
	// use, attempts it retried) returns with its error a Response whose Usage says
	// what it spent, and nothing else: a caller keeps it (the gateway's quotas, the
	// task's usage that budgets count), and reads nothing more of a failed call.
	Generate(ctx context.Context, req Request) (Response, error)
}

// Request is one model call.
type Request struct {
	// Key is the call's idempotency key: a re-issued call carries the same Key.
	Key string
	// Outward names the call for a provider that dedupes requests (an
	// Idempotency-Key header): the same whenever the call is issued again, like
	// Key, but unique across event logs, where Key ("<session>/<seq>") is unique
	// only within one (messages.EffectKey.Outward). Empty for a call of no
	// session's recorded request, or a request of an older build: Key names it then.
	Outward string
	// Step is the 1-based number of this call within the current task.
	Step     int
	Messages []messages.ChatMessage
	Tools    []messages.ToolSpec
	// Scope says on whose behalf the call is made, for quotas and cache namespaces.
	Scope Scope
	// NoCache bypasses the gateway's response caches for this call.
	NoCache bool
	// Protocol, when ProtocolReAct, asks for the ReAct text protocol even from a
	// model that calls tools natively (llm/react); empty: native tool calls when the
	// model has them.
	Protocol string
	// Models names the chain of models the call goes to, by their names, tried in
	// order (the first, then its fallbacks): an agent's own models (a gateway's
	// Config.Routes). Empty: the model called, with whatever chain it has.
	Models []string
	// Purpose names what a paradigm asks the model for beyond the agent's loop
	// ("critique", "evaluate", "lesson", …: messages.ModelRequested.Purpose); empty
	// for a step of the loop. A model may answer by it (the offline model does); it
	// is not part of the prompt's hash.
	Purpose string
}

// ProtocolReAct is Request.Protocol for the ReAct text protocol (package llm/react).
const ProtocolReAct = "react"

// Call returns the request's wire form, the Model of a messages.EffectRequest, which
// carries a model call to whoever performs it (this node or another). The key travels
// beside it, in the request. RequestOf converts back; adding a field to Request means
// adding it to messages.ModelCall and to these two functions (TestRequestWireRoundTrip
// fails until then).
func (r Request) Call() messages.ModelCall {
	return messages.ModelCall{Step: r.Step, Messages: r.Messages, Tools: r.Tools,
		Agent: r.Scope.Agent, Team: r.Scope.Team, ScopeKey: r.Scope.Key, NoCache: r.NoCache, Protocol: r.Protocol,
		Models: r.Models, Purpose: r.Purpose}
}

// RequestOf returns the request whose wire form is c, with its idempotency key and
// its name outside the log (messages.EffectRequest carries both beside c).
func RequestOf(key, outward string, c messages.ModelCall) Request {
	return Request{Key: key, Outward: outward, Step: c.Step, Messages: c.Messages, Tools: c.Tools,
		Scope: Scope{Agent: c.Agent, Team: c.Team, Key: c.ScopeKey}, NoCache: c.NoCache, Protocol: c.Protocol,
		Models: c.Models, Purpose: c.Purpose}
}

// Scope identifies who a model call is for. Empty fields are "unspecified".
type Scope struct {
	Agent string
	Team  string
	// Key names the API key or tenant the call is billed to (a name, never the secret).
	Key string
}

// Response is a model's answer.
type Response struct {
	Message messages.ChatMessage
	Usage   messages.Usage
	// Model names the model that answered, when it differs from the Model called (a
	// gateway's fallback chain); empty means the Model called.
	Model string
	// Cached is true when the answer came from a cache, not from a model.
	Cached bool
	// FinishReason is why the model stopped when that was not the end of its answer
	// or a turn of tool calls: the provider's word, such as FinishLength (the answer
	// reached the output limit, cut) or FinishContentFilter. Empty for a whole
	// answer ("stop", "tool_calls" and the like are not kept).
	FinishReason string
}

// The finish reasons a Response may carry (the OpenAI chat API's words, which
// OpenAI-compatible servers share).
const (
	// FinishLength: the answer reached the request's or the model's output token
	// limit and was cut there.
	FinishLength = "length"
	// FinishContentFilter: the provider's content filter stopped or withheld the
	// answer.
	FinishContentFilter = "content_filter"
)

// AbnormalFinish returns the finish reason a provider gave, or "" when it says
// the answer is whole. The rule: a reason is whole when it is one of the words
// providers use for an answer the model ended itself, a turn of tool calls
// included: "stop" (or none), "tool_calls", "function_call", and the words of
// providers that have their own, "end_turn", "stop_sequence", "tool_use",
// "eos", "eos_token", "complete", "tool_call" (Anthropic's, Hugging Face TGI's,
// Cohere's), in any case (Gemini's own API says "STOP"). A cut at the output
// limit is FinishLength whatever its word ("length", "max_tokens",
// "model_length"). Any other word, known or not, means the answer is not whole
// (FinishContentFilter, Gemini's "safety", "recitation", "blocklist",
// "prohibited_content", "spii", "malformed_function_call", "language", "other",
// Anthropic's "refusal", "pause_turn", …): it is kept as given (at most 64 bytes),
// for the session to record and act on (package actors fails a final answer of
// that kind).
func AbnormalFinish(reason string) string {
	if wholeFinish(reason) {
		return ""
	}
	switch strings.ToLower(reason) {
	case "length", "max_tokens", "model_length":
		return FinishLength
	}
	if len(reason) > 64 {
		cut := 64
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut]
	}
	return reason
}

// wholeFinish reports whether a provider's finish reason says the answer is whole
// (AbnormalFinish gives the rule).
func wholeFinish(reason string) bool {
	switch strings.ToLower(reason) {
	case "", "stop", "tool_calls", "function_call", "end_turn", "stop_sequence", "tool_use", "eos", "eos_token", "complete", "tool_call":
		return true
	}
	return false
}

// Capabilities says what a model can do natively.
type Capabilities struct {
	// NativeTools: the model takes tool definitions and returns structured tool calls.
	// Models without it get tools through the text (ReAct) protocol.
	NativeTools bool
	Streaming   bool
	JSONMode    bool
}

// CapabilityReporter is implemented by models that know their capabilities. A model
// that does not implement it is assumed to call tools natively.
type CapabilityReporter interface {
	Capabilities() Capabilities
}

// CapabilitiesOf returns m's capabilities (native tools when m does not say).
func CapabilitiesOf(m Model) Capabilities {
	if r, ok := m.(CapabilityReporter); ok {
		return r.Capabilities()
	}
	return Capabilities{NativeTools: true}
}

// Embedder turns texts into vectors, one per text, in order.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// LexicalEmbedder is an Embedder that says whether its vectors find a text's
// words rather than its meaning (HashingEmbedder's do: two texts without a shared
// word are near by hash collisions only). It is an optional capability, found by
// IsLexical: a wrapper of an embedder (a cache, metrics, a recorder) passes the
// question on, so that it is taken for what it wraps.
type LexicalEmbedder interface {
	Embedder
	Lexical() bool
}

// IsLexical reports whether e's vectors find words, not meaning: e is a
// LexicalEmbedder that says so. An embedder that does not say is taken as
// semantic.
func IsLexical(e Embedder) bool {
	l, ok := e.(LexicalEmbedder)
	return ok && l.Lexical()
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
	p := promptHashers.Get().(*promptHasher)
	defer promptHashers.Put(p)
	p.h.Reset()
	// The messages as a json.Encoder writes them (newline-terminated), without
	// reflection; a buffer that grew past maxHashBuffer for a long conversation is
	// not kept.
	p.buf = append(messages.AppendChatJSON(p.buf[:0], req.Messages), '\n')
	_, _ = p.h.Write(p.buf)
	if cap(p.buf) > maxHashBuffer {
		p.buf = nil
	}
	_, _ = p.h.Write(p.toolsJSON(req.Tools))
	return string(hex.AppendEncode(p.hex[:0], p.h.Sum(p.sum[:0])))
}

// toolsJSON returns the encoding of tools, newline-terminated as the encoder writes
// it. A request offers the same tools as the last one nearly always, and encoding
// their schemas (compacted by the encoder) is most of the work: the last encoding is
// kept, with a copy of the tools it is of, and reused while they are equal.
func (p *promptHasher) toolsJSON(tools []messages.ToolSpec) []byte {
	if p.toolsEnc != nil && sameTools(p.lastTools, tools) {
		return p.toolsEnc
	}
	b, err := json.Marshal(tools)
	if err != nil { // fixed struct types: it cannot fail
		b = nil
	}
	p.toolsEnc = append(b, '\n')
	p.lastTools = nil // nil tools encode as null, not []
	if tools != nil {
		p.lastTools = make([]messages.ToolSpec, len(tools))
		for i, t := range tools {
			t.Parameters = append(json.RawMessage(nil), t.Parameters...)
			p.lastTools[i] = t
		}
	}
	return p.toolsEnc
}

func sameTools(a, b []messages.ToolSpec) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		// Parameters are omitted when empty, nil or not.
		if a[i].Name != b[i].Name || a[i].Description != b[i].Description || !bytes.Equal(a[i].Parameters, b[i].Parameters) {
			return false
		}
	}
	return true
}

// promptHasher is the reusable state of PromptHash: a hash, and buffers for the
// messages' encoding and the sum. Each one is used by one call at a time.
type promptHasher struct {
	h   hash.Hash
	buf []byte // the messages' encoding
	sum [sha256.Size]byte
	// The tools of the last call (a copy) and their encoding (toolsJSON).
	lastTools []messages.ToolSpec
	toolsEnc  []byte
	hex       [2 * sha256.Size]byte
}

// promptHashers keeps PromptHash's hashers between calls; it holds no state that
// outlives a call.
var promptHashers = sync.Pool{New: func() any {
	return &promptHasher{h: sha256.New()}
}}

// maxHashBuffer bounds the encoding buffer a promptHasher keeps between calls.
const maxHashBuffer = 256 << 10

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
