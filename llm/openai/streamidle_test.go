package openai_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// stallingServer answers every request with an event stream's headers and the
// events given, flushed, then sends nothing with the connection open until the
// client goes away.
func stallingServer(t *testing.T, events ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, e := range events {
			_, _ = w.Write([]byte("data: " + e + "\n\n"))
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A provider that takes a streaming request, sends its headers (and perhaps a first
// chunk) and then nothing, its connection open, held the call until Config.Timeout
// (here an hour, past the caller's deadline). It fails once nothing came for
// Config.StreamIdleTimeout, with ErrStalledStream, transient as a dropped
// connection is, and before the caller's deadline.
func TestStreamThatStallsFailsAtItsIdleTimeout(t *testing.T) {
	for _, c := range []struct {
		name   string
		events []string
	}{
		// Silence after the headers alone is a model reasoning before its answer,
		// bounded by Config.Timeout (TestSilenceBeforeTheAnswerEndsAtTheRequestTimeout).
		{"after a first chunk", []string{openaitest.RoleChunk(), openaitest.ContentChunk("Hel")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := stallingServer(t, c.events...)
			m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "m", Timeout: time.Hour,
				StreamIdleTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			_, err = m.Stream(ctx, llm.Request{Messages: conversation()[:2]}, nil)
			if !errors.Is(err, openai.ErrStalledStream) || !errors.Is(err, llm.ErrTransient) || ctx.Err() != nil {
				t.Fatalf("err = %v (caller's context: %v), want ErrStalledStream, transient, before the caller's deadline", err, ctx.Err())
			}
		})
	}
}

// A stream that stalls is retried by the gateway as a dropped connection is: the
// second attempt answers, and it is the same request (the same Idempotency-Key),
// so the provider performs and bills the call once.
func TestGatewayRetriesAStalledStream(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Reply{Events: []string{openaitest.RoleChunk(), openaitest.ContentChunk("Hel")}, Stall: true},
		openaitest.TextStream(messages.Usage{PromptTokens: 3, CompletionTokens: 1}, "Hello"),
	))
	m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "m", Timeout: time.Hour,
		StreamIdleTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Retry: gateway.RetryPolicy{MaxAttempts: 2},
		Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ctx = llm.WithDeltas(ctx, func(int, llm.Delta) {})
	r, err := g.Generate(ctx, llm.Request{Key: "s/1", Step: 1, Messages: conversation()[:2]})
	if err != nil || r.Message.Content != "Hello" {
		t.Fatalf("%+v %v: want the second attempt's answer", r, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	k0, k1 := reqs[0].Header.Get("Idempotency-Key"), reqs[1].Header.Get("Idempotency-Key")
	if k0 == "" || k0 != k1 {
		t.Fatalf("Idempotency-Key %q then %q: want one key for both attempts", k0, k1)
	}
}

// A response that comes slowly but steadily is no stall, however long it takes
// in all: an event stream whose chunks each come within the idle bound, and a
// whole JSON answer (a server that does not stream) sent a byte at a time.
func TestSlowSteadyResponsesDoNotStall(t *testing.T) {
	const idle = 500 * time.Millisecond
	t.Run("event stream", func(t *testing.T) {
		t.Parallel()
		pieces := make([]string, 40)
		events := []string{openaitest.RoleChunk()}
		pauses := map[int]time.Duration{}
		for i := range pieces {
			pieces[i] = "a"
			pauses[len(events)] = 20 * time.Millisecond
			events = append(events, openaitest.ContentChunk("a"))
		}
		events = append(events, openaitest.FinishChunk("stop"), openaitest.Done)
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Events: events, Pauses: pauses}))
		m := newModel(t, srv, func(c *openai.Config) { c.Timeout = time.Hour; c.StreamIdleTimeout = idle })
		r, err := m.Stream(t.Context(), llm.Request{Messages: conversation()[:2]}, nil)
		if err != nil || len(r.Message.Content) != len(pieces) {
			t.Fatalf("%+v %v: want the whole answer", r, err)
		}
	})
	body := openaitest.CompletionJSON(messages.ChatMessage{Role: messages.RoleAssistant, Content: "Hello"}, messages.Usage{PromptTokens: 3, CompletionTokens: 1})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for i := range len(body) {
			_, _ = w.Write([]byte{body[i]})
			w.(http.Flusher).Flush()
			select {
			case <-time.After(5 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "m", Timeout: time.Hour, StreamIdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func() (llm.Response, error)
	}{
		{"whole answer to a stream", func() (llm.Response, error) {
			return m.Stream(t.Context(), llm.Request{Messages: conversation()[:2]}, nil)
		}},
		{"whole answer", func() (llm.Response, error) {
			return m.Generate(t.Context(), llm.Request{Messages: conversation()[:2]})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := c.call()
			if err != nil || r.Message.Content != "Hello" {
				t.Fatalf("%+v %v: want the answer", r, err)
			}
		})
	}
}

// A negative idle bound is refused.
func TestNegativeStreamIdleTimeoutIsRefused(t *testing.T) {
	_, err := openai.New(openai.Config{BaseURL: "http://127.0.0.1:1/v1", Model: "m", StreamIdleTimeout: -time.Second})
	if err == nil {
		t.Fatal("a negative StreamIdleTimeout was taken")
	}
}

// A server that answers a stream whole (a JSON chat completion) and stalls in the
// middle of its body fails as a stalled stream does.
func TestStreamAnsweredWholeThatStallsFailsAtItsIdleTimeout(t *testing.T) {
	body := openaitest.CompletionJSON(messages.ChatMessage{Role: messages.RoleAssistant, Content: "Hello"}, messages.Usage{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(body[:len(body)/2]))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "m", Timeout: time.Hour,
		StreamIdleTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = m.Stream(ctx, llm.Request{Messages: conversation()[:2]}, nil)
	if !errors.Is(err, openai.ErrStalledStream) || !errors.Is(err, llm.ErrTransient) || ctx.Err() != nil {
		t.Fatalf("err = %v (caller's context: %v), want ErrStalledStream, transient, before the caller's deadline", err, ctx.Err())
	}
}
