package openai

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// Model is a chat model behind an OpenAI-compatible API. It is immutable and safe
// for concurrent use. Each call makes one HTTP request, bounded by Config.Timeout and
// by the caller's context.
type Model struct {
	cfg  Config
	chat sdk.ChatCompletionService
	who  caller
	// noStreamOptions is set once the server refused a stream's stream_options
	// (shared by the copies of WithResponseFormat: one server).
	noStreamOptions *atomic.Bool
}

var (
	_ llm.Model              = (*Model)(nil)
	_ llm.CapabilityReporter = (*Model)(nil)
)

// New builds a model from cfg. It sends nothing over the network.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Provider = cfg.providerName()
	cfg.ExtraHeaders = maps.Clone(cfg.ExtraHeaders)
	cfg.ExtraBody = maps.Clone(cfg.ExtraBody)
	cfg.Stop = slices.Clone(cfg.Stop)
	return &Model{
		cfg:  cfg,
		chat: sdk.NewChatCompletionService(clientOptions(cfg.BaseURL, cfg.APIKey, cfg.ExtraHeaders, cfg.HTTPClient)...),
		who:  caller{provider: cfg.Provider, model: cfg.Model, apiKey: cfg.APIKey, callTimeout: cfg.timeout()},

		noStreamOptions: new(atomic.Bool),
	}, nil
}

// WithResponseFormat returns a copy of m that asks for rf (nil: text). m is unchanged.
func (m *Model) WithResponseFormat(rf *ResponseFormat) (*Model, error) {
	cfg := m.cfg
	cfg.ResponseFormat = rf
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := *m
	c.cfg = cfg
	return &c, nil
}

// clientOptions configures the SDK explicitly: it never reads OPENAI_* environment
// variables, and it never retries (retries belong to the gateway). The query of the
// base URL (an api-version, a gateway's ?key=) goes with every request, byte for
// byte as the base URL writes it (a signature's escapes, a bare flag, a ';' kept):
// the SDK resolves each endpoint's path against the base URL, which drops its query.
func clientOptions(base, key string, headers map[string]string, hc *http.Client) []option.RequestOption {
	if hc == nil {
		hc = &http.Client{}
	}
	query := ""
	if u, err := url.Parse(base); err == nil && u.RawQuery != "" {
		query = u.RawQuery
		u.RawQuery, u.ForceQuery = "", false
		base = u.String()
	}
	opts := []option.RequestOption{option.WithBaseURL(base), option.WithHTTPClient(hc), option.WithMaxRetries(0)}
	if query != "" {
		opts = append(opts, option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			req = req.Clone(req.Context())
			if req.URL.RawQuery == "" {
				req.URL.RawQuery = query
			} else {
				req.URL.RawQuery = query + "&" + req.URL.RawQuery
			}
			return next(req)
		}))
	}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		opts = append(opts, option.WithHeader(k, headers[k]))
	}
	return opts
}

// Name implements llm.Model: the provider's model name, e.g. "gpt-4o-mini".
func (m *Model) Name() string { return m.cfg.Model }

// Provider names the provider the model runs at, e.g. "deepseek".
func (m *Model) Provider() string { return m.cfg.Provider }

// Endpoint names the rate limit the model's calls share (the gateway's
// EndpointNamer): its base URL as printed (ShownURL) and, when it has an API key
// or ShownURL hid something (a key in its query), a digest of the key and of the
// base URL as written; never the key.
func (m *Model) Endpoint() string {
	shown := ShownURL(m.cfg.BaseURL)
	if m.cfg.APIKey == "" && shown == m.cfg.BaseURL {
		return shown
	}
	sum := sha256.Sum256([]byte(m.cfg.APIKey + "\x00" + m.cfg.BaseURL))
	return shown + " key " + hex.EncodeToString(sum[:6])
}

// Capabilities implements llm.CapabilityReporter: native tools (function calling,
// parallel calls), streaming (Stream) and JSON mode (Config.ResponseFormat). Whether
// a given provider's model honours them is the provider's business; an unsupported
// feature comes back as a 400 *llm.APIError.
func (m *Model) Capabilities() llm.Capabilities {
	return llm.Capabilities{NativeTools: true, Streaming: true, JSONMode: true}
}

