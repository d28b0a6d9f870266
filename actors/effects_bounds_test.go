package actors_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// outputTool answers every call with output and counts its calls.
func outputTool(output string, calls *atomic.Int32) tools.Tool {
	return funcTool{"out", func(context.Context, tools.Call) (string, error) {
		calls.Add(1)
		return output, nil
	}}
}

// performWait performs req and waits for its one reply; it reports whether the tool
// was called for it (the answer was not remembered).
func performWait(t *testing.T, e *actors.LocalEffects, calls *atomic.Int32, req messages.EffectRequest) messages.EffectReply {
	t.Helper()
	got := make(chan messages.EffectReply, 1)
	e.Perform(req, func(rep messages.EffectReply) { got <- rep })
	select {
	case rep := <-got:
		if rep.Error != "" {
			t.Fatalf("%s answered %q", req.Key, rep.Error)
		}
		return rep
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not answered in 10 s", req.Key)
	}
	return messages.EffectReply{}
}

// The answers LocalEffects remembers are bounded by their size as well as their
// number, the oldest going first: a node does not hold every tool output and model
// reply of the last Remember, however large.
func TestLocalEffectsRememberAtMostMaxBytes(t *testing.T) {
	var calls atomic.Int32
	big := strings.Repeat("x", 64<<10)
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, outputTool(big, &calls)),
		Remember: time.Hour, MaxRemembered: 1000, MaxRememberedBytes: 1 << 20})
	t.Cleanup(func() { _ = e.Close() })
	for i := range 100 {
		performWait(t, e, &calls, toolRequest("s", uint64(i+1), "out"))
	}
	if n := e.Len(); n > 16 || n < 8 {
		t.Fatalf("remembers %d answers of 64 KiB, want 8 to 16 within 1 MiB", n)
	}
	before := calls.Load()
	performWait(t, e, &calls, toolRequest("s", 100, "out"))
	if calls.Load() != before {
		t.Fatal("the newest answer was not remembered")
	}
	performWait(t, e, &calls, toolRequest("s", 1, "out"))
	if calls.Load() != before+1 {
		t.Fatal("the oldest answer was remembered past the byte bound")
	}
}

// At most MaxRemembered answers and cancellation markers are kept, the oldest going
// first; a key in flight is never dropped, so a request for it still waits for its
// one performance.
func TestLocalEffectsRememberAtMostMaxRemembered(t *testing.T) {
	var calls atomic.Int32
	g := newGate()
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, outputTool("out", &calls), g),
		Remember: time.Hour, MaxRemembered: 100})
	t.Cleanup(func() { _ = e.Close() })
	r := newReplies()
	inFlight := toolRequest("gated", 1, "gate")
	e.Perform(inFlight, r.to)
	waitUntil(t, "the gated call running", func() bool { return len(g.started) == 1 })

	for i := range 1000 {
		performWait(t, e, &calls, toolRequest("s", uint64(i+1), "out"))
	}
	if n := e.Len(); n > 101 {
		t.Fatalf("remembers %d answers (and one in flight), want at most 100 and the one", n)
	}
	for i := 900; i < 1000; i++ {
		before := calls.Load()
		performWait(t, e, &calls, toolRequest("s", uint64(i+1), "out"))
		if calls.Load() != before {
			t.Fatalf("s/%d, one of the 100 newest answers, was not remembered", i+1)
		}
	}
	// Cancellation markers of keys never seen here are bounded the same way.
	for i := range 1000 {
		e.Cancel(messages.EffectKey{SessionID: "c", Seq: uint64(i + 1)})
	}
	if n := e.Len(); n > 101 {
		t.Fatalf("after 1000 cancellations: %d kept, want at most 100 and the one in flight", n)
	}
	if e.Known(messages.EffectKey{SessionID: "c", Seq: 1}) || !e.Known(messages.EffectKey{SessionID: "c", Seq: 1000}) {
		t.Fatal("the oldest cancellation marker was kept, or the newest dropped")
	}

	// The gated key survived all of that: asked again, it waits for the one call.
	e.Perform(inFlight, r.to)
	close(g.release)
	waitUntil(t, "the gated call answered twice", func() bool { return len(r.of(inFlight.Key)) == 2 })
	if n := len(g.started); n != 1 {
		t.Fatalf("the gated key was performed %d times, want once", n)
	}
}

// Answers older than Remember go when no call comes, too (Expire, which the node calls
// every minute): an idle node does not keep what it answered before it went idle.
func TestLocalEffectsExpireWithoutCalls(t *testing.T) {
	var calls atomic.Int32
	g := newGate()
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, outputTool("out", &calls), g), Remember: time.Minute})
	t.Cleanup(func() { _ = e.Close() })
	for i := range 10 {
		performWait(t, e, &calls, toolRequest("s", uint64(i+1), "out"))
	}
	e.Cancel(messages.EffectKey{SessionID: "c", Seq: 1})
	e.Perform(toolRequest("gated", 1, "gate"), func(messages.EffectReply) {})
	waitUntil(t, "the gated call running", func() bool { return len(g.started) == 1 })
	e.Expire(time.Now().Add(30 * time.Second))
	if n := e.Len(); n != 12 {
		t.Fatalf("after 30 s: %d kept, want 12 (10 answers, a cancellation, a call in flight)", n)
	}
	e.Expire(time.Now().Add(2 * time.Minute))
	if n := e.Len(); n != 1 {
		t.Fatalf("after 2 minutes: %d kept, want only the call in flight", n)
	}
	if !e.Known(messages.EffectKey{SessionID: "gated", Seq: 1}) {
		t.Fatal("the call in flight was expired")
	}
	close(g.release)
}

