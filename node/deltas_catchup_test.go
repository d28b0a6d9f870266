package node

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// readDeltaFeed reads n envelopes of a watcher of deltas, each as "seq:type" for an
// event and "key#seq[!]=text" for a delta ("!": Reset), then checks that nothing
// else comes at once.
func readDeltaFeed(t *testing.T, live <-chan messages.Envelope, n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		select {
		case e := <-live:
			got = append(got, feedEntry(t, e))
		case <-time.After(5 * time.Second):
			t.Fatalf("got %q, then nothing", got)
		}
	}
	select {
	case e := <-live:
		t.Fatalf("after %q: %s %s", got, e.Type, e.Payload)
	case <-time.After(20 * time.Millisecond):
	}
	return got
}

// feedEntry is e as the delta tests write a watcher's feed: "seq:type" for an
// event, "key#seq[!]=text" for a delta ("!": Reset).
func feedEntry(t *testing.T, e messages.Envelope) string {
	t.Helper()
	if e.Type != messages.TypeModelDelta {
		return fmt.Sprintf("%d:%s", e.Seq, e.Type)
	}
	p, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	d := p.(*messages.ModelDelta)
	return fmt.Sprintf("%s#%d%s=%s", d.Key, d.Seq, map[bool]string{true: "!"}[d.Reset], strings.TrimSpace(d.Content))
}

