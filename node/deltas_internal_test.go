package node

import (
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// A secret the model streams in pieces never reaches a watcher: the deltas carry
// whole words, redacted; a reset drops the text held for the failed attempt.
func TestDeltaRedactorRedactsSecretsSplitOverDeltas(t *testing.T) {
	const key = "sk-troupe-test-0123456789abcdefSECRET"
	x := &deltaRedactor{r: redact.New(key)}
	var shown strings.Builder
	for _, piece := range []string{"your key ", key[:5], key[5:20], key[20:] + " wo", "rks", " fine\n"} {
		if d, ok := x.pass(messages.ModelDelta{Content: piece}); ok {
			shown.WriteString(d.Content)
		}
	}
	if got, want := shown.String(), "your key "+redact.Redacted+" works fine\n"; got != want {
		t.Fatalf("shown %q, want %q", got, want)
	}
	if _, ok := x.pass(messages.ModelDelta{Content: "half"}); ok {
		t.Fatal("a word without its end was let through")
	}
	d, ok := x.pass(messages.ModelDelta{Content: "again ", Reset: true})
	if !ok || d.Content != "again " {
		t.Fatalf("after a reset: %+v %v, want only the new attempt's text", d, ok)
	}
	d, ok = x.pass(messages.ModelDelta{ToolCallIndex: 1, ToolCallID: "c1", ToolName: "http", Arguments: `{"auth": "` + key[:9]})
	if !ok || d.ToolName != "http" || strings.Contains(d.Arguments, "sk-troupe") {
		t.Fatalf("arguments: %+v %v", d, ok)
	}
	d, _ = x.pass(messages.ModelDelta{ToolCallIndex: 1, Arguments: key[9:] + `"} `})
	if strings.Contains(d.Arguments, "0123456789") || !strings.Contains(d.Arguments, redact.Redacted) {
		t.Fatalf("arguments: %q", d.Arguments)
	}
	long := strings.Repeat("x", maxHeld+10)
	if d, ok := x.pass(messages.ModelDelta{Content: long}); !ok || d.Content != long {
		t.Fatalf("a word past maxHeld is held: %v %d", ok, len(d.Content))
	}
}

// The hub places deltas among a session's events: those that come before their
// call's model.requested wait for it (the end of its deltas too), those after its
// model.responded are dropped, those of a call requested before the watcher came
// never show, and the deltas of a call that another node performs again (they come
// from another node, or number from 1 again) start with a Reset.
func TestHubPlacesDeltasAmongEvents(t *testing.T) {
	h := newHub(nil, nil)
	live, stop := h.watch("s", true)
	defer stop()
	ev := func(seq uint64, typ messages.Type, causation string) messages.Envelope {
		return messages.Envelope{SessionID: "s", Seq: seq, Type: typ, CausationID: causation}
	}
	delta := func(key string, seq uint64, text string) messages.ModelDelta {
		return messages.ModelDelta{Key: key, Seq: seq, Attempt: 1, Content: text}
	}
	h.deliver("s", []messages.Envelope{ev(1, messages.TypeTaskSubmitted, "")})
	h.deliverDeltas("s", "a", delta("s/1", 1, "old")) // a call before the watcher's first event: no place
	h.deliverDeltas("s", "a", delta("s/2", 1, "early "), delta("s/2", 2, "bird "))
	h.deliver("s", []messages.Envelope{ev(2, messages.TypeModelRequested, "")})
	h.deliverDeltas("s", "a", delta("s/2", 3, "sings "))
	h.deliverDeltas("s", "b", delta("s/2", 1, "again ")) // performed again, elsewhere
	h.deliverDeltas("s", "b", delta("s/2", 1, "twice ")) // numbered from 1 again
	h.endDeltas("s", "b", messages.DeltaEnd{Key: "s/2", Sent: 1})
	h.deliverDeltas("s", "", delta("s/3", 1, "waits ")) // its call comes later
	h.endDeltas("s", "", messages.DeltaEnd{Key: "s/3", Sent: 1})
	h.deliverDeltas("s", "", delta("s/9", 1, "never ")) // its call never comes
	h.deliver("s", []messages.Envelope{ev(3, messages.TypeModelRequested, ""), ev(4, messages.TypeModelResponded, "s/2")})
	h.deliverDeltas("s", "b", delta("s/2", 2, "late "))
	h.deliver("s", []messages.Envelope{ev(5, messages.TypeModelResponded, "s/3"), ev(10, messages.TypeTaskCompleted, "")})
	h.deliverDeltas("s", "", delta("s/9", 2, "too late "))

	var got []string
	for len(got) < 12 {
		select {
		case e := <-live:
			got = append(got, feedEntry(t, e))
		case <-time.After(5 * time.Second):
			t.Fatalf("got %q, then nothing", got)
		}
	}
	want := []string{"1:task.submitted", "2:model.requested", "s/2#1=early", "s/2#2=bird", "s/2#3=sings", "s/2#1!=again", "s/2#1!=twice",
		"3:model.requested", "s/3#1=waits", "4:model.responded", "5:model.responded", "10:task.completed"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	select {
	case e := <-live:
		t.Fatalf("after the task's end: %s %s", e.Type, e.Payload)
	default:
	}
}

// recordingPublisher keeps what is published.
type recordingPublisher struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, msgs...)
	return nil
}

