package openai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

func generate(t *testing.T, m *openai.Model) error {
	t.Helper()
	_, err := m.Generate(deadline(t), llm.Request{Step: 1, Messages: conversation()[:2]})
	if err == nil {
		t.Fatal("expected an error")
	}
	return err
}

func apiError(t *testing.T, err error) *llm.APIError {
	t.Helper()
	var api *llm.APIError
	if !errors.As(err, &api) {
		t.Fatalf("%v (%T) is not an *llm.APIError", err, err)
	}
	return api
}

func TestHTTPErrorsBecomeAPIErrors(t *testing.T) {
	date := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		name      string
		reply     openaitest.Reply
		status    int
		transient bool
		minRetry  time.Duration
		maxRetry  time.Duration
		message   string
	}{
		{"429 retry-after seconds", openaitest.Error(429, "Rate limit reached", "Retry-After", "7"), 429, true, 7 * time.Second, 7 * time.Second, "Rate limit reached"},
		{"429 retry-after date", openaitest.Error(429, "slow down", "Retry-After", date), 429, true, 20 * time.Second, 30 * time.Second, "slow down"},
		{"429 retry-after-ms", openaitest.Error(429, "slow down", "Retry-After-Ms", "1500", "Retry-After", "9"), 429, true, 1500 * time.Millisecond, 1500 * time.Millisecond, "slow down"},
		{"429 rate-limit reset", openaitest.Error(429, "tokens", "X-Ratelimit-Remaining-Tokens", "0", "X-Ratelimit-Reset-Tokens", "6m0s"), 429, true, 6 * time.Minute, 6 * time.Minute, "tokens"},
		{"500", openaitest.Error(500, "The server had an error"), 500, true, 0, 0, "The server had an error"},
		{"503 retry-after", openaitest.Error(503, "overloaded", "Retry-After", "2"), 503, true, 2 * time.Second, 2 * time.Second, "overloaded"},
		{"400", openaitest.Error(400, "Invalid 'messages[1].role'"), 400, false, 0, 0, "Invalid 'messages[1].role'"},
		{"401", openaitest.Error(401, "Incorrect API key provided"), 401, false, 0, 0, "Incorrect API key provided"},
		{"404 plain text", openaitest.Reply{Status: 404, Header: map[string]string{"Content-Type": "text/plain"}, Body: "404 page not found\n"}, 404, false, 0, 0, "404 page not found"},
		{"502 html", openaitest.Reply{Status: 502, Header: map[string]string{"Content-Type": "text/html"}, Body: "<html><body>Bad Gateway</body></html>"}, 502, true, 0, 0, "<html><body>Bad Gateway</body></html>"},
		{"error as string", openaitest.Reply{Status: 422, Body: `{"error":"model 'x' not found"}`}, 422, false, 0, 0, "model 'x' not found"},
		{"detail", openaitest.Reply{Status: 400, Body: `{"detail":"bad things"}`}, 400, false, 0, 0, "bad things"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(c.reply))
			err := generate(t, newModel(t, srv))
			api := apiError(t, err)
			if api.StatusCode != c.status || api.Provider != "fake" || api.Model != "fake-model" || api.Message != c.message {
				t.Fatalf("got %+v", api)
			}
			if errors.Is(err, llm.ErrTransient) != c.transient {
				t.Fatalf("transient = %v, want %v: %v", !c.transient, c.transient, err)
			}
			if api.RetryAfter < c.minRetry || api.RetryAfter > c.maxRetry {
				t.Fatalf("RetryAfter %s, want in [%s, %s]", api.RetryAfter, c.minRetry, c.maxRetry)
			}
			if d, ok := llm.RetryAfter(err); ok != (c.maxRetry > 0) || d != api.RetryAfter {
				t.Fatalf("llm.RetryAfter = %s %v", d, ok)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Fatalf("%d attempts: the client must not retry (the gateway does)", n)
			}
		})
	}
}

func TestTimeoutIsTransient(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Delay: time.Minute, Body: "{}"}))
	m := newModel(t, srv, func(c *openai.Config) { c.Timeout = 100 * time.Millisecond })
	// generate's own 10s deadline would surface as a non-transient context error:
	// a transient DeadlineExceeded proves the call timeout fired first.
	err := generate(t, m)
	if !errors.Is(err, llm.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v: want transient and DeadlineExceeded", err)
	}
	var api *llm.APIError
	if errors.As(err, &api) {
		t.Fatalf("a timeout is not an API error: %v", err)
	}
}

func TestCancellationIsNotTransient(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Delay: time.Minute, Body: "{}"}))
	m := newModel(t, srv)
	ctx, cancel := context.WithCancel(deadline(t))
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := m.Generate(ctx, llm.Request{Step: 1, Messages: conversation()[:2]})
	if !errors.Is(err, context.Canceled) || errors.Is(err, llm.ErrTransient) {
		t.Fatalf("%v: want context.Canceled, not transient", err)
	}
	// Already cancelled: no request at all.
	n := len(srv.Requests())
	if _, err := m.Generate(ctx, llm.Request{Step: 1, Messages: conversation()[:2]}); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if len(srv.Requests()) != n {
		t.Fatal("a cancelled call was sent")
	}
}

