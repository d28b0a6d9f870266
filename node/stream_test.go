package node_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// tokens are n pieces of streamed text, "tok0 " to "tok<n-1> ".
func tokens(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "tok" + strconv.Itoa(i) + " "
	}
	return out
}

// cutStream is a stream of the first n pieces that the connection cuts mid-answer.
func cutStream(pieces []string) openaitest.Reply {
	ev := []string{openaitest.RoleChunk()}
	for _, p := range pieces {
		ev = append(ev, openaitest.ContentChunk(p))
	}
	return openaitest.Reply{Events: ev, Abort: true}
}

// streamingNode runs a node whose model is a fake OpenAI-compatible provider: a
// request that does not ask to stream, or whose task is "warm up", is answered
// "warm" at once, and the n-th other one (from 0) gets streams(n). Retries wait a
// millisecond, at most attempts of them.
func streamingNode(t *testing.T, attempts int, streams func(n int) openaitest.Reply) (*node.Node, *openaitest.Server) {
	t.Helper()
	srv := streamingProvider(t, streams)
	m, err := openai.New(openai.Config{Provider: "fake", BaseURL: srv.URL, Model: "fake-model", Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Model: m, Gateway: gateway.Config{
		Retry: gateway.RetryPolicy{MaxAttempts: attempts, Initial: time.Millisecond, Max: time.Millisecond}}})
	return n, srv
}

// streamingProvider is a fake OpenAI-compatible provider: a request that does not
// ask to stream, or whose last user message is "warm up", is answered "warm" at
// once, and the n-th other one (from 0) gets streams(n).
func streamingProvider(t *testing.T, streams func(n int) openaitest.Reply) *openaitest.Server {
	t.Helper()
	var mu sync.Mutex
	streamed := 0
	return openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
		body := r.JSON(t)
		stream, _ := body["stream"].(bool)
		warm := messages.Usage{PromptTokens: 5, CompletionTokens: 1}
		switch {
		case !stream:
			return openaitest.Completion(messages.ChatMessage{Role: messages.RoleAssistant, Content: "warm"}, warm)
		case lastUserText(body) == "warm up":
			return openaitest.TextStream(warm, "warm")
		}
		mu.Lock()
		i := streamed
		streamed++
		mu.Unlock()
		return streams(i)
	})
}

// lastUserText is the text of the last user message of a chat completion request.
func lastUserText(body map[string]any) string {
	msgs, _ := body["messages"].([]any)
	for i := len(msgs) - 1; i >= 0; i-- {
		if m, _ := msgs[i].(map[string]any); m["role"] == "user" {
			text, _ := m["content"].(string)
			return text
		}
	}
	return ""
}

// scanSSE reads Server-Sent Events from body until it ends or event returns false,
// handing each named event its name, id and data (one data line); it closes body.
func scanSSE(body io.ReadCloser, event func(name, id, data string) bool) {
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var name, id, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if name != "" && !event(name, id, data) {
				return
			}
			name, id, data = "", "", ""
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "event: "):
			name = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
}

// sseEvent is one Server-Sent Event of a session's stream, its data decoded.
type sseEvent struct {
	id   string
	name string
	env  messages.Envelope
}

// openStream opens GET /v1/sessions/{id}/stream after seq last and returns its events
// as they come; the stream is subscribed when it returns.
func openStream(t *testing.T, ctx context.Context, base, session string, last uint64) <-chan sseEvent {
	t.Helper()
	return openStreamAt(t, ctx, base+"/v1/sessions/"+session+"/stream", last)
}

// openStreamAt is openStream of the stream at url.
func openStreamAt(t *testing.T, ctx context.Context, url string, last uint64) <-chan sseEvent {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Last-Event-ID", strconv.FormatUint(last, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %s", resp.Status)
	}
	out := make(chan sseEvent, 1024)
	go func() {
		defer close(out)
		scanSSE(resp.Body, func(name, id, data string) bool {
			ev := sseEvent{id: id, name: name}
			if data != "" {
				e, err := messages.Unmarshal([]byte(data))
				if err != nil {
					t.Errorf("stream data: %v: %s", err, data)
					return false
				}
				ev.env = e
			}
			out <- ev
			return true
		})
	}()
	return out
}