func checkFeed(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// A watcher that comes while a call this node performs streams (its first watcher
// left: a client reconnecting) gets the call's text so far as one increment, then
// the live deltas, then the answer: no gap, nothing twice, no reset before the
// answer (it was shown every delta).
func TestHubCatchesAWatcherUpOnACallStreaming(t *testing.T) {
	h := newHub(nil, nil)
	ev := func(seq uint64, typ messages.Type, causation string) messages.Envelope {
		return messages.Envelope{SessionID: "s", Seq: seq, Type: typ, CausationID: causation}
	}
	delta := func(seq uint64, text string) messages.ModelDelta {
		return messages.ModelDelta{Key: "s/2", Step: 1, Seq: seq, Attempt: 1, Content: text}
	}
	first, stop := h.watch("s", true)
	h.deliver("s", []messages.Envelope{ev(1, messages.TypeTaskSubmitted, ""), ev(2, messages.TypeModelRequested, "")})
	h.openCall("s", "s/2")
	h.deliverDeltas("s", "", delta(1, "one "), delta(2, "two "))
	checkFeed(t, readDeltaFeed(t, first, 4), "1:task.submitted", "2:model.requested", "s/2#1=one", "s/2#2=two")
	stop()

	again, stop := h.watch("s", true)
	defer stop()
	h.deliverDeltas("s", "", delta(3, "three "))
	h.endDeltas("s", "", messages.DeltaEnd{Key: "s/2", Sent: 3})
	h.deliver("s", []messages.Envelope{ev(3, messages.TypeModelResponded, "s/2"), ev(4, messages.TypeTaskCompleted, "")})
	checkFeed(t, readDeltaFeed(t, again, 4), "s/2#2!=one two", "s/2#3=three", "3:model.responded", "4:task.completed")

	late, stop := h.watch("s", true) // after the call: nothing kept
	defer stop()
	readDeltaFeed(t, late, 0)
	if len(h.streams) != 0 {
		t.Fatalf("text kept after the call: %v", h.streams)
	}
}

// A call read from the bus (another node performs it), which a watcher here follows
// from its first delta: a second watcher that comes during it is caught up too, and
// the call's end releases its answer at once.
func TestHubCatchesAWatcherUpOnACallFromTheBus(t *testing.T) {
	h := newHub(nil, nil)
	ev := func(seq uint64, typ messages.Type, causation string) messages.Envelope {
		return messages.Envelope{SessionID: "s", Seq: seq, Type: typ, CausationID: causation}
	}
	delta := func(seq uint64, text string) messages.ModelDelta {
		return messages.ModelDelta{Key: "s/2", Step: 1, Seq: seq, Attempt: 1, Content: text}
	}
	first, stop1 := h.watch("s", true)
	defer stop1()
	h.deliver("s", []messages.Envelope{ev(1, messages.TypeTaskSubmitted, ""), ev(2, messages.TypeModelRequested, "")})
	h.deliverDeltas("s", "p", delta(1, "one "), delta(2, "two "))
	checkFeed(t, readDeltaFeed(t, first, 4), "1:task.submitted", "2:model.requested", "s/2#1=one", "s/2#2=two")

	second, stop2 := h.watch("s", true)
	defer stop2()
	for _, w := range h.subs["s"] {
		h.mu.Lock()
		w.busDeltas = true // the answer waits for the call's end
		h.mu.Unlock()
	}
	defer func() {
		h.mu.Lock()
		for _, w := range h.subs["s"] {
			w.busDeltas = false
		}
		h.mu.Unlock()
	}()
	h.deliverDeltas("s", "p", delta(3, "three "))
	h.deliver("s", []messages.Envelope{ev(3, messages.TypeModelResponded, "s/2")})
	checkFeed(t, readDeltaFeed(t, second, 2), "s/2#2!=one two", "s/2#3=three")
	h.endDeltas("s", "p", messages.DeltaEnd{Key: "s/2", Sent: 3})
	checkFeed(t, readDeltaFeed(t, second, 1), "3:model.responded")
	checkFeed(t, readDeltaFeed(t, first, 2), "s/2#3=three", "3:model.responded")
}

// Past callTextMax the text of a call is not kept: a watcher that comes then is
// told so (an empty increment with Reset), gets none of the call's deltas, and the
// recorded answer after another reset.
func TestHubKeepsABoundedTextPerCall(t *testing.T) {
	h := newHub(nil, nil)
	ev := func(seq uint64, typ messages.Type, causation string) messages.Envelope {
		return messages.Envelope{SessionID: "s", Seq: seq, Type: typ, CausationID: causation}
	}
	h.deliver("s", []messages.Envelope{ev(1, messages.TypeTaskSubmitted, ""), ev(2, messages.TypeModelRequested, "")})
	h.openCall("s", "s/2")
	word := strings.Repeat("x", 1023) + " "
	seq := uint64(0)
	for range callTextMax/len(word) + 1 {
		seq++
		h.deliverDeltas("s", "", messages.ModelDelta{Key: "s/2", Step: 1, Seq: seq, Attempt: 1, Content: word})
	}
	h.mu.Lock()
	ct := h.streams["s"]["s/2"]
	over, kept := ct.over, ct.content.Len()
	h.mu.Unlock()
	if !over || kept != 0 {
		t.Fatalf("past the bound: over %v, %d bytes kept", over, kept)
	}
	live, stop := h.watch("s", true)
	defer stop()
	h.deliverDeltas("s", "", messages.ModelDelta{Key: "s/2", Step: 1, Seq: seq + 1, Attempt: 1, Content: "tail "})
	h.endDeltas("s", "", messages.DeltaEnd{Key: "s/2", Sent: int(seq + 1)})
	h.deliver("s", []messages.Envelope{ev(3, messages.TypeModelResponded, "s/2")})
	want := fmt.Sprintf("s/2#%d!=", seq)
	checkFeed(t, readDeltaFeed(t, live, 3), want, fmt.Sprintf("s/2#%d!=", seq+2), "3:model.responded")
}

// heldEffects answers each request when the test says (answer).
type heldEffects struct {
	actors.Effects
	mu      sync.Mutex
	reqs    []messages.EffectRequest
	replies []func(messages.EffectReply)
}

func (e *heldEffects) Perform(req messages.EffectRequest, reply func(messages.EffectReply)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reqs, e.replies = append(e.reqs, req), append(e.replies, reply)
}

func (e *heldEffects) answer(i int) {
	e.mu.Lock()
	reply := e.replies[i]
	e.mu.Unlock()
	reply(messages.EffectReply{Message: &messages.ChatMessage{Role: "assistant", Content: "done"}})
}

// A call that did not stream onto the bus (no node watched its session as it
// started) whose session another node watches by the time it is answered: the owner
// publishes the call's end before the answer goes on, so that the watcher's node,
// which got the call's model.requested and holds its model.responded for the end of
// its deltas, lets it go at once rather than after deltaTailWait. So whether the
// owner performs the call or another node does.
func TestOwnerEndsACallThatDidNotStreamToAWatcherThatCameDuringIt(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	for _, local := range []bool{false, true} {
		t.Run(map[bool]string{false: "remote performer", true: "owner performs"}[local], func(t *testing.T) {
			ownerPub := &recordingPublisher{}
			owner := newHub(nil, nil)
			newClusterDeltas(owner, ownerPub, nil, "owner", local, nil, logger)
			defer owner.close()
			perf := &heldEffects{}
			effects := streamingRequests{Effects: perf, hub: owner, local: local}

			api := newHub(nil, nil)
			live, stop := api.watch("s", true)
			defer stop()
			newClusterDeltas(api, &recordingPublisher{}, nil, "api", false, nil, logger)
			w := api.subs["s"][0]
			api.mu.Lock()
			w.busDeltas = true // another node performs the session's calls
			api.mu.Unlock()
			defer func() {
				api.mu.Lock()
				w.busDeltas = false
				api.mu.Unlock()
			}()

			ev := func(seq uint64, typ messages.Type, causation string) messages.Envelope {
				return messages.Envelope{SessionID: "s", Seq: seq, Type: typ, CausationID: causation}
			}
			key := messages.EffectKey{SessionID: "s", Seq: 2}
			effects.Perform(messages.EffectRequest{SessionID: "s", Key: key, Model: &messages.ModelCall{}}, func(messages.EffectReply) {
				api.deliver("s", []messages.Envelope{ev(3, messages.TypeModelResponded, key.String())})
			})
			if perf.reqs[0].Stream {
				t.Fatal("a call with no watcher streams")
			}
			api.deliver("s", []messages.Envelope{ev(1, messages.TypeTaskSubmitted, ""), ev(2, messages.TypeModelRequested, "")})
			owner.cluster.leases.watch("s", time.Minute) // the api node's DeltaWatch
			perf.answer(0)
			ownerPub.mu.Lock()
			msgs := slices.Clone(ownerPub.msgs)
			ownerPub.mu.Unlock()
			for _, msg := range msgs {
				api.handleDeltas(msg)
			}
			checkFeed(t, readDeltaFeed(t, live, 3), "1:task.submitted", "2:model.requested", "3:model.responded")
			if n := api.tailTimeouts.Load(); n != 0 {
				t.Fatalf("%d answers held for deltaTailWait in full", n)
			}
		})
	}
}

// A watcher of a call another node performs that came during it (its node had no
// text of it) gets the text the performer sends when asked (deliverCatchUp), then
// the deltas after it: those the text stands for, which came before it, are not
// shown again; the call's end releases its answer; a text that comes after the
// answer is not shown.
func TestHubCatchesAWatcherUpWithTheTextFromThePerformer(t *testing.T) {
	h := newHub(nil, nil)
	live, stop := h.watch("s", true)
	defer stop()
	w := h.subs["s"][0]
	h.mu.Lock()
	w.busDeltas = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		w.busDeltas = false
		h.mu.Unlock()
	}()
	delta := func(seq uint64, text string) messages.ModelDelta {
		return messages.ModelDelta{Key: "s/2", Step: 1, Seq: seq, Attempt: 1, Content: text}
	}
	h.deliverDeltas("s", "p", delta(5, "five "), delta(6, "six ")) // before the text: they wait
	text := delta(6, "one two three four five six ")
	text.Reset = true
	h.deliverCatchUp("s", "p", []messages.ModelDelta{text}, messages.DeltaEnd{Key: "s/2", Sent: 6})
	h.deliverDeltas("s", "p", delta(7, "seven "))
	h.deliver("s", []messages.Envelope{{SessionID: "s", Seq: 3, Type: messages.TypeModelResponded, CausationID: "s/2"}})
	checkFeed(t, readDeltaFeed(t, live, 2), "s/2#6!=one two three four five six", "s/2#7=seven")
	h.endDeltas("s", "p", messages.DeltaEnd{Key: "s/2", Sent: 7})
	checkFeed(t, readDeltaFeed(t, live, 1), "3:model.responded")
	h.deliverCatchUp("s", "p", []messages.ModelDelta{text}, messages.DeltaEnd{Key: "s/2", Sent: 6})
	readDeltaFeed(t, live, 0)
	if n := h.tailTimeouts.Load(); n != 0 {
		t.Fatalf("%d answers held for deltaTailWait in full", n)
	}
}

