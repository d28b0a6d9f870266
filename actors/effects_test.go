package actors_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// gate is a tool that blocks each call until released or until its context ends, and
// reports how its calls went.
type gate struct {
	release chan struct{}
	started chan string
	mu      sync.Mutex
	running int
	peak    int
	causes  map[string]error // key -> cause of the context end the call saw
}

func newGate() *gate {
	return &gate{release: make(chan struct{}), started: make(chan string, 1024), causes: map[string]error{}}
}

func (g *gate) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "gate", Description: "blocks"}
}

func (g *gate) Call(ctx context.Context, c tools.Call) (string, error) {
	g.mu.Lock()
	g.running++
	g.peak = max(g.peak, g.running)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	g.started <- c.Key
	select {
	case <-g.release:
		return "done " + c.Key, nil
	case <-ctx.Done():
		g.mu.Lock()
		g.causes[c.Key] = context.Cause(ctx)
		g.mu.Unlock()
		return "", ctx.Err()
	}
}

func (g *gate) cause(key string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.causes[key]
}

func toolRequest(session string, seq uint64, tool string) messages.EffectRequest {
	k := messages.EffectKey{SessionID: session, Seq: seq}
	return messages.EffectRequest{SessionID: session, Key: k, Tool: &messages.ToolCallRequested{Key: k.String(), CallID: "c", Tool: tool, Arguments: "{}"}}
}

// replies collects the replies of Perform calls.
type replies struct {
	mu  sync.Mutex
	got map[messages.EffectKey][]messages.EffectReply
}

func newReplies() *replies { return &replies{got: map[messages.EffectKey][]messages.EffectReply{}} }

func (r *replies) to(rep messages.EffectReply) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[rep.Key] = append(r.got[rep.Key], rep)
}

func (r *replies) of(k messages.EffectKey) []messages.EffectReply {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]messages.EffectReply(nil), r.got[k]...)
}

func (r *replies) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.got {
		n += len(v)
	}
	return n
}

func registry(t *testing.T, tl ...tools.Tool) *tools.Registry {
	t.Helper()
	r, err := tools.NewRegistry(tl...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Calls past a performer's bound wait in its queue, not in goroutines; each key is
// performed once however often it is asked for, and asked again it is answered from
// memory.
func TestLocalEffectsBoundQueueAndPerformEachKeyOnce(t *testing.T) {
	g := newGate()
	var repeats atomic.Int32
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, g), ToolConcurrency: 2, OnRepeat: func() { repeats.Add(1) }})
	t.Cleanup(func() { _ = e.Close() })
	r := newReplies()

	before := runtime.NumGoroutine()
	const calls = 500
	for i := range calls {
		e.Perform(toolRequest("s", uint64(i+1), "gate"), r.to)
	}
	e.Perform(toolRequest("s", 1, "gate"), r.to) // a second request for a key in flight
	waitUntil(t, "two calls running", func() bool { return len(g.started) == 2 })
	if grown := runtime.NumGoroutine() - before; grown > 50 {
		t.Fatalf("%d goroutines for %d calls past a bound of 2: the queue must not be goroutines", grown, calls)
	}
	close(g.release)
	waitUntil(t, "every call answered", func() bool { return r.count() == calls+1 })
	g.mu.Lock()
	peak := g.peak
	g.mu.Unlock()
	if peak != 2 {
		t.Errorf("peak of concurrent calls %d, want the bound 2", peak)
	}
	if n := len(g.started); n != calls {
		t.Errorf("%d tool calls for %d keys", n, calls)
	}
	key1 := messages.EffectKey{SessionID: "s", Seq: 1}
	for _, rep := range r.of(key1) {
		if rep.Output != "done s/1" || rep.Key != key1 || rep.SessionID != "s" {
			t.Errorf("reply to s/1: %+v", rep)
		}
	}
	e.Perform(toolRequest("s", 1, "gate"), r.to)
	if got := r.of(key1); len(got) != 3 || got[2].Output != "done s/1" {
		t.Errorf("a key performed before is answered again at once: %+v", got)
	}
	if n := len(g.started); n != calls {
		t.Errorf("asked again, the tool ran again (%d calls)", n)
	}
	if n := repeats.Load(); n != 2 {
		t.Errorf("OnRepeat called %d times, want 2", n)
	}

	e.Perform(toolRequest("s", 9999, "missing"), r.to)
	if got := r.of(messages.EffectKey{SessionID: "s", Seq: 9999}); len(got) != 1 || !strings.Contains(got[0].Error, "no such tool") {
		t.Errorf("a tool this node lacks: %+v", got)
	}
}

