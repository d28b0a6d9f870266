package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
)

// Hub fans a session's live events out to its watchers, from two sources:
//
//   - the node's own session actors hand it their events as soon as they are
//     durable (deliver), on the embedded bus and on a shared one alike;
//   - on a shared bus, a watcher of a session this node does not run (another node
//     owns its partition, or this node runs no sessions) reads it from
//     messages.TopicEvents (handle), through a subscription the hub holds only while
//     such watchers exist (busFeed): the node does not read back the events it
//     publishes itself.
//
// Each watcher has one source, chosen when it subscribes (local when the node owns
// the session then), so that it gets the session's events in seq order without
// duplicates: a session's events reach the hub in order from either source. When
// the node loses the session's partition (Revoked), its local watchers are
// disconnected and, watching again, read the bus; a remote watcher keeps reading the
// bus when the session moves here, as the new owner publishes its events there too.
//
// Delivery never blocks a session actor. Each watcher has a small channel and, behind
// it, a backlog that a goroutine of its own feeds into the channel while there is
// one; a watcher whose backlog passes its bound (backlogBound) has fallen behind and is
// disconnected (its channel closes): it resumes from the event log, which has every
// event. A watcher is also disconnected when the bus subscription it reads ends or
// cannot start.
type Hub struct {
	mu     sync.Mutex
	subs   map[string][]*watcher // by session; most have one
	remote map[string]int        // remote watchers by session
	closed bool

	// isLocal reports whether the node runs a session now (nil: it runs every one).
	isLocal func(sessionID string) bool
	// bus reads messages.TopicEvents for remote watchers; nil on the embedded bus.
	bus *busFeed
	// cluster carries model deltas between nodes (deltas_cluster.go); nil on the
	// embedded bus.
	cluster *clusterDeltas
	// streams holds the text so far of the model calls that stream through the hub,
	// by session and call key, for the watchers that come during them
	// (deltas_catchup.go).
	streams map[string]map[string]*callText
	// deltaWatchers counts the watchers of deltas in subs (added, not yet dropped),
	// changed under mu: while it is zero, wantsDeltas answers without taking mu,
	// which every model call asks.
	deltaWatchers atomic.Int64
	// tailTimeouts counts the model.responded held deltaTailWait in full for their
	// call's end (offerAmongDeltas): an end lost, or never sent.
	tailTimeouts atomic.Int64
	// tap also gets every message the bus feed reads (sessionFeed.fromBus); set once, before the feed runs.
	tap func(*message.Message)
	// load reads a session's event at seq from the log, for the reference of an event
	// too large for the bus (messages.MetaStored); set once, before the feed runs.
	load func(ctx context.Context, sessionID string, seq uint64) (messages.Envelope, error)
}

const (
	// watcherBuffer is the channel of a watcher: most watchers read as fast as a
	// session writes, so a small one does (an Envelope is 176 bytes, and the channel
	// is made for every Watch: a task's waiter has one of its own).
	watcherBuffer = 6
	// watcherBacklog bounds the events queued behind a delta watcher's channel.
	watcherBacklog = 256
	// watcherBehind is how many events a watcher without deltas may leave unread
	// (its channel, then its backlog) before it has fallen behind: 264, as when its
	// channel held 8 and its backlog watcherBacklog.
	watcherBehind = 8 + watcherBacklog
	// feedLinger is how long the hub keeps reading messages.TopicEvents after its last
	// remote watcher left, so that watchers that come and go (SSE clients
	// reconnecting, one task after another) do not subscribe again each time.
	feedLinger = 10 * time.Second
)

// watcher is one Watch. Its fields are guarded by Hub.mu.
type watcher struct {
	// last is the seq of the last event handed to a remote watcher: the bus may carry
	// a session's events again (a new owner publishes the latest task of the sessions
	// it takes over: actors.SetOwnership.Republish), and the copies are skipped.
	last uint64
	// What a watcher of deltas has been handed (deltas.go): the seq of its last
	// event, the model calls whose model.requested it has and not their
	// model.responded, and the deltas that came before their call's model.requested.
	seen     uint64
	calls    map[string]*deltaCall
	waiting  []waitingDelta
	answered []string // the keys of the calls last answered (answeredKept)
	// hold is a model.responded waiting for its call's last deltas, and the events
	// after it (deltas.go); nil when none waits.
	hold    *deltaHold
	ch      chan messages.Envelope
	backlog []messages.Envelope
	stop    chan struct{} // made with the first feeder, closed when gone, to stop it
	// The flags below are kept together, in one word (a watcher fits the 128-byte
	// size class).
	remote bool // reads the bus (handle), not the node's sessions (deliver)
	deltas bool // also gets the session's model.delta envelopes (deliverDeltas)
	// busDeltas: the watcher holds a user of the cluster's delta feed; announced: its
	// node tells the session's owner that it watches (clusterDeltas).
	busDeltas, announced bool
	feeding              bool // a goroutine feeds backlog into ch
	gone                 bool // disconnected: ch is closed, or is once the feeder returns
}