func (p *recordingPublisher) Close() error { return nil }

// A call's deltas go on the bus in batches, in order: a burst is one message, and
// what is held when the call returns is published before done returns, with the
// call's end (alone when nothing is held); past deltaHeldMax waiting for the bus,
// deltas are dropped, never waited for, and the end counts them.
func TestDeltaStreamBatches(t *testing.T) {
	pub := &recordingPublisher{}
	c := &clusterDeltas{pub: pub, node: "perf", logger: slog.New(slog.DiscardHandler), linger: time.Hour}
	s := c.stream("s")
	for i := range deltaHeldMax + 10 {
		s.add(messages.ModelDelta{Key: "s/3", Seq: uint64(i + 1), Attempt: 1, Content: "x "})
	}
	s.done(messages.DeltaEnd{Key: "s/3", Sent: deltaHeldMax + 10})
	if len(pub.msgs) != 1 {
		t.Fatalf("%d messages for a burst, want 1", len(pub.msgs))
	}
	b, err := messages.DecodeDeltaBatch(pub.msgs[0].Payload)
	if err != nil {
		t.Fatal(err)
	}
	if b.Node != "perf" || b.SessionID != "s" || len(b.Deltas) != deltaHeldMax || pub.msgs[0].Metadata.Get(messages.MetaSessionID) != "s" ||
		b.End == nil || b.End.Sent != deltaHeldMax+10 {
		t.Fatalf("batch from %s of %s with %d deltas (want %d)", b.Node, b.SessionID, len(b.Deltas), deltaHeldMax)
	}
	for i, d := range b.Deltas {
		if d.Seq != uint64(i+1) {
			t.Fatalf("delta %d has seq %d", i, d.Seq)
		}
	}
	s.add(messages.ModelDelta{Key: "s/3", Seq: 2000, Attempt: 1, Content: "y "})
	s.done(messages.DeltaEnd{Key: "s/3", Sent: 1})
	if len(pub.msgs) != 2 {
		t.Fatalf("%d messages after the second done, want 2", len(pub.msgs))
	}
	s.done(messages.DeltaEnd{Key: "s/3"})
	if len(pub.msgs) != 3 {
		t.Fatalf("%d messages after the third done, want 3", len(pub.msgs))
	}
	if b, err := messages.DecodeDeltaBatch(pub.msgs[2].Payload); err != nil || len(b.Deltas) != 0 || b.End == nil || b.End.Key != "s/3" {
		t.Fatalf("the end of a call with nothing held: %+v %v", b, err)
	}
}