// Cancel ends a running call's context (the tool sees it, with the cause), answers its
// caller at once, takes a queued call out before it starts, and answers a key asked
// for after its cancellation without performing it.
func TestLocalEffectsCancel(t *testing.T) {
	g := newGate()
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, g), ToolConcurrency: 1})
	t.Cleanup(func() { _ = e.Close() })
	r := newReplies()
	running, queued := toolRequest("s", 1, "gate"), toolRequest("s", 2, "gate")
	e.Perform(running, r.to)
	e.Perform(queued, r.to)
	waitUntil(t, "the first call running", func() bool { return len(g.started) == 1 })

	e.Cancel(queued.Key)
	if got := r.of(queued.Key); len(got) != 1 || !strings.Contains(got[0].Error, actors.ErrEffectCancelled.Error()) {
		t.Fatalf("cancelled queued call answered %+v", got)
	}
	e.Cancel(running.Key)
	waitUntil(t, "the running call answered", func() bool { return len(r.of(running.Key)) == 1 })
	if got := r.of(running.Key)[0]; got.Error != actors.ErrEffectCancelled.Error() {
		t.Errorf("cancelled running call answered %+v", got)
	}
	waitUntil(t, "the tool saw its context end", func() bool { return g.cause("s/1") != nil })
	if c := g.cause("s/1"); !errors.Is(c, actors.ErrEffectCancelled) {
		t.Errorf("the tool's context ended with cause %v, want ErrEffectCancelled", c)
	}

	late := toolRequest("s", 3, "gate")
	e.Cancel(late.Key) // the cancellation overtakes the request, as on the bus it may
	e.Perform(late, r.to)
	if got := r.of(late.Key); len(got) != 1 || got[0].Error != actors.ErrEffectCancelled.Error() {
		t.Errorf("a request after its cancellation answered %+v", got)
	}
	if n := len(g.started); n != 1 {
		t.Errorf("%d tool calls, want only the one that was running", n)
	}
}

// Close cancels the calls in flight (cause ErrEffectsClosed), answers nobody and
// performs nothing more.
func TestLocalEffectsClose(t *testing.T) {
	g := newGate()
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, g)})
	r := newReplies()
	e.Perform(toolRequest("s", 1, "gate"), r.to)
	waitUntil(t, "the call running", func() bool { return len(g.started) == 1 })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the tool saw its context end", func() bool { return g.cause("s/1") != nil })
	if c := g.cause("s/1"); !errors.Is(c, actors.ErrEffectsClosed) {
		t.Errorf("cause %v, want ErrEffectsClosed", c)
	}
	e.Perform(toolRequest("s", 2, "gate"), r.to)
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Nothing can be polled for an answer that must not come: give a wrong one time.
	time.Sleep(50 * time.Millisecond)
	if n := r.count(); n != 0 || len(g.started) != 1 {
		t.Errorf("after Close: %d replies, %d calls", n, len(g.started))
	}
}

// stuckModel ignores its context; panicky panics.
type stuckModel struct{ unblock chan struct{} }

func (m stuckModel) Name() string { return "stuck" }
func (m stuckModel) Generate(context.Context, llm.Request) (llm.Response, error) {
	<-m.unblock
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "too late"}}, nil
}

type panicky struct{}

func (panicky) Name() string { return "panicky" }
func (panicky) Generate(context.Context, llm.Request) (llm.Response, error) {
	panic("model bug")
}

func modelRequest(session string, seq uint64) messages.EffectRequest {
	return messages.EffectRequest{SessionID: session, Key: messages.EffectKey{SessionID: session, Seq: seq},
		Model: &messages.ModelCall{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}}}
}

// A model that ignores its context is abandoned at its timeout, a panicking one is an
// error reply, and a model's answer carries its name, message and usage.
func TestLocalEffectsModelCalls(t *testing.T) {
	stuck := stuckModel{unblock: make(chan struct{})}
	t.Cleanup(func() { close(stuck.unblock) })
	r := newReplies()
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: stuck, ModelTimeout: 20 * time.Millisecond})
	t.Cleanup(func() { _ = e.Close() })
	req := modelRequest("s", 1)
	e.Perform(req, r.to)
	waitUntil(t, "the stuck call abandoned", func() bool { return len(r.of(req.Key)) == 1 })
	if got := r.of(req.Key)[0]; !strings.Contains(got.Error, actors.ErrModelTimeout.Error()) || got.Model != "stuck" {
		t.Errorf("stuck model answered %+v", got)
	}

	p := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: panicky{}})
	t.Cleanup(func() { _ = p.Close() })
	p.Perform(req, r.to)
	waitUntil(t, "the panic answered", func() bool { return len(r.of(req.Key)) == 2 })
	if got := r.of(req.Key)[1]; !strings.Contains(got.Error, "panicked: model bug") {
		t.Errorf("panicking model answered %+v", got)
	}

	ok := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: script(t, llm.ScriptStep{Content: "hello"})})
	t.Cleanup(func() { _ = ok.Close() })
	ok.Perform(req, r.to)
	waitUntil(t, "the answer", func() bool { return len(r.of(req.Key)) == 3 })
	if got := r.of(req.Key)[2]; got.Error != "" || got.Model != "scripted" || got.Message == nil || got.Message.Content != "hello" {
		t.Errorf("model answered %+v", got)
	}

	none := actors.NewLocalEffects(actors.LocalEffectsConfig{})
	t.Cleanup(func() { _ = none.Close() })
	none.Perform(req, r.to)
	if got := r.of(req.Key); len(got) != 4 || !strings.Contains(got[3].Error, actors.ErrNoModel.Error()) {
		t.Errorf("a node without a model answered %+v", got)
	}
}