// newHub makes a hub. With sub (a shared bus), watchers of sessions for which isLocal
// is false read messages.TopicEvents through sub; without, every watcher is local.
func newHub(sub message.Subscriber, isLocal func(string) bool) *Hub {
	h := &Hub{subs: map[string][]*watcher{}, remote: map[string]int{}, isLocal: isLocal}
	if sub != nil {
		h.bus = &busFeed{sub: sub, topic: messages.TopicEvents, handle: h.handle, ended: h.dropRemote, linger: feedLinger}
	}
	return h
}

// handle delivers an event read from the bus to the session's remote watchers.
func (h *Hub) handle(msg *message.Message) {
	sid := msg.Metadata.Get(messages.MetaSessionID)
	if msg.Metadata.Get(messages.MetaStored) != "" && !h.dereference(msg) {
		h.lost(sid, msg)
		return
	}
	if h.tap != nil {
		h.tap(msg)
	}
	h.mu.Lock()
	watched := h.remote[sid] > 0
	h.mu.Unlock()
	if !watched {
		return
	}
	e, err := messages.Unmarshal(msg.Payload)
	if err != nil {
		return // the log holds the event; a bad bus copy is not worth a retry
	}
	h.fanOut(sid, []messages.Envelope{e}, true)
}

// dereference puts into msg, the reference of an event too large for the bus, the event
// itself, read from the log. It reports false when that failed: the event is then
// dropped here, as an undecodable bus copy is (handle tells lost).
func (h *Hub) dereference(msg *message.Message) bool {
	reference, err := messages.Unmarshal(msg.Payload)
	if err != nil || h.load == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := h.load(ctx, reference.SessionID, reference.Seq)
	if err != nil || e.ID != reference.ID {
		return false
	}
	b, err := messages.Marshal(e)
	if err != nil {
		return false
	}
	msg.Payload = b
	msg.Metadata.Set(messages.MetaStored, "")
	return true
}