// String describes the model without its API key.
func (m Model) String() string {
	return fmt.Sprintf("openai.Model{%s %s at %s}", m.cfg.Provider, m.cfg.Model, ShownURL(m.cfg.BaseURL))
}

// Format makes every fmt verb print String, never the key.
func (m Model) Format(f fmt.State, _ rune) { _, _ = fmt.Fprint(f, m.String()) }

// LogValue implements slog.LogValuer without the key.
func (m Model) LogValue() slog.Value { return m.cfg.LogValue() }

// Generate implements llm.Model with one chat completion. Errors: *llm.APIError
// (wrapped) for HTTP errors, llm.ErrTransient for timeouts and dropped connections,
// the context's error when ctx ends first, ErrMalformedResponse, ErrInvalidRequest.
// A call that timed out after its request went out returns with its error an
// estimate of its prompt's tokens (timedOutSpend): the provider bills them. One
// whose answer came and was then cut or stalled part-way returns the usage the
// provider reported in the part that came, or that estimate (cutSpend).
func (m *Model) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return llm.Response{}, m.who.errorf("chat", "%w", err)
	}
	params, err := m.params("chat", req)
	if err != nil {
		return llm.Response{}, err
	}
	call, cancel := context.WithTimeoutCause(ctx, m.who.callTimeout, errCallTimeout)
	defer cancel()
	x := &exchange{limit: maxAnswerBytes}
	cc, err := m.chat.New(call, params, append(idempotency(req, m.cfg.Model), option.WithMiddleware(x.middleware))...)
	if err != nil {
		spent, cut := cutSpend(req, x)
		if !cut {
			spent = timedOutSpend(req, ctx, call, x)
		}
		return spent, m.who.classify("chat", ctx, call, x, err)
	}
	if cc == nil || len(cc.Choices) == 0 {
		if cc != nil {
			if err := m.who.errorObject("chat", "the provider answered with an error", []byte(cc.RawJSON()), inBody); err != nil {
				return llm.Response{}, err
			}
		}
		return llm.Response{}, m.who.errorf("chat", "%w: the response has no choices", ErrMalformedResponse)
	}
	if isChunk(*cc) {
		return llm.Response{}, m.who.errorf("chat", "%w: the answer is a chunk of an event stream, not a chat completion: %q",
			ErrMalformedResponse, m.who.quote(cc.RawJSON()))
	}
	msg, err := m.message(req, cc.Choices[0].Message)
	if err != nil {
		return llm.Response{Usage: usage(cc.Usage)}, err // what the refused answer cost (llm.Model)
	}
	return llm.Response{Message: msg, Usage: usage(cc.Usage), FinishReason: llm.AbnormalFinish(cc.Choices[0].FinishReason)}, nil
}

// timedOutSpend is what a whole call that failed spent (llm.Model), or a stream
// that failed before its first chunk: when the request went out whole and the
// call timed out (Config.Timeout or the caller's deadline, or a cause of the
// caller's context that is context.DeadlineExceeded: a timer's) before an HTTP
// error came, the provider took the prompt and bills it, answer or not, though it
// reported nothing: its prompt, estimated (llm.EstimateTokens), as a stream that
// stalled is (estimatedUsage). Nothing for any other failure.
func timedOutSpend(req llm.Request, parent, call context.Context, x *exchange) llm.Response {
	x.mu.Lock()
	wrote, status, stalled := x.wrote, x.status, x.stalled
	x.mu.Unlock()
	timedOut := stalled || context.Cause(call) == errCallTimeout || errors.Is(parent.Err(), context.DeadlineExceeded) ||
		errors.Is(context.Cause(parent), context.DeadlineExceeded)
	if !wrote || status >= 400 || !timedOut {
		return llm.Response{}
	}
	return llm.Response{Usage: estimatedUsage(req, sdk.ChatCompletion{})}
}

// cutSpend is what a call spent whose whole answer (a JSON body, no event stream)
// came with a successful status and then did not arrive whole (a read of its body
// failed: the connection was cut, the body stalled, the call timed out or its
// caller gave up): the provider made the answer and bills it. It is the usage the
// provider reported in the part that came, or, with none in it, an estimate of the
// prompt (partialUsage). cut is false for any other failure.
func cutSpend(req llm.Request, x *exchange) (spent llm.Response, cut bool) {
	x.mu.Lock()
	cut = x.answer != nil && x.answer.whole && x.status < 300 && (x.readErr != nil || x.stalled) && !x.tooLarge
	tail, head := x.tail, x.head
	x.mu.Unlock()
	if !cut {
		return llm.Response{}, false
	}
	return llm.Response{Usage: partialUsage(req, tail, head)}, true
}