// EffectsByKind sends model calls one way and tool calls the other, and cancels a key
// wherever it runs.
func TestEffectsByKind(t *testing.T) {
	g := newGate()
	tl := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, g)})
	t.Cleanup(func() { _ = tl.Close() })
	md := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: script(t, llm.ScriptStep{Content: "m"})})
	t.Cleanup(func() { _ = md.Close() })
	both := actors.EffectsByKind{Model: md, Tools: tl}
	r := newReplies()
	both.Perform(modelRequest("s", 1), r.to)
	both.Perform(toolRequest("s", 2, "gate"), r.to)
	waitUntil(t, "the model answered and the tool running", func() bool { return r.count() == 1 && len(g.started) == 1 })
	if !md.Known(messages.EffectKey{SessionID: "s", Seq: 1}) || tl.Known(messages.EffectKey{SessionID: "s", Seq: 1}) {
		t.Error("the model call went to the wrong effects")
	}
	both.Cancel(messages.EffectKey{SessionID: "s", Seq: 2})
	waitUntil(t, "the tool call cancelled", func() bool { return len(r.of(messages.EffectKey{SessionID: "s", Seq: 2})) == 1 })
}

// limited is a tool with its own limits (tools.Limits); its calls do what the
// arguments say.
type limited struct {
	name   string
	limits tools.CallLimits
	gate   *gate
}

func (l limited) Spec() messages.ToolSpec  { return messages.ToolSpec{Name: l.name} }
func (l limited) Limits() tools.CallLimits { return l.limits }
func (l limited) Call(ctx context.Context, c tools.Call) (string, error) {
	switch c.Arguments {
	case "big":
		return strings.Repeat("x", 10<<20), nil
	case "big error":
		return "", errors.New(strings.Repeat("e", 10<<20))
	case "big panic":
		panic(strings.Repeat("p", 10<<20))
	}
	return l.gate.Call(ctx, c)
}

func limitedRequest(tool string, seq uint64, args string) messages.EffectRequest {
	req := toolRequest("s", seq, tool)
	req.Tool.Arguments = args
	return req
}

// A tool's own limits (tools.Limits) override the performer's defaults: its timeout,
// its concurrency bound, its argument and output sizes; a long output or error
// reaches the caller as its head and a note.
func TestLocalEffectsApplyEachToolsLimits(t *testing.T) {
	slow := limited{name: "slow", limits: tools.CallLimits{Timeout: 20 * time.Millisecond}, gate: newGate()}
	narrow := limited{name: "narrow", limits: tools.CallLimits{Concurrency: 1, MaxArguments: 10}, gate: newGate()}
	small := limited{name: "small", limits: tools.CallLimits{MaxOutput: 1000}, gate: newGate()}
	dflt := limited{name: "default", gate: newGate()}
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, slow, narrow, small, dflt), ToolTimeout: time.Hour, ToolConcurrency: 16})
	t.Cleanup(func() { _ = e.Close() })
	r := newReplies()

	e.Perform(limitedRequest("slow", 1, "{}"), r.to)
	waitUntil(t, "the slow call timed out", func() bool { return len(r.of(messages.EffectKey{SessionID: "s", Seq: 1})) == 1 })
	if rep := r.of(messages.EffectKey{SessionID: "s", Seq: 1})[0]; !strings.Contains(rep.Error, "tool timed out after 20ms") {
		t.Errorf("slow: %+v", rep)
	}

	e.Perform(limitedRequest("narrow", 20, `{"a":"long"}`), r.to)
	waitUntil(t, "long arguments refused", func() bool { return len(r.of(messages.EffectKey{SessionID: "s", Seq: 20})) == 1 })
	if rep := r.of(messages.EffectKey{SessionID: "s", Seq: 20})[0]; !strings.Contains(rep.Error, "narrow: invalid arguments: the arguments are 12 bytes long; the limit is 10") {
		t.Errorf("long arguments: %+v", rep)
	}
	for i := range 5 {
		e.Perform(limitedRequest("narrow", uint64(10+i), "{}"), r.to)
	}
	waitUntil(t, "one narrow call running", func() bool { return len(narrow.gate.started) == 1 })
	close(narrow.gate.release)
	waitUntil(t, "every narrow call answered", func() bool { return r.count() == 7 })
	narrow.gate.mu.Lock()
	peak := narrow.gate.peak
	narrow.gate.mu.Unlock()
	if peak != 1 || len(narrow.gate.started) != 5 {
		t.Errorf("narrow: peak %d of %d calls, want 1 of 5", peak, len(narrow.gate.started))
	}

	for i, c := range []struct {
		tool, args string
		max        int
	}{{"small", "big", 1000}, {"small", "big error", 1000}, {"small", "big panic", 1000}, {"default", "big", tools.DefaultMaxOutput}} {
		k := messages.EffectKey{SessionID: "s", Seq: uint64(30 + i)}
		e.Perform(limitedRequest(c.tool, k.Seq, c.args), r.to)
		waitUntil(t, c.tool+" "+c.args+" answered", func() bool { return len(r.of(k)) == 1 })
		rep := r.of(k)[0]
		text := rep.Output + rep.Error
		if len(text) > c.max+200 || !strings.Contains(text, "[truncated: ") {
			t.Errorf("%s %s: %d bytes, ending %q", c.tool, c.args, len(text), text[max(0, len(text)-80):])
		}
	}
}