// streamTask opens session's stream after seq last, submits input to it through n,
// and returns what the stream shows until the task ends.
func streamTask(t *testing.T, ctx context.Context, base string, n *node.Node, session string, last uint64, input string) []sseEvent {
	t.Helper()
	events := openStream(t, ctx, base, session, last)
	if _, err := n.Submit(ctx, node.Task{Input: input, SessionID: session}); err != nil {
		t.Fatal(err)
	}
	return untilDone(t, ctx, events)
}

// untilDone reads a stream until the task ends, and returns what it read.
func untilDone(t *testing.T, ctx context.Context, events <-chan sseEvent) []sseEvent {
	t.Helper()
	var got []sseEvent
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before the task; read %d events", len(got))
			}
			got = append(got, e)
			if e.name == string(messages.TypeTaskCompleted) || e.name == string(messages.TypeTaskFailed) {
				return got
			}
		case <-ctx.Done():
			t.Fatalf("the task did not end: %v; read %d events", ctx.Err(), len(got))
		}
	}
}

// warmSession runs a first task on a session (its model call does not stream: nobody
// watches for deltas) and returns the seq of its last event.
func warmSession(t *testing.T, n *node.Node, session string) uint64 {
	t.Helper()
	events := nodetest.Run(t, n, session, "warm up")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("warm-up: %s %s", last.Type, last.Payload)
	}
	for _, e := range events {
		if e.Type == messages.TypeModelDelta {
			t.Fatalf("the log holds a delta: %s", e.Payload)
		}
	}
	return events[len(events)-1].Seq
}

// deltasOf decodes the model.delta events of a stream, in order.
func deltasOf(t *testing.T, got []sseEvent) []*messages.ModelDelta {
	t.Helper()
	var out []*messages.ModelDelta
	for _, e := range got {
		if e.name != string(messages.TypeModelDelta) {
			continue
		}
		if e.id != "" {
			t.Errorf("a delta has an id (%s): Last-Event-ID must stay a seq", e.id)
		}
		p, err := e.env.Decode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.(*messages.ModelDelta))
	}
	return out
}

// respondedAfter returns the model.responded events of the log after seq, and fails
// the test on any delta in the log.
func respondedAfter(t *testing.T, n *node.Node, session string, seq uint64) []*messages.ModelResponded {
	t.Helper()
	events, err := n.Log().Read(context.Background(), session, seq+1)
	if err != nil {
		t.Fatal(err)
	}
	var out []*messages.ModelResponded
	for _, e := range events {
		switch e.Type {
		case messages.TypeModelDelta:
			t.Fatalf("the log holds a delta: %s", e.Payload)
		case messages.TypeModelResponded:
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p.(*messages.ModelResponded))
		}
	}
	return out
}