// partialUsage is what a whole answer cut short spent, of which parts came: the
// usage the provider reported in one of them (a chat completion's usage object,
// whole), or, when none holds it, an estimate of the prompt of req, as of a stream
// cut before its usage chunk (estimatedUsage): the answer's own tokens are not
// known, the part that came is no measure of them.
func partialUsage(req llm.Request, parts ...[]byte) messages.Usage {
	for _, b := range parts {
		if u, ok := reportedUsage(b); ok {
			return usage(u)
		}
	}
	return estimatedUsage(req, sdk.ChatCompletion{})
}

// usageKey is the member of a chat completion that holds its usage.
var usageKey = []byte(`"usage"`)

// maxUsageBytes bounds the usage object reportedUsage reads (a chat
// completion's, with its details, is a few hundred bytes), and maxUsageTries the
// "usage" members it tries: a body of many, each opening an object that never
// closes, would otherwise have each read to the body's end, work in the square
// of its length.
const (
	maxUsageBytes = 4 << 10
	maxUsageTries = 16
)

// reportedUsage finds the usage object in b, a part of a chat completion's body:
// the last "usage" member name (a quote not escaped, so not inside a string) whose
// object value is whole in b, among the last maxUsageTries such members whose
// value is an object, within maxUsageBytes of its name.
func reportedUsage(b []byte) (sdk.CompletionUsage, bool) {
	for end, tries := len(b), 0; ; {
		at := bytes.LastIndex(b[:end], usageKey)
		if at < 0 || tries == maxUsageTries {
			return sdk.CompletionUsage{}, false
		}
		end = at
		slashes := 0
		for i := at - 1; i >= 0 && b[i] == '\\'; i-- {
			slashes++
		}
		if slashes%2 == 1 {
			continue // an escaped quote: the word is inside a string
		}
		rest := bytes.TrimLeft(b[at+len(usageKey):], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		rest = bytes.TrimLeft(rest[1:], " \t\r\n")
		if len(rest) == 0 || rest[0] != '{' {
			continue
		}
		tries++
		var raw json.RawMessage
		if err := json.NewDecoder(bytes.NewReader(rest[:min(len(rest), maxUsageBytes)])).Decode(&raw); err != nil {
			continue // cut inside the object
		}
		var u sdk.CompletionUsage
		if err := json.Unmarshal(raw, &u); err != nil || !(u.JSON.PromptTokens.Valid() || u.JSON.CompletionTokens.Valid()) {
			continue
		}
		return u, true
	}
}

// idempotency is the Idempotency-Key header of req's call to model: a digest of
// its name outside the log (llm.Request.Outward; its key, llm.Request.Key, the
// effect key, when it has none) and the model, the same on every attempt of the
// call and when it is issued again after a crash, so a provider that
// deduplicates requests by that header performs and bills it once, and another
// deployment's call of a session of the same name at the same seq is another
// request (the key alone is unique only within one event log). The model
// is in it because a fallback to another model of the same provider is another
// request; a digest, because the key names the session, which is the user's and
// not the provider's to read. None when the call has no key. The SDK sends no such
// header of its own on chat completions.
func idempotency(req llm.Request, model string) []option.RequestOption {
	key := cmp.Or(req.Outward, req.Key)
	if key == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(key + "\x00" + model))
	return []option.RequestOption{option.WithHeader("Idempotency-Key", "troupe-"+hex.EncodeToString(sum[:16]))}
}

