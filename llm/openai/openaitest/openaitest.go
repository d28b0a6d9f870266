// Package openaitest is a fake OpenAI-compatible HTTP server for tests of code that
// talks to model providers: it records every request and answers from a script of
// replies — completions, event streams, HTTP errors with Retry-After, slow answers,
// stalled or cut-off streams, requests held open until the client goes away (to see a
// cancellation reach the provider). It never touches the network beyond loopback.
//
// A test builds a Server with a handler (often Sequence(...)), points a client at
// Server.URL, and then asserts on Server.Requests().
package openaitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// Request is one request the server received.
type Request struct {
	Method string
	// Path is the URL path, e.g. "/v1/chat/completions".
	Path string
	// Query is the URL's query, e.g. "api-version=2024-02-01".
	Query  string
	Header http.Header
	Body   []byte
}

// JSON decodes the request body, failing the test if it is not a JSON object.
func (r Request) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("openaitest: request body is not JSON: %v: %s", err, r.Body)
	}
	return m
}

// Reply is the server's answer to one request.
type Reply struct {
	// Status defaults to 200.
	Status int
	Header map[string]string
	// Body is sent as is, as application/json unless Header says otherwise.
	Body string
	// Events, when not nil, makes the reply a text/event-stream: each element is sent
	// as one "data:" event and flushed. Include Done to end the stream properly.
	Events []string
	// Pauses holds event i of Events back for Pauses[i] after the one before it
	// went out, or until the client gives up (a stream that sends slowly or pauses).
	Pauses map[int]time.Duration
	// Delay holds the reply back (before the status line) for this long, or until the
	// client gives up.
	Delay time.Duration
	// Stall keeps the connection open after Events (or Body, sent and flushed)
	// until the client gives up.
	Stall bool
	// Abort cuts the connection after Events (or Body), mid-response.
	Abort bool
	// Hold keeps the request open without answering until the client goes away (it
	// cancels the request or closes the connection), then reports the request on
	// Server.Disconnected; or until the server closes.
	Hold bool
}

// Done is the event that ends an OpenAI event stream.
const Done = "[DONE]"

// Server is a fake OpenAI-compatible API on loopback. It is closed when the test ends.
type Server struct {
	// URL is the API base URL, ending in /v1.
	URL string

	srv    *httptest.Server
	handle func(Request) Reply
	stop   chan struct{}
	gone   chan Request

	mu   sync.Mutex
	reqs []Request
}