func TestMalformedResponses(t *testing.T) {
	for name, body := range map[string]string{
		"truncated json": `{"id":"x","choices":[{"index":0,"message":{"role":"assist`,
		"not json":       `<html>hello</html>`,
		"no choices":     `{"id":"x","object":"chat.completion","choices":[]}`,
		"empty object":   `{}`,
		"nameless call":  `{"choices":[{"index":0,"message":{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Body: body}))
			err := generate(t, newModel(t, srv))
			if !errors.Is(err, openai.ErrMalformedResponse) || errors.Is(err, llm.ErrTransient) {
				t.Fatalf("%v: want ErrMalformedResponse, not transient", err)
			}
			if !strings.Contains(err.Error(), "fake fake-model") {
				t.Fatalf("the error does not name the provider and model: %v", err)
			}
		})
	}
}

func TestConnectionFailuresAreTransient(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence())
	m := newModel(t, srv, func(c *openai.Config) { c.BaseURL = "http://127.0.0.1:1/v1" })
	err := generate(t, m)
	if !errors.Is(err, llm.ErrTransient) {
		t.Fatalf("connection refused: %v: want transient", err)
	}
}

func TestKeyNeverPrinted(t *testing.T) {
	// A provider that echoes the key back in its error message.
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Error(401, "Incorrect API key provided: "+testKey)))
	m := newModel(t, srv)
	err := generate(t, m)
	cfg := openai.Config{BaseURL: srv.URL, APIKey: testKey, Model: "m"}
	emb, e := openai.NewEmbedder(openai.EmbedderConfig{BaseURL: srv.URL, APIKey: testKey, Model: "e"})
	if e != nil {
		t.Fatal(e)
	}
	var out strings.Builder
	for _, v := range []any{err, cfg, &cfg, m, *m, emb, *emb, openai.EmbedderConfig{APIKey: testKey}} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
	}
	out.WriteString(err.Error())
	if strings.Contains(out.String(), testKey) {
		t.Fatalf("the key leaked:\n%s", out.String())
	}
	if !strings.Contains(apiError(t, err).Message, "[REDACTED]") {
		t.Fatalf("message %q", apiError(t, err).Message)
	}
}

// A success that is not JSON (a proxy's HTML page, a base URL that is not the
// API's) says what came and where to look, not the SDK's words about Go types;
// the key in it is redacted. JSON under another JSON type, or none, is read.
func TestAnswerThatIsNotJSONSaysWhatCame(t *testing.T) {
	page := "<html>\n<body>Sign in to the proxy, key " + testKey + "</body></html>"
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Reply{Header: map[string]string{"Content-Type": "text/html; charset=utf-8"}, Body: page},
		openaitest.Reply{Header: map[string]string{"Content-Type": "text/plain"}, Body: openaitest.CompletionJSON(messages.ChatMessage{Content: "hi"}, messages.Usage{})},
		openaitest.Reply{Header: map[string]string{"Content-Type": "application/vnd.api+json"}, Body: openaitest.CompletionJSON(messages.ChatMessage{Content: "hi"}, messages.Usage{})},
	))
	m := newModel(t, srv)
	err := generate(t, m)
	if !errors.Is(err, openai.ErrMalformedResponse) || errors.Is(err, llm.ErrTransient) ||
		!strings.Contains(err.Error(), `answered HTTP 200 with Content-Type "text/html; charset=utf-8", not JSON`) ||
		!strings.Contains(err.Error(), `"<html> <body>Sign in to the proxy, key [REDACTED]</body></html>"`) || strings.Contains(err.Error(), testKey) {
		t.Fatalf("html: %v", err)
	}
	if err := generate(t, m); !errors.Is(err, openai.ErrMalformedResponse) || !strings.Contains(err.Error(), `Content-Type "text/plain", not JSON`) {
		t.Fatalf("text/plain: %v", err)
	}
	if r, err := m.Generate(deadline(t), llm.Request{Messages: conversation()}); err != nil || r.Message.Content != "hi" {
		t.Fatalf("+json: %+v %v", r, err)
	}
}

// An HTTP error's message is quoted as any other (redacted, then clipped to some
// 300 bytes): one the SDK parsed from a body of 60 KiB came whole into the error,
// and so into the session's events, where the same body read by this client's
// own parser (a shape the SDK does not know) was clipped.
func TestHTTPErrorMessageIsClipped(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Error(400, strings.Repeat("é", 30<<10))))
	err := generate(t, newModel(t, srv))
	msg := apiError(t, err).Message
	if len(msg) > 400 || !strings.HasPrefix(msg, "éé") || !strings.HasSuffix(msg, "…") || len(err.Error()) > 1<<10 {
		t.Fatalf("message of %d bytes, error of %d: %.40q", len(msg), len(err.Error()), msg)
	}
}