// A provider streaming 100 tokens: an SSE client of the session sees 100 model.delta
// events in order, after the call's model.requested, then its model.responded whole;
// the log holds that one whole answer and no delta.
func TestSSEStreamsModelDeltasThenTheWholeAnswer(t *testing.T) {
	pieces := tokens(100)
	n, _ := streamingNode(t, 0, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	api := httptest.NewServer(n.Handler())
	defer api.Close()
	last := warmSession(t, n, "stream-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := streamTask(t, ctx, api.URL, n, "stream-1", last, "count to 100")

	var order []string
	for _, e := range got {
		if e.name != string(messages.TypeModelDelta) || len(order) == 0 || order[len(order)-1] != "delta" {
			order = append(order, map[bool]string{true: "delta", false: e.name}[e.name == string(messages.TypeModelDelta)])
		}
	}
	if want := "task.submitted model.requested delta model.responded task.completed"; strings.Join(order, " ") != want {
		t.Fatalf("stream order: %v, want %s", order, want)
	}
	deltas := deltasOf(t, got)
	if len(deltas) != 100 {
		t.Fatalf("%d deltas, want 100", len(deltas))
	}
	var requested *messages.ModelRequested
	for _, e := range got {
		if e.name == string(messages.TypeModelRequested) {
			p, _ := e.env.Decode()
			requested = p.(*messages.ModelRequested)
		}
	}
	for i, d := range deltas {
		if d.Seq != uint64(i+1) || d.Content != pieces[i] || d.Attempt != 1 || d.Reset || d.Key != requested.Key || d.Step != requested.Step {
			t.Fatalf("delta %d: %+v (call %s step %d)", i, d, requested.Key, requested.Step)
		}
	}
	resp := respondedAfter(t, n, "stream-1", last)
	if len(resp) != 1 || resp[0].Message.Content != strings.Join(pieces, "") || resp[0].Error != "" || resp[0].Key != requested.Key {
		t.Fatalf("recorded answers: %+v", resp)
	}
}

// A stream the connection cuts mid-answer is retried by the gateway: the deltas
// start again under attempt 2, the first of them marked reset, and the one recorded
// answer is the retry's, whole.
func TestStreamCutMidAnswerIsRetriedWithReset(t *testing.T) {
	pieces := tokens(100)
	n, _ := streamingNode(t, 3, func(i int) openaitest.Reply {
		if i == 0 {
			return cutStream(pieces[:50])
		}
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	api := httptest.NewServer(n.Handler())
	defer api.Close()
	last := warmSession(t, n, "stream-cut")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := streamTask(t, ctx, api.URL, n, "stream-cut", last, "count to 100")
	if end := got[len(got)-1]; end.name != string(messages.TypeTaskCompleted) {
		t.Fatalf("the task ended with %s: %s", end.name, end.env.Payload)
	}
	deltas := deltasOf(t, got)
	if len(deltas) != 150 {
		t.Fatalf("%d deltas, want 50 of the cut attempt and 100 of the retry", len(deltas))
	}
	for i, d := range deltas {
		attempt, piece, reset := 1, pieces[i%100], false
		if i >= 50 {
			attempt, piece, reset = 2, pieces[i-50], i == 50
		}
		if d.Seq != uint64(i+1) || d.Attempt != attempt || d.Content != piece || d.Reset != reset {
			t.Fatalf("delta %d: %+v, want attempt %d %q reset %v", i, d, attempt, piece, reset)
		}
	}
	// What a client shows: the text after the last reset, then the whole answer.
	var shown strings.Builder
	for _, d := range deltas {
		if d.Reset {
			shown.Reset()
		}
		shown.WriteString(d.Content)
	}
	resp := respondedAfter(t, n, "stream-cut", last)
	if len(resp) != 1 || resp[0].Message.Content != strings.Join(pieces, "") || resp[0].Message.Content != shown.String() {
		t.Fatalf("recorded answers: %+v; shown %q", resp, shown.String())
	}
}

// When every attempt is cut, the call fails cleanly: its model.responded records the
// error and no text, never the half answer the deltas showed, with what the
// attempts spent.
func TestStreamCutEveryAttemptFailsCleanly(t *testing.T) {
	pieces := tokens(40)
	n, srv := streamingNode(t, 2, func(int) openaitest.Reply { return cutStream(pieces[:20]) })
	api := httptest.NewServer(n.Handler())
	defer api.Close()
	last := warmSession(t, n, "stream-fail")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := streamTask(t, ctx, api.URL, n, "stream-fail", last, "count")
	if end := got[len(got)-1]; end.name != string(messages.TypeTaskFailed) {
		t.Fatalf("the task ended with %s: %s", end.name, end.env.Payload)
	}
	if len(srv.Requests()) != 3 { // the warm-up and two attempts
		t.Errorf("%d provider requests, want 3", len(srv.Requests()))
	}
	if d := deltasOf(t, got); len(d) != 40 || !d[20].Reset || d[20].Attempt != 2 {
		t.Errorf("%d deltas (want 20 per attempt, the second reset)", len(d))
	}
	resp := respondedAfter(t, n, "stream-fail", last)
	if len(resp) != 1 || resp[0].Error == "" || resp[0].Message.Content != "" || len(resp[0].Message.ToolCalls) != 0 {
		t.Fatalf("recorded answers: %+v", resp)
	}
	// What the cut attempts cost is recorded all the same, estimated: the provider
	// took the prompt and streamed 20 pieces twice before the cuts.
	if u := resp[0].Usage; u.PromptTokens == 0 || u.CompletionTokens == 0 {
		t.Fatalf("the failed call records usage %+v, want what its two cut attempts spent", u)
	}
}

// A watcher of deltas that reads nothing does not hold the session: the task
// finishes, the watcher then reads every event of it in order (its deltas are the
// ones that fitted its channel, then an empty one with Reset just before the
// answer: it missed the others), and the log has the whole answer.
func TestSlowDeltaWatcherDoesNotStallTheSession(t *testing.T) {
	pieces := tokens(1000)
	n, _ := streamingNode(t, 0, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 1000}, pieces...)
	})
	last := warmSession(t, n, "stream-slow")
	live, stop := n.WatchDeltas("stream-slow")
	defer stop()
	if _, err := n.Submit(context.Background(), node.Task{Input: "count to 1000", SessionID: "stream-slow"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the task to finish with an unread watcher", func() bool {
		events, err := n.Log().Read(context.Background(), "stream-slow", last+1)
		return err == nil && len(events) > 0 && events[len(events)-1].Type == messages.TypeTaskCompleted
	})
	deltas, seq := 0, last
	var prev messages.Envelope
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case e, ok := <-live:
			if !ok {
				t.Fatal("the watcher was disconnected")
			}
			if e.Type == messages.TypeModelResponded {
				p, _ := prev.Decode()
				if d, ok := p.(*messages.ModelDelta); !ok || !d.Reset || d.Content != "" {
					t.Fatalf("before the answer: %s %s, want an empty delta with reset", prev.Type, prev.Payload)
				}
			}
			prev = e
			if e.Type == messages.TypeModelDelta {
				deltas++
				continue
			}
			if e.Seq != seq+1 {
				t.Fatalf("event seq %d after %d", e.Seq, seq)
			}
			seq = e.Seq
			done = e.Type == messages.TypeTaskCompleted
		case <-timeout:
			t.Fatalf("the watcher did not get the task's end (last seq %d)", seq)
		}
	}
	if deltas == 0 || deltas >= len(pieces) {
		t.Errorf("the unread watcher got %d of %d deltas: want those its channel held, not all", deltas, len(pieces))
	}
	resp := respondedAfter(t, n, "stream-slow", last)
	if len(resp) != 1 || resp[0].Message.Content != strings.Join(pieces, "") {
		t.Fatalf("recorded answers: %d, %.80q", len(resp), fmt.Sprint(resp))
	}
}

