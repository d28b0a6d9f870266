package openai_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

func stream(t *testing.T, m *openai.Model) ([]openai.Delta, llm.Response, error) {
	t.Helper()
	var got []openai.Delta
	r, err := m.Stream(deadline(t), llm.Request{Step: 4, Messages: conversation()[:2]}, func(d openai.Delta) error {
		got = append(got, d)
		return nil
	})
	return got, r, err
}

func TestStreamText(t *testing.T) {
	u := messages.Usage{PromptTokens: 40, CompletionTokens: 3, CachedTokens: 32}
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.TextStream(u, "The answer", " is", " 42.")))
	m := newModel(t, srv)
	var _ openai.Streamer = m

	deltas, r, err := stream(t, m)
	if err != nil {
		t.Fatal(err)
	}
	want := []openai.Delta{{Content: "The answer"}, {Content: " is"}, {Content: " 42."}}
	if !reflect.DeepEqual(deltas, want) {
		t.Fatalf("deltas %+v", deltas)
	}
	if r.Message.Role != messages.RoleAssistant || r.Message.Content != "The answer is 42." || r.Usage != u {
		t.Fatalf("response %+v", r)
	}
	body := srv.Requests()[0].JSON(t)
	if body["stream"] != true {
		t.Fatalf("stream = %v", body["stream"])
	}
	jsonEqual(t, "stream_options", body["stream_options"], `{"include_usage":true}`)
}

// A provider that does not stream answers a streamed request whole: the answer is
// Generate's, with no increments.
func TestStreamAnsweredWhole(t *testing.T) {
	u := messages.Usage{PromptTokens: 40, CompletionTokens: 3}
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Completion(messages.ChatMessage{Content: "The answer is 42."}, u)))
	deltas, r, err := stream(t, newModel(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	if len(deltas) != 0 || r.Message.Role != messages.RoleAssistant || r.Message.Content != "The answer is 42." || r.Usage != u {
		t.Fatalf("deltas %+v, response %+v", deltas, r)
	}
}

func TestStreamParallelToolCalls(t *testing.T) {
	// Two calls whose arguments arrive in many small pieces, interleaved.
	ev := []string{openaitest.RoleChunk(),
		openaitest.ToolCallChunk(0, "call_calc", "calculator", ""),
		openaitest.ToolCallChunk(1, "call_clock", "clock", ""),
	}
	calc, clock := `{"expression": "12 * (7 + 5)"}`, `{"timezone":"Asia/Tokyo"}`
	var want []openai.Delta
	want = append(want, openai.Delta{ToolCallIndex: 0, ToolCallID: "call_calc", ToolName: "calculator"},
		openai.Delta{ToolCallIndex: 1, ToolCallID: "call_clock", ToolName: "clock"})
	for i := 0; i < len(calc) || i < len(clock); i += 3 {
		if i < len(calc) {
			p := calc[i:min(i+3, len(calc))]
			ev = append(ev, openaitest.ToolCallChunk(0, "", "", p))
			want = append(want, openai.Delta{ToolCallIndex: 0, ArgumentsDelta: p})
		}
		if i < len(clock) {
			p := clock[i:min(i+3, len(clock))]
			ev = append(ev, openaitest.ToolCallChunk(1, "", "", p))
			want = append(want, openai.Delta{ToolCallIndex: 1, ArgumentsDelta: p})
		}
	}
	u := messages.Usage{PromptTokens: 50, CompletionTokens: 30}
	ev = append(ev, openaitest.FinishChunk("tool_calls"), openaitest.UsageChunk(u), openaitest.Done)
	if len(ev) < 20 {
		t.Fatalf("only %d chunks: the test wants many", len(ev))
	}
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(ev...)))

	deltas, r, err := stream(t, newModel(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(deltas, want) {
		t.Fatalf("deltas\n got %+v\nwant %+v", deltas, want)
	}
	wantCalls := []messages.ToolCall{{ID: "call_calc", Name: "calculator", Arguments: calc}, {ID: "call_clock", Name: "clock", Arguments: clock}}
	if !reflect.DeepEqual(r.Message.ToolCalls, wantCalls) || r.Message.Content != "" || r.Usage != u {
		t.Fatalf("response %+v", r)
	}
}

func TestStreamWithoutCallback(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.TextStream(messages.Usage{PromptTokens: 1, CompletionTokens: 1}, "a", "b")))
	r, err := newModel(t, srv).Stream(deadline(t), llm.Request{Step: 1, Messages: conversation()[:2]}, nil)
	if err != nil || r.Message.Content != "ab" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestTruncatedStreams(t *testing.T) {
	cases := map[string]openaitest.Reply{
		// The server closes the response cleanly, but before finishing the answer.
		"closed before finish": openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("The ans")),
		// The tool call's arguments were cut off mid-way.
		"closed mid tool call": openaitest.Stream(openaitest.RoleChunk(), openaitest.ToolCallChunk(0, "c", "calculator", `{"expr`)),
		// The connection is cut mid-response.
		"connection cut": {Events: []string{openaitest.RoleChunk(), openaitest.ContentChunk("Hi")}, Abort: true},
		// Nothing at all.
		"empty stream": openaitest.Stream(),
	}
	for name, reply := range cases {
		t.Run(name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(reply))
			_, r, err := stream(t, newModel(t, srv))
			if err == nil {
				t.Fatalf("a truncated stream answered %+v", r)
			}
			if !errors.Is(err, llm.ErrTransient) {
				t.Fatalf("%v: want transient", err)
			}
			if name != "connection cut" && !errors.Is(err, openai.ErrTruncatedStream) {
				t.Fatalf("%v: want ErrTruncatedStream", err)
			}
			// No partial answer: only what the cut stream spent (estimated, the
			// provider having reported nothing), and nothing when nothing came.
			if r.Usage = (messages.Usage{}); !reflect.DeepEqual(r, llm.Response{}) {
				t.Fatalf("partial answer returned: %+v", r)
			}
		})
	}
}