// params builds the chat request body.
func (m *Model) params(op string, req llm.Request) (sdk.ChatCompletionNewParams, error) {
	msgs, err := chatMessages(req.Messages)
	if err != nil {
		return sdk.ChatCompletionNewParams{}, m.who.errorf(op, "%w", err)
	}
	tools, err := toolParams(req.Tools)
	if err != nil {
		return sdk.ChatCompletionNewParams{}, m.who.errorf(op, "%w", err)
	}
	c := m.cfg
	p := sdk.ChatCompletionNewParams{Model: c.Model, Messages: msgs, Tools: tools}
	if len(tools) > 0 && c.ParallelToolCalls != nil {
		p.ParallelToolCalls = sdk.Bool(*c.ParallelToolCalls)
	}
	if c.Temperature != nil {
		p.Temperature = sdk.Float(*c.Temperature)
	}
	if c.TopP != nil {
		p.TopP = sdk.Float(*c.TopP)
	}
	if c.MaxTokens != nil {
		p.MaxTokens = sdk.Int(int64(*c.MaxTokens))
	}
	if c.Seed != nil {
		p.Seed = sdk.Int(*c.Seed)
	}
	if len(c.Stop) > 0 {
		p.Stop.OfStringArray = c.Stop
	}
	if rf := c.ResponseFormat; rf != nil {
		switch rf.Type {
		case FormatJSONObject:
			p.ResponseFormat.OfJSONObject = &shared.ResponseFormatJSONObjectParam{}
		case FormatJSONSchema:
			js := shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: rf.Name, Schema: json.RawMessage(rf.Schema)}
			if rf.Description != "" {
				js.Description = sdk.String(rf.Description)
			}
			if rf.Strict {
				js.Strict = sdk.Bool(true)
			}
			p.ResponseFormat.OfJSONSchema = &shared.ResponseFormatJSONSchemaParam{JSONSchema: js}
		}
	}
	if len(c.ExtraBody) > 0 {
		extra := make(map[string]any, len(c.ExtraBody))
		for k, v := range c.ExtraBody {
			extra[k] = v
		}
		p.SetExtraFields(extra)
	}
	return p, nil
}

// chatMessages maps the conversation to the API's message union, role by role.
func chatMessages(in []messages.ChatMessage) ([]sdk.ChatCompletionMessageParamUnion, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("%w: the conversation is empty", ErrInvalidRequest)
	}
	out := make([]sdk.ChatCompletionMessageParamUnion, 0, len(in))
	for i, m := range in {
		switch m.Role {
		case messages.RoleSystem:
			p := sdk.ChatCompletionSystemMessageParam{}
			p.Content.OfString = sdk.String(m.Content)
			if m.Name != "" {
				p.Name = sdk.String(m.Name)
			}
			out = append(out, sdk.ChatCompletionMessageParamUnion{OfSystem: &p})
		case messages.RoleUser:
			p := sdk.ChatCompletionUserMessageParam{}
			p.Content.OfString = sdk.String(m.Content)
			if m.Name != "" {
				p.Name = sdk.String(m.Name)
			}
			out = append(out, sdk.ChatCompletionMessageParamUnion{OfUser: &p})
		case messages.RoleAssistant:
			p := sdk.ChatCompletionAssistantMessageParam{}
			// An assistant turn that only calls tools has no content (null on the wire).
			if m.Content != "" || len(m.ToolCalls) == 0 {
				p.Content.OfString = sdk.String(m.Content)
			}
			if m.Name != "" {
				p.Name = sdk.String(m.Name)
			}
			for j, c := range m.ToolCalls {
				if c.ID == "" || c.Name == "" {
					return nil, fmt.Errorf("%w: message %d: tool call %d needs an id and a name", ErrInvalidRequest, i, j)
				}
				p.ToolCalls = append(p.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Arguments},
					},
				})
			}
			out = append(out, sdk.ChatCompletionMessageParamUnion{OfAssistant: &p})
		case messages.RoleTool:
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("%w: message %d: a tool result needs the tool_call_id it answers", ErrInvalidRequest, i)
			}
			p := sdk.ChatCompletionToolMessageParam{ToolCallID: m.ToolCallID}
			p.Content.OfString = sdk.String(m.Content)
			out = append(out, sdk.ChatCompletionMessageParamUnion{OfTool: &p})
		default:
			return nil, fmt.Errorf("%w: message %d has unknown role %q", ErrInvalidRequest, i, m.Role)
		}
	}
	return out, nil
}