// shortModel answers "ok" to every call.
type shortModel struct{}

func (shortModel) Name() string { return "short" }
func (shortModel) Generate(context.Context, llm.Request) (llm.Response, error) {
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "ok"}, Usage: messages.Usage{PromptTokens: 1}}, nil
}

// The size the byte bound counts for an answer is not below what the answer really
// holds: with the bound reached, the heap the remembered model answers take stays
// within MaxRememberedBytes (and a little slack for the map's spare room). A
// remembered answer keeps its reply only: not the call's contexts, not the model's
// whole response.
func TestLocalEffectsRememberedAnswersTakeAtMostMaxBytes(t *testing.T) {
	const bound = 4 << 20
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: shortModel{}, Remember: time.Hour,
		MaxRemembered: 1 << 30, MaxRememberedBytes: bound})
	t.Cleanup(func() { _ = e.Close() })
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	got := make(chan messages.EffectReply, 1)
	answered := 0
	for i := range 20_000 {
		e.Perform(modelRequest("s", uint64(i+1)), func(rep messages.EffectReply) { got <- rep })
		select {
		case rep := <-got:
			if rep.Error != "" || rep.Message == nil {
				t.Fatalf("answer %d: %+v", i, rep)
			}
			answered++
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d not answered in 10 s", i)
		}
	}
	kept := e.Len()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grown := int64(ms.HeapAlloc) - int64(before)
	t.Logf("%d answers remembered, %d bytes of heap, %d each", kept, grown, grown/int64(kept))
	if limit := int64(bound) * 115 / 100; grown > limit {
		t.Fatalf("%d remembered answers hold %d bytes (%d each), past the bound of %d (+15%%)", kept, grown, grown/int64(kept), bound)
	}
	if kept >= answered || kept < 1000 {
		t.Fatalf("%d of %d answers remembered within %d bytes", kept, answered, bound)
	}
	runtime.KeepAlive(e)
}

// Once its answers expired, LocalEffects gives their memory back, the map's included
// (a Go map keeps the room of its largest size: the map is rebuilt when it shrank).
func TestLocalEffectsGiveMemoryBackAfterExpiry(t *testing.T) {
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: shortModel{}, Remember: time.Minute})
	t.Cleanup(func() { _ = e.Close() })
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	got := make(chan messages.EffectReply, 1)
	const n = 50_000
	for i := range n {
		e.Perform(modelRequest("s", uint64(i+1)), func(rep messages.EffectReply) { got <- rep })
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d not answered in 10 s", i)
		}
	}
	if k := e.Len(); k != n {
		t.Fatalf("%d answers remembered, want %d", k, n)
	}
	e.Expire(time.Now().Add(2 * time.Minute))
	if k := e.Len(); k != 0 {
		t.Fatalf("%d answers remembered after they expired", k)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if grown := int64(ms.HeapAlloc) - int64(before); grown > 256<<10 {
		t.Fatalf("after %d answers expired, the heap is %d bytes larger than before them", n, grown)
	}
	runtime.KeepAlive(e)
}

// Every call of a performer times out at its own deadline, whichever of its calls
// started before it ended earlier or ran on: calls started one after another, the
// middle one answering by itself, the others ignoring their context; then, once
// none runs, a new call times out too.
func TestLocalEffectsTimeOutEachCallAtItsDeadline(t *testing.T) {
	release := map[string]chan struct{}{}
	for _, k := range []string{"s/1", "s/2", "s/3", "s/4"} {
		release[k] = make(chan struct{})
	}
	t.Cleanup(func() {
		for _, c := range release {
			close(c)
		}
	})
	stuck := funcTool{"stuck", func(_ context.Context, c tools.Call) (string, error) {
		<-release[c.Key] // ignores its context
		return "done " + c.Key, nil
	}}
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, stuck), ToolTimeout: 50 * time.Millisecond, ToolConcurrency: 8})
	t.Cleanup(func() { _ = e.Close() })
	r := newReplies()
	key := func(seq uint64) messages.EffectKey { return messages.EffectKey{SessionID: "s", Seq: seq} }
	for seq := uint64(1); seq <= 3; seq++ {
		e.Perform(toolRequest("s", seq, "stuck"), r.to)
		time.Sleep(5 * time.Millisecond) // distinct deadlines
	}
	release["s/2"] <- struct{}{}
	waitUntil(t, "the three calls answered", func() bool { return r.count() == 3 })
	for seq, want := range map[uint64]string{1: "tool timed out after 50ms", 2: "", 3: "tool timed out after 50ms"} {
		got := r.of(key(seq))
		switch {
		case len(got) != 1:
			t.Errorf("call %d answered %d times", seq, len(got))
		case want == "" && (got[0].Error != "" || got[0].Output != "done s/2"):
			t.Errorf("call %d answered %+v, want its output", seq, got[0])
		case want != "" && !strings.Contains(got[0].Error, want):
			t.Errorf("call %d answered %+v, want %q", seq, got[0], want)
		}
	}
	e.Perform(toolRequest("s", 4, "stuck"), r.to)
	waitUntil(t, "the call started last answered", func() bool { return len(r.of(key(4))) == 1 })
	if got := r.of(key(4))[0]; !strings.Contains(got.Error, "tool timed out after 50ms") {
		t.Errorf("call 4 answered %+v", got)
	}
}
