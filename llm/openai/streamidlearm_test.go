package openai_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
)

// step is one write of scriptedServer: raw bytes of the event stream, flushed,
// then a pause.
type step struct {
	raw   string
	pause time.Duration
}

// scriptedServer answers every request with an event stream written as steps, and
// then holds the connection open (stall) or closes it.
func scriptedServer(t *testing.T, stall bool, steps ...step) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, s := range steps {
			_, _ = w.Write([]byte(s.raw))
			w.(http.Flusher).Flush()
			if s.pause > 0 {
				select {
				case <-time.After(s.pause):
				case <-r.Context().Done():
					return
				}
			}
		}
		if stall {
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func data(e string) string { return "data: " + e + "\n\n" }

// A reasoning model (OpenAI's o-series over chat completions) sends its headers
// and a first chunk with its role and no content at once, then nothing while it
// reasons (a minute or more), then its answer. That silence is no stall: the idle
// bound runs once a chunk carried content, reasoning or a tool call, and the
// per-request timeout bounds the wait before it. Here the silence is several
// times the idle bound; the answer comes.
func TestReasoningSilenceBeforeTheFirstContentIsNoStall(t *testing.T) {
	const idle = 100 * time.Millisecond
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"after the headers", []step{{pause: 5 * idle}, {raw: data(openaitest.RoleChunk())}}},
		{"after a role chunk", []step{{raw: data(openaitest.RoleChunk()), pause: 5 * idle}}},
		{"after keepalive comments, then silence", []step{{raw: ": keepalive\n\n"}, {raw: data(openaitest.RoleChunk()), pause: 5 * idle}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			steps := append(c.steps, step{raw: data(openaitest.ContentChunk("Hello"))},
				step{raw: data(openaitest.FinishChunk("stop"))}, step{raw: data(openaitest.Done)})
			srv := scriptedServer(t, false, steps...)
			m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "m", Timeout: time.Hour, StreamIdleTimeout: idle})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			r, err := m.Stream(ctx, llm.Request{Messages: conversation()[:2]}, nil)
			if err != nil || r.Message.Content != "Hello" {
				t.Fatalf("%+v %v: want the answer after the model's silence", r, err)
			}
		})
	}
}

// Once the answer began (content, reasoning or a tool call), a stream that sends
// nothing for the idle bound stalls; keepalive comments are life and hold it off.
func TestStallOnceTheAnswerBegan(t *testing.T) {
	const idle = 100 * time.Millisecond
	for _, c := range []struct {
		name  string
		first string
	}{
		{"content", openaitest.ContentChunk("Hel")},
		{"reasoning_content", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"thinking"}}]}`},
		{"reasoning", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning":"thinking"}}]}`},
		{"tool call", openaitest.ToolCallChunk(0, "call_1", "search", `{"q":`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := scriptedServer(t, true, step{raw: data(openaitest.RoleChunk())}, step{raw: data(c.first)})
			m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "m", Timeout: time.Hour, StreamIdleTimeout: idle})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			_, err = m.Stream(ctx, llm.Request{Messages: conversation()[:2]}, nil)
			if !errors.Is(err, openai.ErrStalledStream) || !errors.Is(err, llm.ErrTransient) || ctx.Err() != nil {
				t.Fatalf("err = %v (caller's context: %v), want ErrStalledStream before the caller's deadline", err, ctx.Err())
			}
		})
	}
	t.Run("keepalive comments mid-answer", func(t *testing.T) {
		t.Parallel()
		steps := []step{{raw: data(openaitest.RoleChunk())}, {raw: data(openaitest.ContentChunk("Hel")), pause: idle / 3}}
		for range 10 {
			steps = append(steps, step{raw: ": keepalive\n\n", pause: idle / 3})
		}
		steps = append(steps, step{raw: data(openaitest.ContentChunk("lo"))}, step{raw: data(openaitest.FinishChunk("stop"))}, step{raw: data(openaitest.Done)})
		srv := scriptedServer(t, false, steps...)
		m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "m", Timeout: time.Hour, StreamIdleTimeout: idle})
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.Stream(t.Context(), llm.Request{Messages: conversation()[:2]}, nil)
		if err != nil || r.Message.Content != "Hello" {
			t.Fatalf("%+v %v: want the answer, its keepalives taken as life", r, err)
		}
	})
}

// Before the first chunk that carries the answer, the per-request timeout bounds
// the wait: a provider that sends its headers and then nothing fails at it, as a
// timeout (transient), not as a stall.
func TestSilenceBeforeTheAnswerEndsAtTheRequestTimeout(t *testing.T) {
	srv := scriptedServer(t, true, step{raw: data(openaitest.RoleChunk())})
	m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "m", Timeout: 300 * time.Millisecond,
		StreamIdleTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = m.Stream(ctx, llm.Request{Messages: conversation()[:2]}, nil)
	if err == nil || errors.Is(err, openai.ErrStalledStream) || !errors.Is(err, llm.ErrTransient) || ctx.Err() != nil {
		t.Fatalf("err = %v, want the per-request timeout (transient), not a stall", err)
	}
}

// StreamIdleOff turns the idle bound off: a stall mid-answer is bounded by the
// per-request timeout alone.
func TestStreamIdleOff(t *testing.T) {
	srv := scriptedServer(t, false, step{raw: data(openaitest.RoleChunk())}, step{raw: data(openaitest.ContentChunk("Hel")), pause: 300 * time.Millisecond},
		step{raw: data(openaitest.ContentChunk("lo"))}, step{raw: data(openaitest.FinishChunk("stop"))}, step{raw: data(openaitest.Done)})
	m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "m", Timeout: time.Hour, StreamIdleTimeout: openai.StreamIdleOff})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Stream(t.Context(), llm.Request{Messages: conversation()[:2]}, nil)
	if err != nil || r.Message.Content != "Hello" {
		t.Fatalf("%+v %v: want the answer", r, err)
	}
}

// A stream that stalls once its answer finished (a finish_reason came, no
// [DONE]) under an idle bound shorter than answerEndGrace has given its answer:
// it is returned, not failed and sent again (which the provider would bill twice).
func TestStallAfterTheAnswerFinishedReturnsIt(t *testing.T) {
	srv := scriptedServer(t, true, step{raw: data(openaitest.RoleChunk())}, step{raw: data(openaitest.ContentChunk("Hello"))},
		step{raw: data(openaitest.FinishChunk("stop"))})
	m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "m", Timeout: time.Hour, StreamIdleTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := m.Stream(ctx, llm.Request{Messages: conversation()[:2]}, nil)
	if err != nil || r.Message.Content != "Hello" {
		t.Fatalf("%+v %v: want the finished answer", r, err)
	}
}