// A stream whose every choice came with its finish_reason is a whole answer, though
// it closed, was cut or stalled before [DONE] (and before its usage, if it had
// any): the provider ended and bills that answer, and retrying it would pay for it
// again. Its usage is the one the provider reported, or none.
func TestStreamFinishedWithoutDoneIsWhole(t *testing.T) {
	u := messages.Usage{PromptTokens: 9, CompletionTokens: 2}
	finish := []string{openaitest.RoleChunk(), openaitest.ContentChunk("Hi"), openaitest.FinishChunk("stop")}
	for _, c := range []struct {
		name  string
		reply openaitest.Reply
		want  messages.Usage
	}{
		{"closed after its usage", openaitest.Stream(append(finish, openaitest.UsageChunk(u))...), u},
		{"closed after its finish_reason", openaitest.Stream(finish...), messages.Usage{}},
		{"cut after its usage", openaitest.Reply{Events: append(finish, openaitest.UsageChunk(u)), Abort: true}, u},
		{"stalled after its usage", openaitest.Reply{Events: append(finish, openaitest.UsageChunk(u)), Stall: true}, u},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(c.reply))
			_, r, err := stream(t, newModel(t, srv, func(c *openai.Config) { c.Timeout = 300 * time.Millisecond }))
			if err != nil || r.Message.Content != "Hi" || r.Usage != c.want || r.FinishReason != "" {
				t.Fatalf("%+v %v: want the answer %q with usage %+v", r, err, "Hi", c.want)
			}
		})
	}
}

func TestStalledStreamTimesOut(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{
		Events: []string{openaitest.RoleChunk(), openaitest.ContentChunk("thinking")}, Stall: true}))
	m := newModel(t, srv, func(c *openai.Config) { c.Timeout = 150 * time.Millisecond })
	deltas, _, err := stream(t, m)
	if !errors.Is(err, llm.ErrTransient) || len(deltas) != 1 {
		t.Fatalf("%v (deltas %+v): want a transient timeout after one delta", err, deltas)
	}
}

func TestStreamErrors(t *testing.T) {
	t.Run("http error", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Error(429, "busy", "Retry-After", "3")))
		_, _, err := stream(t, newModel(t, srv))
		if api := apiError(t, err); api.StatusCode != 429 || api.RetryAfter != 3*time.Second || !errors.Is(err, llm.ErrTransient) {
			t.Fatalf("%v", err)
		}
	})
	t.Run("error event", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("Hi"),
			`{"error":{"message":"upstream overloaded","type":"server_error"}}`)))
		_, _, err := stream(t, newModel(t, srv))
		if !errors.Is(err, llm.ErrTransient) || !strings.Contains(err.Error(), "upstream overloaded") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("malformed chunk", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(openaitest.RoleChunk(), `{"choices":[{"delta":`, openaitest.Done)))
		_, _, err := stream(t, newModel(t, srv))
		if !errors.Is(err, openai.ErrMalformedResponse) || errors.Is(err, llm.ErrTransient) {
			t.Fatalf("%v", err)
		}
	})
	t.Run("not an event stream", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Header: map[string]string{"Content-Type": "text/plain"}, Body: "x"}))
		_, _, err := stream(t, newModel(t, srv))
		if !errors.Is(err, openai.ErrMalformedResponse) || !strings.Contains(err.Error(), "text/plain") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("callback error stops the stream", func(t *testing.T) {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{
			Events: []string{openaitest.RoleChunk(), openaitest.ContentChunk("a"), openaitest.ContentChunk("b")}, Stall: true}))
		stop := errors.New("client went away")
		n := 0
		_, err := newModel(t, srv).Stream(deadline(t), llm.Request{Step: 1, Messages: conversation()[:2]}, func(openai.Delta) error {
			n++
			return stop
		})
		if !errors.Is(err, stop) || n != 1 {
			t.Fatalf("%v after %d deltas", err, n)
		}
	})
}
