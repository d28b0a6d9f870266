package actors_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
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