// lost is told of the bus copy of a session's event that could not be read from
// the log (dereference): the session's remote watchers are disconnected, so that
// they catch up from the log, which has the event, rather than wait for it (a
// stream would hold every later event behind it, and miss a task's end for good),
// and the tap gets the reference, for the session feed's clients to learn that
// they missed a change (sessionFeed.fromBus).
func (h *Hub) lost(sessionID string, msg *message.Message) {
	if h.tap != nil {
		h.tap(msg)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range slices.Clone(h.subs[sessionID]) {
		if w.remote {
			h.drop(sessionID, w)
		}
	}
}

// deliver hands a session's events, in order, to its local watchers: the node's
// session actors call it (SessionDeps.Live).
func (h *Hub) deliver(sessionID string, events []messages.Envelope) {
	h.fanOut(sessionID, events, false)
}

// fanOut hands a session's events, in order, to its watchers of one source.
func (h *Hub) fanOut(sessionID string, events []messages.Envelope, remote bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range events {
		if e.Type == messages.TypeModelResponded {
			h.forgetCall(sessionID, e.CausationID)
		}
	}
	var behind []*watcher // rare: dropped once the loop is done with the slice
	for _, w := range h.subs[sessionID] {
		if w.remote != remote {
			continue
		}
		for _, e := range events {
			if remote && e.Seq != 0 {
				if e.Seq <= w.last {
					continue // published again
				}
				w.last = e.Seq
			}
			if !h.offer(sessionID, w, e) {
				behind = append(behind, w)
				break
			}
		}
	}
	for _, w := range behind {
		h.drop(sessionID, w)
	}
}

// offer hands e to w, or, for a watcher of deltas, may hold it behind the last
// deltas of a model call (offerAmongDeltas). It reports false when w fell behind
// (the caller drops it). The caller holds h.mu.
func (h *Hub) offer(sessionID string, w *watcher, e messages.Envelope) bool {
	if w.deltas {
		return h.offerAmongDeltas(sessionID, w, e)
	}
	return h.send(sessionID, w, e)
}

// send puts e into w's channel, or behind it in its backlog; it reports false when
// the backlog is full (w fell behind). The caller holds h.mu.
func (h *Hub) send(sessionID string, w *watcher, e messages.Envelope) bool {
	if w.feeding {
		if len(w.backlog) >= w.backlogBound() {
			return false
		}
		w.backlog = append(w.backlog, e)
	} else {
		select {
		case w.ch <- e:
		default:
			w.backlog = append(w.backlog, e)
			w.feeding = true
			if w.stop == nil {
				w.stop = make(chan struct{})
			}
			go h.feed(w)
		}
	}
	if w.deltas {
		h.track(sessionID, w, e)
	}
	return true
}

// backlogBound is how many events may wait in w's backlog.
func (w *watcher) backlogBound() int {
	if w.deltas {
		return watcherBacklog
	}
	return watcherBehind - watcherBuffer
}

// feed moves w's backlog into its channel, in order, until the backlog is empty or
// w is gone.
func (h *Hub) feed(w *watcher) {
	for {
		h.mu.Lock()
		if w.gone || len(w.backlog) == 0 {
			w.feeding = false
			if w.gone {
				close(w.ch)
			}
			w.backlog = nil
			h.mu.Unlock()
			return
		}
		e := w.backlog[0]
		w.backlog[0] = messages.Envelope{}
		w.backlog = w.backlog[1:]
		h.mu.Unlock()
		select {
		case w.ch <- e:
		case <-w.stop:
		}
	}
}

// drop disconnects w. The caller holds h.mu.
func (h *Hub) drop(sessionID string, w *watcher) {
	if w.gone {
		return
	}
	w.gone = true
	if w.deltas {
		h.deltaWatchers.Add(-1)
	}
	if w.stop != nil {
		close(w.stop)
	}
	if !w.feeding {
		close(w.ch)
	}
	set := slices.DeleteFunc(h.subs[sessionID], func(x *watcher) bool { return x == w })
	if len(set) == 0 {
		delete(h.subs, sessionID)
	} else {
		h.subs[sessionID] = set
	}
	if w.remote {
		if h.remote[sessionID]--; h.remote[sessionID] <= 0 {
			delete(h.remote, sessionID)
		}
		// Not under h.mu: the feed's lock is held while it subscribes, and while a
		// stopped subscription's last message reaches handle.
		go h.bus.release()
	}
	if w.busDeltas {
		go h.cluster.feed.release()
	}
	if w.deltas && !slices.ContainsFunc(h.subs[sessionID], func(x *watcher) bool { return x.deltas }) {
		h.forgetRemoteCalls(sessionID)
	}
	if w.announced {
		h.cluster.watching.remove(sessionID)
	}
}

// subscribe adds a watcher of a session: local when the node runs the session now (or
// has no bus feed), else remote, once the bus feed reads messages.TopicEvents, so
// that every event published after subscribe returned reaches it. A watcher the feed
// cannot serve gets a closed channel: it reads the log.
func (h *Hub) subscribe(sessionID string) (<-chan messages.Envelope, func()) {
	return h.watch(sessionID, false)
}

// watch is subscribe; with deltas, a local watcher also gets the session's
// model.delta envelopes (deliverDelta).
func (h *Hub) watch(sessionID string, deltas bool) (<-chan messages.Envelope, func()) {
	size := watcherBuffer
	if deltas {
		size = deltaWatcherBuffer
	}
	w := &watcher{ch: make(chan messages.Envelope, size), deltas: deltas}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		close(w.ch)
		return w.ch, func() {}
	}
	// Decided under h.mu, so that a Revoked that makes the session remote either
	// comes first or finds the watcher (revoked).
	if h.bus == nil || h.isLocal == nil || h.isLocal(sessionID) {
		h.add(sessionID, w)
		if deltas {
			h.catchUp(sessionID, w)
		}
		h.mu.Unlock()
		if deltas {
			h.joinDeltas(sessionID, w)
		}
		return w.ch, h.unsubscriber(sessionID, w)
	}
	h.mu.Unlock()
	// Outside h.mu: subscribing waits for the broker.
	if err := h.bus.acquire(); err != nil {
		close(w.ch)
		return w.ch, func() {}
	}
	w.remote = true
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.bus.release()
		close(w.ch)
		return w.ch, func() {}
	}
	h.add(sessionID, w)
	h.remote[sessionID]++
	if deltas {
		h.catchUp(sessionID, w)
	}
	h.mu.Unlock()
	if deltas {
		h.joinDeltas(sessionID, w)
	}
	return w.ch, h.unsubscriber(sessionID, w)
}

// add registers w. The caller holds h.mu.
func (h *Hub) add(sessionID string, w *watcher) {
	h.subs[sessionID] = append(h.subs[sessionID], w)
	if w.deltas {
		h.deltaWatchers.Add(1)
	}
}

func (h *Hub) unsubscriber(sessionID string, w *watcher) func() {
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.drop(sessionID, w)
	}
}