// A stream client with ?deltas=false is no watcher of deltas: it gets the
// session's events and none of the deltas of its calls, which do not stream (a
// call streams for the watchers of deltas there are as it starts, unless
// Config.StreamUnwatched).
func TestStreamWithoutDeltasGetsNone(t *testing.T) {
	n, srv := streamingNode(t, 0, func(int) openaitest.Reply {
		t.Error("a model call streamed with nobody watching its deltas")
		return openaitest.Error(500, "unexpected stream")
	})
	api := httptest.NewServer(n.Handler())
	defer api.Close()
	last := warmSession(t, n, "no-deltas")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := openStreamAt(t, ctx, api.URL+"/v1/sessions/no-deltas/stream?deltas=false", last)
	if _, err := n.Submit(ctx, node.Task{Input: "count to 10", SessionID: "no-deltas"}); err != nil {
		t.Fatal(err)
	}
	got := untilDone(t, ctx, events)
	if want := "task.submitted model.requested model.responded task.completed"; streamOrder(got) != want {
		t.Fatalf("stream order %q, want %q", streamOrder(got), want)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d provider requests, want 2", len(reqs))
	}
	if s, _ := reqs[1].JSON(t)["stream"].(bool); s {
		t.Error("the call streamed with nobody watching its deltas")
	}
}
