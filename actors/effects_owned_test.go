package actors_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// errNotOwned is what the test's ownership check answers for a session the node
// lost.
var errNotOwned = errors.New("another node owns the session now")

// ownership is a node's ownership of its sessions as the test sets it, and the
// checks the effects asked of it.
type ownership struct {
	mu   sync.Mutex
	lost map[string]bool
	// epoch is the node's lease: a call claimed under one fails its check under
	// another (regain).
	epoch  int
	asked  []string
	hold   chan struct{} // when set, a check waits for it
	asking chan string
}

// claim is the claim of Owned: the check of a call requested now.
func (o *ownership) claim(sessionID string) func(context.Context) error {
	o.mu.Lock()
	epoch := o.epoch
	o.mu.Unlock()
	return func(ctx context.Context) error {
		if err := o.owned(ctx, sessionID); err != nil {
			return err
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.epoch != epoch {
			return errNotOwned
		}
		return nil
	}
}

// regain is the node losing its sessions and owning them again, under a new
// lease.
func (o *ownership) regain() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lost = map[string]bool{}
	o.epoch++
}

func (o *ownership) owned(ctx context.Context, sessionID string) error {
	o.mu.Lock()
	o.asked = append(o.asked, sessionID)
	hold := o.hold
	o.mu.Unlock()
	if o.asking != nil {
		o.asking <- sessionID
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lost[sessionID] {
		return errNotOwned
	}
	return nil
}

func (o *ownership) lose(sessionID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lost[sessionID] = true
}

// ownedBehindARunningCall starts effects that perform one tool call at a time,
// each held by g until the test releases it, and their Owned view under own,
// which owns every session at first; it performs a/1 through that view, and
// returns once a/1 runs: the calls the test performs next queue behind it.
func ownedBehindARunningCall(t *testing.T) (g *gate, e *actors.LocalEffects, own *ownership, owned actors.Effects, r *replies) {
	t.Helper()
	g = newGate()
	e = actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, g), ToolConcurrency: 1})
	t.Cleanup(func() { _ = e.Close() })
	own = &ownership{lost: map[string]bool{}}
	owned = e.Owned(own.claim)
	r = newReplies()
	owned.Perform(toolRequest("a", 1, "gate"), r.to)
	waitUntil(t, "a/1 running", func() bool { return len(g.started) == 1 })
	return g, e, own, owned, r
}

// callKey is the key of session s's call seq.
func callKey(s string, seq uint64) messages.EffectKey {
	return messages.EffectKey{SessionID: s, Seq: seq}
}

// A call of a session its node owned when the session asked for it, queued behind
// its performer's concurrency bound, and whose session another node took over
// while it waited, never starts: it is asked about its ownership as it leaves the
// queue, not only as it is requested. Before, it started once a slot was free, and
// the session's new owner performed it too, under the same key. It is answered
// nothing (its session's next owner performs it), its slot goes to the next call,
// and its key is forgotten: asked again once the node owns the session again, it
// is performed.
func TestLocalEffectsOwnedCallsStartOnlyWhileOwned(t *testing.T) {
	g, e, own, owned, r := ownedBehindARunningCall(t)

	owned.Perform(toolRequest("lost", 2, "gate"), r.to) // queued behind a/1
	owned.Perform(toolRequest("a", 3, "gate"), r.to)    // queued behind it
	own.lose("lost")                                    // the node loses the session meanwhile
	close(g.release)
	waitUntil(t, "a/1 and a/3 answered", func() bool { return len(r.of(callKey("a", 1))) == 1 && len(r.of(callKey("a", 3))) == 1 })

	var started []string
	for len(g.started) > 0 {
		started = append(started, <-g.started)
	}
	if got := strings.Join(started, " "); got != "a/1 a/3" {
		t.Fatalf("calls started: %q, want \"a/1 a/3\": the call of the session the node lost while it was queued started", got)
	}
	if n := len(r.of(callKey("lost", 2))); n != 0 {
		t.Errorf("the call not started was answered %d times, want none (its session's next owner performs it)", n)
	}
	if e.Known(callKey("lost", 2)) {
		t.Error("the call not started is still known: asked again, it would never be performed")
	}

	// The node owns the session again (a later assignment): asked again, the call is
	// performed.
	own.mu.Lock()
	own.lost = map[string]bool{}
	own.mu.Unlock()
	owned.Perform(toolRequest("lost", 2, "gate"), r.to)
	waitUntil(t, "lost/2 performed once the session is owned again", func() bool { return len(r.of(callKey("lost", 2))) == 1 })
	if rep := r.of(callKey("lost", 2))[0]; rep.Output != "done lost/2" {
		t.Errorf("lost/2 answered %+v", rep)
	}
}