// NewServer starts a server that answers every request with handle(request). handle
// may be called concurrently.
func NewServer(t testing.TB, handle func(Request) Reply) *Server {
	t.Helper()
	s := &Server{handle: handle, stop: make(chan struct{}), gone: make(chan Request, 64)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/v1"
	t.Cleanup(func() {
		close(s.stop)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

// Requests returns the requests received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Disconnected receives every held request (Reply.Hold) once its client went away:
// the client cancelled it or closed its connection. (It keeps the latest 64 unread.)
func (s *Server) Disconnected() <-chan Request { return s.gone }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	rep := s.handle(req)
	if rep.Hold {
		select {
		case <-r.Context().Done():
			select {
			case s.gone <- req:
			default:
			}
		case <-s.stop:
		}
		return
	}
	if rep.Delay > 0 {
		t := time.NewTimer(rep.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.stop:
			return
		}
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	status := rep.Status
	if status == 0 {
		status = http.StatusOK
	}
	if rep.Events == nil {
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, rep.Body)
		if rep.Abort || rep.Stall {
			if flusher, ok := w.(http.Flusher); ok {
				flusher.Flush()
			}
			s.cutOrStall(r, rep)
		}
		return
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/event-stream")
	}
	w.WriteHeader(status)
	flusher, _ := w.(http.Flusher)
	for i, e := range rep.Events {
		if d := rep.Pauses[i]; d > 0 && !s.pause(r, d) {
			return
		}
		_, _ = fmt.Fprintf(w, "data: %s\n\n", e)
		if flusher != nil {
			flusher.Flush()
		}
	}
	s.cutOrStall(r, rep)
}

// cutOrStall ends a reply whose body went out as rep says: cut (Abort), or held
// open until the client of r goes away or the server closes (Stall).
func (s *Server) cutOrStall(r *http.Request, rep Reply) {
	switch {
	case rep.Abort:
		panic(http.ErrAbortHandler)
	case rep.Stall:
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
	}
}

// pause waits for d, or until the client of r goes away or the server closes; it
// reports whether d went by.
func (s *Server) pause(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-s.stop:
	}
	return false
}

// Sequence answers the n-th request with replies[n]; once they run out it answers
// 500 with a message saying so.
func Sequence(replies ...Reply) func(Request) Reply {
	var mu sync.Mutex
	next := 0
	return func(Request) Reply {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(replies) {
			return Error(http.StatusInternalServerError, "openaitest: no more scripted replies")
		}
		next++
		return replies[next-1]
	}
}

// Error is an OpenAI-shaped error reply; header holds key, value pairs (e.g.
// "Retry-After", "2").
func Error(status int, message string, header ...string) Reply {
	h := map[string]string{}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	return Reply{Status: status, Header: h, Body: mustJSON(map[string]any{
		"error": map[string]any{"message": message, "type": "fake_error", "code": nil},
	})}
}

// Completion is a chat.completion reply carrying msg (content and tool calls) and u
// (CachedTokens goes to prompt_tokens_details.cached_tokens).
func Completion(msg messages.ChatMessage, u messages.Usage) Reply {
	return Reply{Body: CompletionJSON(msg, u)}
}

// CompletionJSON is the body of Completion.
func CompletionJSON(msg messages.ChatMessage, u messages.Usage) string {
	m := map[string]any{"role": "assistant", "content": msg.Content}
	finish := "stop"
	if len(msg.ToolCalls) > 0 {
		finish = "tool_calls"
		if msg.Content == "" {
			m["content"] = nil
		}
		var calls []any
		for _, c := range msg.ToolCalls {
			calls = append(calls, map[string]any{"id": c.ID, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		m["tool_calls"] = calls
	}
	return mustJSON(map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000, "model": "fake-model",
		"choices": []any{map[string]any{"index": 0, "message": m, "finish_reason": finish, "logprobs": nil}},
		"usage":   usageJSON(u),
	})
}

func usageJSON(u messages.Usage) map[string]any {
	return map[string]any{
		"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens,
		"total_tokens":          u.PromptTokens + u.CompletionTokens,
		"prompt_tokens_details": map[string]any{"cached_tokens": u.CachedTokens},
	}
}

// Stream is an event-stream reply of the given events.
func Stream(events ...string) Reply { return Reply{Events: append([]string{}, events...)} }

func chunk(delta map[string]any, finish any) string {
	return mustJSON(map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": "fake-model",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
	})
}

// RoleChunk opens an assistant message.
func RoleChunk() string { return chunk(map[string]any{"role": "assistant", "content": ""}, nil) }

// ContentChunk carries a piece of the answer's text.
func ContentChunk(s string) string { return chunk(map[string]any{"content": s}, nil) }

// ToolCallChunk carries a piece of tool call index: id and name are usually sent with
// the first piece only (pass "" to omit them), args is the next piece of arguments.
func ToolCallChunk(index int, id, name, args string) string {
	tc := map[string]any{"index": index, "function": map[string]any{"arguments": args}}
	if id != "" {
		tc["id"], tc["type"] = id, "function"
	}
	if name != "" {
		tc["function"].(map[string]any)["name"] = name
	}
	return chunk(map[string]any{"tool_calls": []any{tc}}, nil)
}

// FinishChunk ends the choice with a finish_reason ("stop", "tool_calls", "length").
func FinishChunk(reason string) string { return chunk(map[string]any{}, reason) }

// UsageChunk is the final, choice-less chunk sent with stream_options.include_usage.
func UsageChunk(u messages.Usage) string {
	return mustJSON(map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": "fake-model",
		"choices": []any{}, "usage": usageJSON(u),
	})
}

// TextStream is a complete stream answering text in the given pieces, with usage.
func TextStream(u messages.Usage, pieces ...string) Reply {
	ev := []string{RoleChunk()}
	for _, p := range pieces {
		ev = append(ev, ContentChunk(p))
	}
	return Stream(append(ev, FinishChunk("stop"), UsageChunk(u), Done)...)
}

// Models is the reply of GET /models listing the given model ids.
func Models(ids ...string) Reply {
	var data []any
	for _, id := range ids {
		data = append(data, map[string]any{"id": id, "object": "model", "owned_by": "fake"})
	}
	return Reply{Body: mustJSON(map[string]any{"object": "list", "data": data})}
}

// EmbeddingsJSON is an /embeddings body with the given vectors, listed in the order
// given by order (indices into vectors), to check that clients place vectors by index.
func EmbeddingsJSON(vectors [][]float64, order []int) string {
	var data []any
	for _, i := range order {
		data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": vectors[i]})
	}
	return mustJSON(map[string]any{"object": "list", "model": "fake-embedding", "data": data,
		"usage": map[string]any{"prompt_tokens": len(vectors), "total_tokens": len(vectors)}})
}

// Is reports whether r is for the endpoint with the given suffix, e.g.
// "/chat/completions".
func (r Request) Is(suffix string) bool { return strings.HasSuffix(r.Path, suffix) }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of JSON values are encoded here
	}
	return string(b)
}
