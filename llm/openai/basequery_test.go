package openai_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// The query of a base URL (Azure's api-version, a gateway's ?key=) goes with every
// request, chat, stream and embeddings: the SDK resolved each endpoint's path
// against the base URL, which dropped its query, so the server refused every call
// (a 404 or a 401) though the base URL was right.
func TestBaseURLQueryIsSent(t *testing.T) {
	const query = "api-version=2024-02-01&tag=a&tag=b"
	srv := openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
		if r.Query != query {
			return openaitest.Error(404, "Resource not found: query "+r.Query)
		}
		if r.Is("/embeddings") {
			return openaitest.Reply{Body: openaitest.EmbeddingsJSON([][]float64{{1, 0}}, []int{0})}
		}
		if r.JSON(t)["stream"] == true {
			return openaitest.TextStream(messages.Usage{}, "streamed")
		}
		return openaitest.Completion(messages.ChatMessage{Content: "whole"}, messages.Usage{})
	})
	m := newModel(t, srv, func(c *openai.Config) { c.BaseURL += "/?" + query })
	req := llm.Request{Messages: conversation()[:2]}
	if r, err := m.Generate(deadline(t), req); err != nil || r.Message.Content != "whole" {
		t.Fatalf("generate: %+v, %v", r, err)
	}
	if r, err := m.Stream(deadline(t), req, nil); err != nil || r.Message.Content != "streamed" {
		t.Fatalf("stream: %+v, %v", r, err)
	}
	e, err := openai.NewEmbedder(openai.EmbedderConfig{Provider: "fake", BaseURL: srv.URL + "?" + query, Model: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Embed(deadline(t), []string{"x"}); err != nil {
		t.Fatalf("embed: %v", err)
	}
	for _, r := range srv.Requests() {
		if r.Path != "/v1/chat/completions" && r.Path != "/v1/embeddings" {
			t.Errorf("path %q", r.Path)
		}
	}
}

// The query of a base URL arrives byte for byte as the base URL writes it: decoded
// and encoded again, its pairs were sorted, a signature's %2F%3D%3D and a %20
// rewritten, a bare flag given an "=", and a pair holding a ';' dropped without a
// word, any of which a server that checks a signature over its query refuses.
func TestBaseURLQueryIsSentVerbatim(t *testing.T) {
	const query = "flag&sig=ab%2F%3D%3D&x=a;b&z=a%20b"
	srv := openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
		if r.Is("/embeddings") {
			return openaitest.Reply{Body: openaitest.EmbeddingsJSON([][]float64{{1, 0}}, []int{0})}
		}
		if r.JSON(t)["stream"] == true {
			return openaitest.TextStream(messages.Usage{}, "streamed")
		}
		return openaitest.Completion(messages.ChatMessage{Content: "whole"}, messages.Usage{})
	})
	m := newModel(t, srv, func(c *openai.Config) { c.BaseURL += "?" + query })
	req := llm.Request{Messages: conversation()[:2]}
	if _, err := m.Generate(deadline(t), req); err != nil {
		t.Fatalf("generate: %v", err)
	}
	if _, err := m.Stream(deadline(t), req, nil); err != nil {
		t.Fatalf("stream: %v", err)
	}
	e, err := openai.NewEmbedder(openai.EmbedderConfig{Provider: "fake", BaseURL: srv.URL + "?" + query, Model: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Embed(deadline(t), []string{"x"}); err != nil {
		t.Fatalf("embed: %v", err)
	}
	if got := srv.Requests(); len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	for _, r := range srv.Requests() {
		if r.Query != query {
			t.Errorf("%s got query %q, want %q", r.Path, r.Query, query)
		}
	}
}

// A transport error does not show the base URL's query: Go's HTTP client names the
// request's whole URL in it, and the query may hold a secret under any name (a
// gateway's ?key=, Azure Functions' ?code=), which chat, stream and embeddings
// errors carried as they were.
func TestTransportErrorHidesBaseURLQuery(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there: every call is refused
	const secrets = "key=QSECRET1234567890abc&code=azfnCODE987654321&flag"
	base := "http://" + closed + "/v1?" + secrets
	m, err := openai.New(openai.Config{Provider: "fake", BaseURL: base, Model: "m", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e, err := openai.NewEmbedder(openai.EmbedderConfig{Provider: "fake", BaseURL: base, Model: "e"})
	if err != nil {
		t.Fatal(err)
	}
	req := llm.Request{Messages: conversation()[:2]}
	_, genErr := m.Generate(deadline(t), req)
	_, streamErr := m.Stream(deadline(t), req, nil)
	_, embedErr := e.Embed(deadline(t), []string{"x"})
	for op, err := range map[string]error{"generate": genErr, "stream": streamErr, "embed": embedErr} {
		if !errors.Is(err, llm.ErrTransient) {
			t.Errorf("%s: %v, want a transient error", op, err)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "QSECRET") || strings.Contains(msg, "azfnCODE") || strings.Contains(msg, "flag") {
			t.Errorf("%s: %s: the query shows", op, msg)
		}
		if !strings.Contains(msg, closed) {
			t.Errorf("%s: %s: the URL is not named", op, msg)
		}
	}
}