// PerformWhile drops a call still queued behind its performer's bound when its
// context ends (or had ended when it was asked for): it never starts, it is
// forgotten (asked again, it is performed), and its caller is told instead of
// answered. A call that started, or one that another request of its key joined,
// is performed as Perform's.
func TestLocalEffectsPerformWhileWithdrawsQueuedCalls(t *testing.T) {
	g := newGate()
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, g), ToolConcurrency: 1})
	t.Cleanup(func() { _ = e.Close() })
	r := newReplies()
	var mu sync.Mutex
	withdrawn := map[uint64]int{}
	while := func(seq uint64) context.CancelFunc {
		ctx, cancel := context.WithCancel(context.Background())
		e.PerformWhile(ctx, toolRequest("s", seq, "gate"), r.to, func() {
			mu.Lock()
			defer mu.Unlock()
			withdrawn[seq]++
		})
		return cancel
	}
	withdrawnOf := func(seq uint64) int {
		mu.Lock()
		defer mu.Unlock()
		return withdrawn[seq]
	}
	cancelRunning := while(1)
	waitUntil(t, "the first call running", func() bool { return len(g.started) == 1 })
	cancel2, cancel3, cancel4, cancel5 := while(2), while(3), while(4), while(5)
	defer cancel4()
	e.Perform(toolRequest("s", 5, "gate"), r.to) // joins s/5: it is performed for it
	cancelRunning()
	cancel2()
	waitUntil(t, "the queued call withdrawn", func() bool { return withdrawnOf(2) == 1 })
	if e.Known(messages.EffectKey{SessionID: "s", Seq: 2}) {
		t.Error("a withdrawn call is still known")
	}
	cancel3()
	cancel5()
	doneCtx, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	e.PerformWhile(doneCtx, toolRequest("s", 6, "gate"), r.to, func() {
		mu.Lock()
		defer mu.Unlock()
		withdrawn[6]++
	})
	if withdrawnOf(6) != 1 {
		t.Error("a call asked for with its context ended was not withdrawn at once")
	}
	close(g.release)
	waitUntil(t, "the others answered", func() bool {
		return len(r.of(messages.EffectKey{SessionID: "s", Seq: 4})) == 1 && len(r.of(messages.EffectKey{SessionID: "s", Seq: 5})) == 2
	})
	waitUntil(t, "s/3 withdrawn", func() bool { return withdrawnOf(3) == 1 })
	close(g.started)
	var started []string
	for k := range g.started {
		started = append(started, k)
	}
	if got := strings.Join(started, " "); got != "s/1 s/4 s/5" {
		t.Errorf("calls started: %s, want s/1 s/4 s/5", got)
	}
	if len(r.of(messages.EffectKey{SessionID: "s", Seq: 1})) != 1 {
		t.Error("the call that had started was not answered")
	}
	for _, seq := range []uint64{2, 3, 6} {
		if n := len(r.of(messages.EffectKey{SessionID: "s", Seq: seq})); n != 0 || withdrawnOf(seq) != 1 {
			t.Errorf("s/%d: %d answers, withdrawn %d times; want 0 and 1", seq, n, withdrawnOf(seq))
		}
	}
	for _, seq := range []uint64{1, 4, 5} {
		if withdrawnOf(seq) != 0 {
			t.Errorf("s/%d withdrawn, though performed", seq)
		}
	}
}