// A call whose ownership check waits (the node confirms, after a pause, that it
// still owns its sessions) starts once the check answered, and is answered as
// usual; the calls of the effects' other users (the requests a node serves for
// other nodes: Perform, PerformWhile) are not checked.
func TestLocalEffectsOwnedCallsWaitForTheCheck(t *testing.T) {
	g := newGate()
	close(g.release)
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t, g), ToolConcurrency: 4})
	t.Cleanup(func() { _ = e.Close() })
	own := &ownership{lost: map[string]bool{}, hold: make(chan struct{}), asking: make(chan string, 4)}
	r := newReplies()

	e.Owned(own.claim).Perform(toolRequest("a", 1, "gate"), r.to)
	select {
	case s := <-own.asking:
		if s != "a" {
			t.Fatalf("asked about %q, want a", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call of an owned session started without asking whether the node still owns it")
	}
	e.Perform(toolRequest("served", 1, "gate"), r.to)
	waitUntil(t, "the served call answered", func() bool { return len(r.of(messages.EffectKey{SessionID: "served", Seq: 1})) == 1 })
	if len(g.started) != 1 {
		t.Fatalf("%d calls started, want the served one only: the owned one waits for its check", len(g.started))
	}
	close(own.hold)
	waitUntil(t, "a/1 answered", func() bool { return len(r.of(messages.EffectKey{SessionID: "a", Seq: 1})) == 1 })
	own.mu.Lock()
	asked := strings.Join(own.asked, " ")
	own.mu.Unlock()
	if asked != "a" {
		t.Errorf("ownership asked for %q, want \"a\" only", asked)
	}
}

// A request a node serves for another (PerformWhile, with no check) that joins a
// queued call of its own session under the same key, a session the node lost
// meanwhile, is performed and answered when that call fails its check: only the
// session's own request is dropped. Before, both were dropped, and the served
// request (whose context is not watched once it joined a call) was neither
// answered nor withdrawn: its handler waited until the node gave up the
// partition it served, holding its slot of the requests in flight.
func TestLocalEffectsOwnedCallJoinedByAServedRequestIsPerformedForIt(t *testing.T) {
	g, e, own, owned, r := ownedBehindARunningCall(t)
	ownReplies := newReplies()
	owned.Perform(toolRequest("s", 2, "gate"), ownReplies.to) // the node's own session's call, queued
	own.lose("s")                                             // the session's partition moves to another node
	served := make(chan messages.EffectReply, 1)
	withdrawn := make(chan struct{})
	// That node, which performs no tools, asks this one to perform s/2: the request
	// joins the queued call.
	e.PerformWhile(context.Background(), toolRequest("s", 2, "gate"), func(rep messages.EffectReply) { served <- rep }, func() { close(withdrawn) })
	close(g.release)
	select {
	case rep := <-served:
		if rep.Error != "" || rep.Output != "done s/2" {
			t.Errorf("the served request was answered %+v, want the call's result", rep)
		}
	case <-withdrawn:
		t.Error("the served request was withdrawn, although its context lasts")
	case <-time.After(10 * time.Second):
		t.Fatal("the served request was neither answered nor withdrawn: dropped with the call of the session the node lost")
	}
	waitUntil(t, "a/1 answered", func() bool { return len(r.of(messages.EffectKey{SessionID: "a", Seq: 1})) == 1 })
	if n := len(ownReplies.of(messages.EffectKey{SessionID: "s", Seq: 2})); n != 0 {
		t.Errorf("the request of the session the node lost was answered %d times, want none (its next owner records the call)", n)
	}
}

// A call queued under the node's lease, which the node lost and took again under
// a new one while it waited (its session stopped meanwhile, and the session's
// owner in between performed the call under its key), never starts: its check
// asks for the lease it was requested under, not only for its session's
// partition. Asked again under the new lease (the session's next incarnation),
// it is performed.
func TestLocalEffectsOwnedCallOfAnEarlierLeaseNeverStarts(t *testing.T) {
	g, e, own, owned, r := ownedBehindARunningCall(t)
	owned.Perform(toolRequest("s", 2, "gate"), r.to) // queued under the first lease
	own.regain()                                     // lost, and owned again under a new lease
	close(g.release)
	waitUntil(t, "a/1 answered", func() bool { return len(r.of(callKey("a", 1))) == 1 })
	waitUntil(t, "s/2 dropped or answered", func() bool { return !e.Known(callKey("s", 2)) || len(r.of(callKey("s", 2))) > 0 })
	if n := len(r.of(callKey("s", 2))); n != 0 {
		t.Fatalf("the call queued under the earlier lease started and was answered %d times, want none: the node's owner in between performed it", n)
	}
	<-g.started // a/1
	if len(g.started) != 0 {
		t.Fatalf("%q started, want none after a/1", <-g.started)
	}
	owned.Perform(toolRequest("s", 2, "gate"), r.to) // the session's next incarnation
	waitUntil(t, "s/2 performed under the new lease", func() bool { return len(r.of(callKey("s", 2))) == 1 })
}

// A call queued under an earlier lease, asked again under the node's new one
// before it started (the session's next incarnation), is performed, for both:
// the latest check is the one asked.
func TestLocalEffectsOwnedCallAskedAgainUnderANewLeaseIsPerformed(t *testing.T) {
	g, _, own, owned, r := ownedBehindARunningCall(t)
	key := messages.EffectKey{SessionID: "s", Seq: 2}
	owned.Perform(toolRequest("s", 2, "gate"), r.to) // queued under the first lease
	own.regain()
	owned.Perform(toolRequest("s", 2, "gate"), r.to) // the next incarnation joins it
	close(g.release)
	waitUntil(t, "s/2 answered to both", func() bool { return len(r.of(key)) == 2 })
}
