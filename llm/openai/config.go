package openai

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/troupe-run/troupe/redact"
)

// DefaultTimeout bounds one call (request, response and, for Stream, the whole event
// stream) when Config.Timeout is zero.
const DefaultTimeout = 2 * time.Minute

// DefaultStreamIdleTimeout is how long Stream waits for the next byte of a stream
// whose answer began (Config.StreamIdleTimeout), when Config.StreamIdleTimeout is
// zero: far above a slow model's gap between tokens (a second or two), below
// Config.Timeout's default. A model's silence before its answer (reasoning) is
// bounded by Config.Timeout alone.
const DefaultStreamIdleTimeout = time.Minute

// StreamIdleOff as Config.StreamIdleTimeout turns the idle bound off: a stream is
// then bounded by Config.Timeout alone.
const StreamIdleOff time.Duration = math.MaxInt64

// DefaultProvider names the provider in errors and events when Config.Provider is empty.
const DefaultProvider = "openai-compatible"

// Config describes one chat model behind an OpenAI-compatible /chat/completions
// endpoint. Only BaseURL and Model are required. The client makes exactly one HTTP
// attempt per call: retries, fallback and quotas belong to the gateway above it.
type Config struct {
	// Provider names the provider in errors and events, e.g. "deepseek".
	Provider string
	// BaseURL is the API root that /chat/completions and /embeddings hang off, e.g.
	// "https://api.openai.com/v1".
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none (local servers). The Model
	// does not keep it outside the HTTP client, and Config never prints it.
	APIKey string
	// Model is the provider's model name, e.g. "gpt-4o-mini".
	Model string
	// Timeout bounds each call; 0 means DefaultTimeout. A call that runs past it fails
	// with a transient error.
	Timeout time.Duration
	// StreamIdleTimeout bounds how long Stream waits for the next byte of the
	// response once its answer began: a chunk that carried content, reasoning or
	// a tool call, or the first byte of an answer sent whole (a stream that
	// stalls, its connection open); 0 means DefaultStreamIdleTimeout,
	// StreamIdleOff none. A stream that sends nothing for that long fails with
	// ErrStalledStream, transient as a dropped connection is, and is not waited
	// for until Timeout. Any bytes are life, keepalive comments included. The
	// wait before the answer begins (the headers, a role chunk, then a reasoning
	// model's silence, minutes long) is bounded by Timeout alone. A model that
	// thinks in silence in the middle of its answer for longer needs a higher
	// one; one not below Timeout never fires.
	StreamIdleTimeout time.Duration
	// ExtraHeaders are added to every request (e.g. an organisation or a gateway tag).
	ExtraHeaders map[string]string
	// ExtraBody adds provider-specific top-level fields to every chat request, e.g.
	// {"enable_thinking": false} for Qwen models. It cannot replace the fields this
	// package sets (model, messages, tools, stream...).
	ExtraBody map[string]json.RawMessage

	// Sampling options; nil leaves the provider's default.
	Temperature *float64
	TopP        *float64
	// MaxTokens is sent as max_tokens, which every OpenAI-compatible server accepts.
	MaxTokens *int
	Seed      *int64
	Stop      []string
	// ParallelToolCalls is sent only when a request offers tools.
	ParallelToolCalls *bool
	// ResponseFormat asks for JSON output (JSON mode or a JSON Schema); nil asks for text.
	ResponseFormat *ResponseFormat

	// HTTPClient sends the requests; nil uses a client on http.DefaultTransport. Its
	// Timeout should be zero: per-call timeouts come from Timeout and the context.
	HTTPClient *http.Client
}

// ResponseFormatType selects the shape of the model's answer.
type ResponseFormatType string

// Response formats.
const (
	// FormatJSONObject is JSON mode: the answer is one JSON object. Most providers
	// require the word "JSON" to appear in the prompt.
	FormatJSONObject ResponseFormatType = "json_object"
	// FormatJSONSchema is structured output: the answer conforms to Schema.
	FormatJSONSchema ResponseFormatType = "json_schema"
)

// ResponseFormat is the response_format of a chat request.
type ResponseFormat struct {
	Type ResponseFormatType
	// Name, Description, Schema and Strict describe a FormatJSONSchema answer.
	Name        string
	Description string
	Schema      json.RawMessage
	Strict      bool
}

// JSONMode returns the response format of JSON mode.
func JSONMode() *ResponseFormat { return &ResponseFormat{Type: FormatJSONObject} }

// JSONSchema returns a strict structured-output response format.
func JSONSchema(name string, schema json.RawMessage) *ResponseFormat {
	return &ResponseFormat{Type: FormatJSONSchema, Name: name, Schema: schema, Strict: true}
}