// A watcher whose deltas come over the bus gets a call's model.responded only after
// the call's last deltas: the answer and the events after it wait for the end of
// the call's deltas (messages.DeltaEnd), or deltaTailWait when it never comes. When
// the watcher missed some of them (the end counts more than it was shown, or never
// came), an empty delta with Reset comes before the answer: the text shown is
// dropped for the answer, no gap stays.
func TestHubHoldsAnswerForItsCallsLastDeltas(t *testing.T) {
	h := newHub(nil, nil)
	live, stop := h.watch("s", true)
	defer stop()
	w := h.subs["s"][0]
	h.mu.Lock()
	w.busDeltas = true // another node performs the session's calls
	h.mu.Unlock()
	defer func() { // it holds no user of a cluster's delta feed
		h.mu.Lock()
		w.busDeltas = false
		h.mu.Unlock()
	}()
	ev := func(seq uint64, typ messages.Type, causation string) messages.Envelope {
		return messages.Envelope{SessionID: "s", Seq: seq, Type: typ, CausationID: causation}
	}
	delta := func(key string, seq uint64, text string) messages.ModelDelta {
		return messages.ModelDelta{Key: key, Seq: seq, Attempt: 1, Content: text}
	}
	read := func(n int, within time.Duration) []string {
		t.Helper()
		var got []string
		deadline := time.After(within)
		for len(got) < n {
			select {
			case e := <-live:
				got = append(got, feedEntry(t, e))
			case <-deadline:
				t.Fatalf("got %q, then nothing", got)
			}
		}
		select {
		case e := <-live:
			t.Fatalf("after %q: %s %s", got, e.Type, e.Payload)
		case <-time.After(50 * time.Millisecond):
		}
		return got
	}
	check := func(got []string, want ...string) {
		t.Helper()
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("got  %q\nwant %q", got, want)
		}
	}

	// The tail of a burst comes after the answer: the answer waits for it.
	h.deliver("s", []messages.Envelope{ev(1, messages.TypeTaskSubmitted, ""), ev(2, messages.TypeModelRequested, "")})
	h.deliverDeltas("s", "p", delta("s/2", 1, "one "))
	h.deliver("s", []messages.Envelope{ev(3, messages.TypeModelResponded, "s/2"), ev(4, messages.TypeTaskCompleted, ""),
		ev(5, messages.TypeTaskSubmitted, ""), ev(6, messages.TypeModelRequested, "")})
	h.deliverDeltas("s", "p", delta("s/2", 2, "two "), delta("s/2", 3, "three "))
	check(read(5, 5*time.Second), "1:task.submitted", "2:model.requested", "s/2#1=one", "s/2#2=two", "s/2#3=three")
	h.deliverDeltas("s", "p", delta("s/6", 1, "next ")) // the next call's, behind the held answer
	h.endDeltas("s", "p", messages.DeltaEnd{Key: "s/2", Sent: 3})
	check(read(5, 5*time.Second), "3:model.responded", "4:task.completed", "5:task.submitted", "6:model.requested", "s/6#1=next")

	// A batch in the middle was lost on the bus: the end tells, the text shown is reset.
	h.deliverDeltas("s", "p", delta("s/6", 3, "four "))
	h.endDeltas("s", "p", messages.DeltaEnd{Key: "s/6", Sent: 3})
	h.deliver("s", []messages.Envelope{ev(7, messages.TypeModelResponded, "s/6"), ev(8, messages.TypeModelRequested, "")})
	check(read(4, 5*time.Second), "s/6#3=four", "s/6#4!=", "7:model.responded", "8:model.requested")

	// The end never comes (the bus lost it): the answer goes on after deltaTailWait,
	// after a reset.
	h.deliverDeltas("s", "p", delta("s/8", 1, "five "))
	start := time.Now()
	h.deliver("s", []messages.Envelope{ev(9, messages.TypeModelResponded, "s/8"), ev(10, messages.TypeTaskCompleted, "")})
	check(read(4, 5*time.Second), "s/8#1=five", "s/8#2!=", "9:model.responded", "10:task.completed")
	if waited := time.Since(start); waited < deltaTailWait/2 {
		t.Errorf("the answer went on after %v without the end of its call's deltas", waited)
	}
}