// revoked disconnects the local watchers of sessions the node no longer runs (its
// partitions were revoked): watching again, they read the bus, and the log for what
// they missed. Call it after isLocal changed.
func (h *Hub) revoked() {
	if h.bus == nil || h.isLocal == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for sid, set := range h.subs {
		if h.isLocal(sid) {
			continue
		}
		for _, w := range slices.Clone(set) {
			if !w.remote {
				h.drop(sid, w)
			}
		}
	}
}

// dropRemote disconnects every remote watcher: the bus feed they read ended.
func (h *Hub) dropRemote() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sid, set := range h.subs {
		for _, w := range slices.Clone(set) {
			if w.remote {
				h.drop(sid, w)
			}
		}
	}
}

func (h *Hub) close() {
	h.mu.Lock()
	h.closed = true
	h.streams = nil
	for sid, set := range h.subs {
		for _, w := range slices.Clone(set) {
			h.drop(sid, w)
		}
	}
	h.mu.Unlock()
	if h.bus != nil {
		h.bus.close(5 * time.Second)
	}
	if h.cluster != nil {
		h.cluster.close()
	}
}

func (h *Hub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// errHubClosed is why a watcher of a closed hub reads nothing.
var errHubClosed = errors.New("node: the live event hub is closed")

// busFeed is the hub's subscription to a live topic on a shared bus (Bus.Live: every
// partition from the latest offset, in no consumer group): messages.TopicEvents,
// held while remote watchers exist, and messages.TopicDeltas, held while watchers of
// deltas that other nodes may send exist (clusterDeltas); each for linger after the
// last one left. Each message read is handed to handle and acked.
type busFeed struct {
	sub    message.Subscriber
	topic  string
	handle func(*message.Message)
	// ended is called when the subscription ends by itself (the subscriber closed).
	ended  func()
	linger time.Duration

	mu     sync.Mutex // held while subscribing, so that watchers wait for one subscription
	users  int        // remote watchers
	cur    *feedRun   // the running subscription, nil when none
	prev   *feedRun   // the last one stopped, until its goroutine returned
	idle   *time.Timer
	closed bool
}

// feedRun is one subscription of a busFeed.
type feedRun struct {
	cancel  context.CancelFunc
	stopped atomic.Bool // its messages are no longer handed to the hub
	done    chan struct{}
}

// acquire counts a remote watcher and returns once the feed reads the topic (from
// the end offsets fixed by Subscribe, on Kafka).
func (f *busFeed) acquire() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errHubClosed
	}
	if f.idle != nil {
		f.idle.Stop()
		f.idle = nil
	}
	if f.cur == nil {
		if f.prev != nil {
			// Its last messages must not reach a watcher of the next subscription,
			// which reads them again.
			<-f.prev.done
			f.prev = nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := f.sub.Subscribe(ctx, f.topic)
		if err != nil {
			cancel()
			return err
		}
		run := &feedRun{cancel: cancel, done: make(chan struct{})}
		f.cur = run
		go f.read(run, ch)
	}
	f.users++
	return nil
}

// release uncounts a remote watcher; the subscription stops after linger without one.
func (f *busFeed) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.users--; f.users > 0 || f.cur == nil || f.closed {
		return
	}
	if f.idle != nil {
		f.idle.Stop()
	}
	f.idle = time.AfterFunc(f.linger, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.users == 0 && f.cur != nil {
			f.stop()
		}
	})
}

// stop ends the running subscription. The caller holds f.mu.
func (f *busFeed) stop() {
	run := f.cur
	f.cur, f.prev = nil, run
	run.stopped.Store(true)
	run.cancel()
}

// read hands the subscription's messages to handle until its channel closes. A
// subscription that ends by itself (the subscriber closed) calls ended: on
// messages.TopicEvents, it disconnects the remote watchers, which resume from the log.
func (f *busFeed) read(run *feedRun, ch <-chan *message.Message) {
	for msg := range ch {
		if !run.stopped.Load() {
			f.handle(msg)
		}
		msg.Ack()
	}
	// Before taking f.mu: acquire waits for done while it holds f.mu.
	close(run.done)
	f.mu.Lock()
	ended := f.cur == run
	if ended {
		f.cur = nil
		run.stopped.Store(true)
	}
	f.mu.Unlock()
	if ended && f.ended != nil {
		f.ended()
	}
}

// close stops the subscription for good, waiting at most timeout for it to end.
func (f *busFeed) close(timeout time.Duration) {
	f.mu.Lock()
	f.closed = true
	if f.idle != nil {
		f.idle.Stop()
		f.idle = nil
	}
	if f.cur != nil {
		f.stop()
	}
	prev := f.prev
	f.mu.Unlock()
	if prev == nil {
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-prev.done:
	case <-t.C:
	}
}