// Validate reports what is missing or malformed.
func (c Config) Validate() error {
	if err := validateBaseURL(c.BaseURL); err != nil {
		return err
	}
	if c.Model == "" {
		return fmt.Errorf("llm/openai: %s: no model configured", c.providerName())
	}
	if err := validateHeaders(c.providerName(), c.APIKey, c.ExtraHeaders); err != nil {
		return err
	}
	if c.Timeout < 0 {
		return fmt.Errorf("llm/openai: negative timeout %s", c.Timeout)
	}
	if c.StreamIdleTimeout < 0 {
		return fmt.Errorf("llm/openai: negative stream idle timeout %s", c.StreamIdleTimeout)
	}
	if c.MaxTokens != nil && *c.MaxTokens <= 0 {
		return fmt.Errorf("llm/openai: max tokens must be positive, got %d", *c.MaxTokens)
	}
	for k, v := range c.ExtraBody {
		if reservedBodyFields[k] {
			return fmt.Errorf("llm/openai: extra body field %q is set by the client", k)
		}
		if !json.Valid(v) {
			return fmt.Errorf("llm/openai: extra body field %q is not valid JSON", k)
		}
	}
	if rf := c.ResponseFormat; rf != nil {
		switch rf.Type {
		case FormatJSONObject:
		case FormatJSONSchema:
			if rf.Name == "" {
				return fmt.Errorf("llm/openai: a JSON Schema response format needs a name")
			}
			if len(rf.Schema) == 0 || !json.Valid(rf.Schema) {
				return fmt.Errorf("llm/openai: response format %q: the schema is not valid JSON", rf.Name)
			}
		default:
			return fmt.Errorf("llm/openai: unknown response format type %q", rf.Type)
		}
	}
	return nil
}

var reservedBodyFields = map[string]bool{
	"model": true, "messages": true, "tools": true, "stream": true, "stream_options": true,
	"response_format": true, "n": true,
}

func validateBaseURL(s string) error {
	if s == "" {
		return fmt.Errorf("llm/openai: no base URL configured")
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("llm/openai: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("llm/openai: base URL %q must be an absolute http or https URL", redact.URL(s))
	}
	if u.User != nil {
		return fmt.Errorf("llm/openai: base URL must not carry credentials; use APIKey")
	}
	// The endpoint pasted for the base URL: the client adds the endpoint's path to it.
	// The base URL to give keeps the query (Azure's api-version), its secrets
	// redacted (redact.URL).
	path := strings.TrimRight(u.Path, "/")
	for _, endpoint := range []string{"/chat/completions", "/completions", "/embeddings"} {
		if strings.HasSuffix(path, endpoint) {
			base := url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimSuffix(path, endpoint), RawQuery: u.RawQuery}
			return fmt.Errorf("llm/openai: base URL ends in %s, the path this client adds to it: give the API's base URL, %q", endpoint, redact.URL(base.String()))
		}
	}
	return nil
}

// validateHeaders refuses an API key or extra header that holds a character no
// header can carry (a newline of a pasted key), which would fail every call in the
// HTTP client as a transient error. The key is never printed.
func validateHeaders(provider, key string, headers map[string]string) error {
	if !httpguts.ValidHeaderFieldValue(key) {
		return fmt.Errorf("llm/openai: %s: the API key holds a character a header cannot carry (a newline or another control character)", provider)
	}
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(headers[k]) {
			return fmt.Errorf("llm/openai: %s: extra header %q: its name or value holds a character a header cannot carry", provider, k)
		}
	}
	return nil
}

func (c Config) providerName() string {
	if c.Provider == "" {
		return DefaultProvider
	}
	return c.Provider
}

func (c Config) timeout() time.Duration {
	if c.Timeout == 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// streamIdleTimeout is the idle bound of a stream; 0 for none (StreamIdleOff).
func (c Config) streamIdleTimeout() time.Duration {
	switch c.StreamIdleTimeout {
	case 0:
		return DefaultStreamIdleTimeout
	case StreamIdleOff:
		return 0
	}
	return c.StreamIdleTimeout
}

// String describes the configuration without its API key.
func (c Config) String() string {
	key := "none"
	if c.APIKey != "" {
		key = redact.Redacted
	}
	return fmt.Sprintf("openai.Config{Provider:%s BaseURL:%s Model:%s APIKey:%s Timeout:%s}",
		c.providerName(), ShownURL(c.BaseURL), c.Model, key, c.timeout())
}

// ShownURL is a base URL as it is printed: the password of its user information
// and the value of every pair of its query replaced by redact.Redacted, for a query
// may hold a key under any name (a gateway's ?api-key=, Azure Functions' ?code=, a
// signature); its names and the rest as written.
func ShownURL(s string) string { return redact.QueryValues(redact.URL(s), nil) }

// Format makes every fmt verb (%v, %+v, %#v, %s) print String, never the key.
func (c Config) Format(f fmt.State, _ rune) { _, _ = fmt.Fprint(f, c.String()) }

// LogValue implements slog.LogValuer without the key.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("provider", c.providerName()), slog.String("base_url", ShownURL(c.BaseURL)),
		slog.String("model", c.Model), slog.Bool("api_key_set", c.APIKey != ""))
}