// A node that takes partitions over says which (messages.DeltaOwners on
// troupe.deltas, the ones it did not own before only), and a node with watchers of
// deltas announces those of the sessions there again at once (a DeltaWatch on
// troupe.tasks), not at its next renewal: the sessions' new owner streams their
// calls from its first.
func TestTakenOverPartitionsHaveTheirWatchersAnnouncedAgain(t *testing.T) {
	partition := func(sid string, total int) int { return int(sid[len(sid)-1]-'0') % total }
	logger := slog.New(slog.DiscardHandler)
	ownerPub := &recordingPublisher{}
	owner := &Node{hub: newHub(nil, nil)}
	newClusterDeltas(owner.hub, ownerPub, nil, "owner", false, partition, logger)
	published := func(p *recordingPublisher) []*message.Message {
		p.mu.Lock()
		defer p.mu.Unlock()
		return slices.Clone(p.msgs)
	}
	waitPublished := func(p *recordingPublisher, n int) []*message.Message {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for len(published(p)) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d messages published, want %d", len(published(p)), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // and no more
		if got := published(p); len(got) != n {
			t.Fatalf("%d messages published, want %d", len(got), n)
		}
		return published(p)
	}
	owners := func(msg *message.Message) messages.DeltaOwners {
		t.Helper()
		o, err := messages.DecodeDeltaOwners(msg.Payload)
		if err != nil || msg.Metadata.Get(messages.MetaType) != messages.TypeDeltaOwners {
			t.Fatalf("%s: %v", msg.Metadata.Get(messages.MetaType), err)
		}
		return o
	}

	owner.takenOver([]int{0, 1, 2}, 6)
	first := owners(waitPublished(ownerPub, 1)[0])
	owner.takenOver([]int{0, 1, 2, 3}, 6)
	if o := owners(waitPublished(ownerPub, 2)[1]); o.Node != "owner" || !slices.Equal(o.Partitions, []int{3}) || o.Total != 6 {
		t.Fatalf("after taking partition 3 over: %+v", o)
	}
	owner.takenOver([]int{0, 1, 2, 3}, 6) // nothing new
	waitPublished(ownerPub, 2)

	watcherPub := &recordingPublisher{}
	watcherHub := newHub(nil, nil)
	newClusterDeltas(watcherHub, watcherPub, nil, "api", false, partition, logger)
	c := watcherHub.cluster
	defer c.close()
	c.watching.add("s1") // partition 1: its owner changes
	c.watching.add("s4") // partition 4: it does not
	waitPublished(watcherPub, 2)
	c.ownersChanged(ownerPub.msgs[0].Payload)
	again := waitPublished(watcherPub, 3)[2]
	w, err := messages.DecodeDeltaWatch(again.Payload)
	if err != nil || w.SessionID != "s1" || w.Node != "api" || again.Metadata.Get(messages.MetaType) != messages.TypeDeltaWatch {
		t.Fatalf("announced again: %+v %v (the owners of %v changed)", w, err, first.Partitions)
	}
	c.ownersChanged(ownerPub.msgs[0].Payload[:0]) // undecodable: nothing
	waitPublished(watcherPub, 3)
}

// BenchmarkUnwatchedCallDeltas is what a node spends on the deltas of one model
// call of a session it runs that nobody watches (it keeps their text for a watcher
// that may come during the call): the call's registration and end, and for each
// increment its redaction and the text kept; with none (a model that does not
// stream) and with 100.
func BenchmarkUnwatchedCallDeltas(b *testing.B) {
	n := &Node{hub: newHub(nil, nil), redactor: redact.New("sk-secret-0123456789")}
	req := messages.EffectRequest{SessionID: "s", Key: messages.EffectKey{SessionID: "s", Seq: 2}, Model: &messages.ModelCall{}}
	for _, count := range []int{0, 100} {
		ds := make([]messages.ModelDelta, count)
		for i := range ds {
			ds[i] = messages.ModelDelta{Key: "s/2", Step: 1, Seq: uint64(i + 1), Attempt: 1, Content: "tok" + strconv.Itoa(i) + " "}
		}
		b.Run(strconv.Itoa(count), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				to, done := n.modelDeltas(req)
				for _, d := range ds {
					to(d)
				}
				done()
			}
		})
	}
}