// A watcher that got a call's model.requested but none of its deltas (the call did
// not stream onto the bus as it started: its owner heard of the watcher during it
// and streams it from then on, watchedNow) takes the text the performer sends
// (deliverCatchUp), then the deltas after it, and the answer with no reset.
func TestHubCatchesUpAWatcherThatHadTheCallsRequestOnly(t *testing.T) {
	h := newHub(nil, nil)
	live, stop := h.watch("s", true)
	defer stop()
	w := h.subs["s"][0]
	h.mu.Lock()
	w.busDeltas = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		w.busDeltas = false
		h.mu.Unlock()
	}()
	ev := func(seq uint64, typ messages.Type, causation string) messages.Envelope {
		return messages.Envelope{SessionID: "s", Seq: seq, Type: typ, CausationID: causation}
	}
	h.deliver("s", []messages.Envelope{ev(1, messages.TypeTaskSubmitted, ""), ev(2, messages.TypeModelRequested, "")})
	text := messages.ModelDelta{Key: "s/2", Step: 1, Seq: 20, Attempt: 1, Reset: true, Content: "one to twenty "}
	h.deliverCatchUp("s", "p", []messages.ModelDelta{text}, messages.DeltaEnd{Key: "s/2", Sent: 20})
	h.deliverDeltas("s", "p", messages.ModelDelta{Key: "s/2", Step: 1, Seq: 21, Attempt: 1, Content: "twenty-one "})
	h.endDeltas("s", "p", messages.DeltaEnd{Key: "s/2", Sent: 21})
	h.deliver("s", []messages.Envelope{ev(3, messages.TypeModelResponded, "s/2")})
	checkFeed(t, readDeltaFeed(t, live, 5), "1:task.submitted", "2:model.requested", "s/2#20!=one to twenty", "s/2#21=twenty-one", "3:model.responded")
}