// emptySchema is the parameters of a tool that takes none.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// toolParams maps tool specs to function definitions. Parameters is a JSON Schema
// object, sent byte for byte (compacted): the SDK's own map encoding would turn
// json.Number into strings and float64 would round big integers.
func toolParams(specs []messages.ToolSpec) ([]sdk.ChatCompletionToolUnionParam, error) {
	var out []sdk.ChatCompletionToolUnionParam
	for _, s := range specs {
		if s.Name == "" {
			return nil, fmt.Errorf("%w: a tool has no name", ErrInvalidRequest)
		}
		schema := emptySchema
		if raw := bytes.TrimSpace(s.Parameters); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
			var obj map[string]json.RawMessage
			var buf bytes.Buffer
			if json.Unmarshal(raw, &obj) != nil || obj == nil || json.Compact(&buf, raw) != nil {
				return nil, fmt.Errorf("%w: tool %q: parameters must be a JSON Schema object", ErrInvalidRequest, s.Name)
			}
			if len(obj) > 0 {
				schema = buf.Bytes()
			}
		}
		def := struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters"`
		}{s.Name, s.Description, schema}
		b, err := json.Marshal(def)
		if err != nil {
			return nil, fmt.Errorf("%w: tool %q: %w", ErrInvalidRequest, s.Name, err)
		}
		out = append(out, sdk.ChatCompletionFunctionTool(param.Override[shared.FunctionDefinitionParam](json.RawMessage(b))))
	}
	return out, nil
}

// message maps the first choice's message back. Tool calls without an id (some local
// servers omit them) get a deterministic one from the step and position. An entry
// with no id, name nor arguments is no call: the hole a stream leaves when its
// tool-call indices skip one (0, then 2).
func (m *Model) message(req llm.Request, in sdk.ChatCompletionMessage) (messages.ChatMessage, error) {
	out := messages.ChatMessage{Role: messages.RoleAssistant, Content: in.Content}
	if text, ok := partsText(in.JSON.Content.Raw()); ok {
		out.Content = text
	}
	if out.Content == "" && in.Refusal != "" {
		out.Content = in.Refusal
	}
	for i, c := range in.ToolCalls {
		if c.ID == "" && c.Function.Name == "" && c.Function.Arguments == "" {
			continue
		}
		if c.Function.Name == "" {
			return messages.ChatMessage{}, m.who.errorf("chat", "%w: tool call %d has no function name", ErrMalformedResponse, i)
		}
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", req.Step, len(out.ToolCalls)+1)
		}
		out.ToolCalls = append(out.ToolCalls, messages.ToolCall{ID: id, Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	return out, nil
}

// partsText is the text of a content the provider gave as an array of parts rather
// than a string (Mistral's reasoning models: "thinking" parts, then "text" parts):
// its "text" parts, joined; the thinking is not the answer. raw is the content's
// JSON; ok is false when it is no such array.
func partsText(raw string) (text string, ok bool) {
	raw = strings.TrimSpace(raw)
	if !strings.HasPrefix(raw, "[") {
		return "", false
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal([]byte(raw), &parts) != nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" && p.Text != nil {
			b.WriteString(*p.Text)
		}
	}
	return b.String(), true
}

// maxUsageTokens bounds a token count read from a provider's usage: 2^40, a
// thousand times any context window, so that adding millions of them stays
// within an int.
const maxUsageTokens = 1 << 40

// usage maps the provider's token counts, including cached prompt tokens
// (prompt_tokens_details.cached_tokens, or DeepSeek's prompt_cache_hit_tokens). A
// provider that reports no usage leaves it zero, for the gateway's tokenizer to fill.
// A count below zero is no count (0): it would price the answer below nothing and
// take tokens off a task's spend.
func usage(u sdk.CompletionUsage) messages.Usage {
	cached := u.PromptTokensDetails.CachedTokens
	if cached == 0 {
		if f, ok := u.JSON.ExtraFields["prompt_cache_hit_tokens"]; ok {
			cached, _ = strconv.ParseInt(f.Raw(), 10, 64)
		}
	}
	// A count is at least 0 and at most maxUsageTokens: a provider that reports
	// 1e30 tokens (read as the largest int64) would otherwise make the sums of
	// retries, budgets and quotas overflow to negative, and turn them off.
	count := func(n int64) int { return int(min(max(n, 0), maxUsageTokens)) }
	return messages.Usage{PromptTokens: count(u.PromptTokens), CompletionTokens: count(u.CompletionTokens), CachedTokens: count(cached)}
}
