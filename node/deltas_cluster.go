package node

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// How model deltas cross a cluster (WatchDeltas tells the whole walk).
const (
	// deltaLinger is how long a performing node gathers a call's deltas before it
	// publishes them as one messages.DeltaBatch: a burst of tokens (a provider sends
	// several per network read) makes one bus message, a steady stream at most one
	// per deltaLinger (40 a second), and a reader sees the text at most this much
	// later than on the performing node. Measured with 100 tokens: all at once, 1
	// message; at 500 tokens/s, 9; at 100/s, 34; at 50/s, 50 (at 10 ms: 1, 19, 52,
	// 100; without batching, 100 each).
	deltaLinger = 25 * time.Millisecond
	// deltaHeldMax and deltaHeldBytes bound a call's deltas waiting for the bus (one
	// batch, while the previous one is being published); more are dropped, so a slow
	// broker never holds a model call.
	deltaHeldMax   = 1024
	deltaHeldBytes = 256 << 10
	// deltaFlushWait bounds how long a model call's reply waits for its last deltas
	// and their end to be published (the watchers' nodes hold the call's
	// model.responded until the end came, deltaTailWait at most).
	deltaFlushWait = time.Second
	// deltaWatchTTL is how long an owner streams a session's calls for a remote
	// watcher after hearing of it (messages.DeltaWatch), deltaWatchRenew how often the
	// watcher's node says so again while it watches (and at once when a node says it
	// took the session's partition over: takenOver), deltaWatchTTLMax the most a
	// DeltaWatch can ask for.
	deltaWatchTTL    = 15 * time.Second
	deltaWatchRenew  = 5 * time.Second
	deltaWatchTTLMax = time.Minute
)

// clusterDeltas carries model deltas between the nodes of a cluster: on the
// watcher's node, the announcements of its watchers to the sessions' owners
// (watching) and the subscription to messages.TopicDeltas (feed); on a session's
// owner, the remote watchers it heard of (leases); on the node performing a call,
// the batches it publishes (stream).
type clusterDeltas struct {
	pub    message.Publisher
	node   string
	logger *slog.Logger
	linger time.Duration // deltaLinger
	// performsModels: the node performs its own sessions' model calls, so its local
	// watchers need not read the bus.
	performsModels bool
	feed           *busFeed
	leases         deltaLeases
	watching       *deltaAnnouncer
	// partition maps a session to its partition of messages.TopicTasks (Bus.Partition;
	// nil on a bus that does not shard sessions); owned is the node's last assignment
	// of them (Assigned), of ownedOf.
	partition func(sessionID string, total int) int
	// active are the calls this node streams onto the bus now, by session and key:
	// a node with a new watcher of one of their sessions asks for their text so far
	// (catchUpAsked).
	activeMu sync.Mutex
	active   map[string]map[string]*deltaStream
	ownedMu  sync.Mutex
	owned    map[int]bool
	ownedOf  int
}

// newClusterDeltas sets up h (a hub on a shared bus, reading through live) to carry
// deltas between nodes.
func newClusterDeltas(h *Hub, pub message.Publisher, live message.Subscriber, node string, performsModels bool,
	partition func(string, int) int, logger *slog.Logger) {
	c := &clusterDeltas{pub: pub, node: node, logger: logger, linger: deltaLinger, performsModels: performsModels,
		leases: deltaLeases{until: map[string]time.Time{}}, partition: partition}
	c.feed = &busFeed{sub: live, topic: messages.TopicDeltas, handle: h.handleDeltas, linger: feedLinger,
		ended: func() {
			logger.Debug("the delta feed ended; deltas from other nodes stop until the next watcher of deltas")
		}}
	c.watching = &deltaAnnouncer{c: c, by: map[string]*announcement{}}
	h.cluster = c
}

// begin registers s, a call this node performs, until end. While one streams onto
// the bus, the node reads messages.TopicDeltas, where other nodes ask for the text
// so far of the calls of their new watchers' sessions; one that does not stream
// onto the bus yet starts to when a node announces a watcher of its session
// (watchedNow).
func (c *clusterDeltas) begin(s *deltaStream) {
	c.activeMu.Lock()
	if c.active == nil {
		c.active = map[string]map[string]*deltaStream{}
	}
	if c.active[s.sid] == nil {
		c.active[s.sid] = map[string]*deltaStream{}
	}
	c.active[s.sid][s.key] = s
	c.activeMu.Unlock()
	if s.onBus() {
		c.read(s)
	}
}

// read has the node read messages.TopicDeltas for s, a call that streams onto the
// bus, until end.
func (c *clusterDeltas) read(s *deltaStream) {
	go func() { // not in the model call's way: subscribing waits for the broker
		if err := c.feed.acquire(); err != nil {
			c.logger.Debug("cannot read the asks for the text of calls streaming", "session", s.sid, "err", err)
			return
		}
		c.activeMu.Lock()
		s.reading = true
		ended := c.active[s.sid][s.key] != s
		c.activeMu.Unlock()
		if ended {
			c.end(s)
		}
	}()
}

// watchedNow streams onto the bus the calls of sessionID this node performs that
// do not stream onto it yet: another node announced a watcher of the session
// (messages.DeltaWatch), which came during them. Each begins with its text so far
// (deltaStream.catchUp).
func (c *clusterDeltas) watchedNow(sessionID string) {
	c.activeMu.Lock()
	var streams []*deltaStream
	for _, s := range c.active[sessionID] {
		if !s.onBus() {
			streams = append(streams, s)
		}
	}
	c.activeMu.Unlock()
	for _, s := range streams {
		go s.catchUp() // not in the handler's way: it publishes
	}
}

// end unregisters s (begin).
func (c *clusterDeltas) end(s *deltaStream) {
	c.activeMu.Lock()
	if c.active[s.sid][s.key] == s {
		delete(c.active[s.sid], s.key)
		if len(c.active[s.sid]) == 0 {
			delete(c.active, s.sid)
		}
	}
	reading := s.reading
	s.reading = false
	c.activeMu.Unlock()
	if reading {
		c.feed.release()
	}
}

// askCatchUp asks the nodes streaming calls of sessionID for their text so far
// (messages.TypeDeltaCatchUpAsk).
func (c *clusterDeltas) askCatchUp(sessionID string) {
	b, err := messages.EncodeCommand(&messages.DeltaWatch{SessionID: sessionID, Node: c.node, TTLMS: deltaWatchTTL.Milliseconds()})
	if err != nil {
		return // a struct of strings and numbers: it cannot fail
	}
	msg := message.NewMessage(watermill.NewUUID(), b)
	msg.Metadata.Set(messages.MetaSessionID, sessionID)
	msg.Metadata.Set(messages.MetaType, messages.TypeDeltaCatchUpAsk)
	if err := c.pub.Publish(messages.TopicDeltas, msg); err != nil {
		c.logger.Debug("cannot ask for the text of the calls streaming; the watcher gets their next deltas only", "session", sessionID, "err", err)
	}
}

// catchUpAsked answers a messages.TypeDeltaCatchUpAsk: each call of the session
// this node streams now publishes its text so far.
func (c *clusterDeltas) catchUpAsked(payload []byte) {
	w, err := messages.DecodeDeltaWatch(payload)
	if err != nil || w.Node == c.node {
		return
	}
	c.activeMu.Lock()
	streams := make([]*deltaStream, 0, len(c.active[w.SessionID]))
	for _, s := range c.active[w.SessionID] {
		streams = append(streams, s)
	}
	c.activeMu.Unlock()
	for _, s := range streams {
		go s.catchUp() // not in the feed's way: it publishes
	}
}

func (c *clusterDeltas) close() {
	c.watching.close()
	c.feed.close(5 * time.Second)
}

// joinDeltas connects a new watcher of deltas to the cluster: it reads
// messages.TopicDeltas when another node may perform its session's calls (the
// session runs elsewhere, or this node has no models role), and the session's owner
// hears of it when that is another node. Both are in place when it returns, so that
// a task submitted after has its calls streamed. The caller does not hold h.mu.
func (h *Hub) joinDeltas(sessionID string, w *watcher) {
	c := h.cluster
	if c == nil {
		return
	}
	if w.remote || !c.performsModels {
		if err := c.feed.acquire(); err != nil {
			c.logger.Warn("cannot read deltas from other nodes; the watcher gets events only", "session", sessionID, "err", err)
		} else {
			h.mu.Lock()
			gone := w.gone
			w.busDeltas = !gone
			kept := len(h.streams[sessionID]) > 0
			h.mu.Unlock()
			if gone {
				c.feed.release()
			} else if !kept {
				// The calls that stream now elsewhere: their text so far, read from
				// now on (catchUpAsked).
				c.askCatchUp(sessionID)
			}
		}
	}
	if w.remote {
		c.watching.add(sessionID)
		h.mu.Lock()
		gone := w.gone
		w.announced = !gone
		h.mu.Unlock()
		if gone {
			c.watching.remove(sessionID)
		}
	}
}

// handleDeltas delivers a batch of deltas read from messages.TopicDeltas to the
// session's watchers, unless this node sent it (it handed them over itself); a
// messages.DeltaOwners has this node announce its watchers of the partitions it
// names again.
func (h *Hub) handleDeltas(msg *message.Message) {
	switch msg.Metadata.Get(messages.MetaType) {
	case messages.TypeDeltaOwners:
		h.cluster.ownersChanged(msg.Payload)
		return
	case messages.TypeDeltaCatchUpAsk:
		h.cluster.catchUpAsked(msg.Payload)
		return
	case messages.TypeDeltaCatchUp:
		if b, err := messages.DecodeDeltaBatch(msg.Payload); err == nil && b.Node != h.cluster.node && b.End != nil {
			h.deliverCatchUp(b.SessionID, b.Node, b.Deltas, *b.End)
		}
		return
	}
	if sid := msg.Metadata.Get(messages.MetaSessionID); sid != "" && !h.wantsDeltas(sid) {
		return
	}
	b, err := messages.DecodeDeltaBatch(msg.Payload)
	if err != nil || b.Node == h.cluster.node {
		return // live only: a bad batch is not worth a word, the answer comes whole
	}
	h.deliverDeltas(b.SessionID, b.Node, b.Deltas...)
	if b.End != nil {
		h.endDeltas(b.SessionID, b.Node, *b.End)
	}
}

// stream returns the publisher of one model call's deltas for session sessionID,
// onto the bus from its start.
func (c *clusterDeltas) stream(sessionID string) *deltaStream {
	return &deltaStream{c: c, sid: sessionID, bus: true}
}

// deltaStream publishes one model call's deltas on messages.TopicDeltas, deltaLinger's
// worth in a batch, in order, never blocking the call: from its start, or from
// when a watcher on another node came during it (catchUp), or never.
type deltaStream struct {
	c   *clusterDeltas
	sid string
	// key and hub: the call streamed, whose text the hub keeps (catchUp); unset
	// for the end of a call that did not stream (streamingRequests).
	key string
	hub *Hub

	send sync.Mutex // held while a batch is published: batches go out in order

	mu      sync.Mutex
	bus     bool // its deltas go onto the bus
	ended   bool // the call returned (finish): it goes onto the bus no more
	held    []messages.ModelDelta
	bytes   int
	timer   *time.Timer // the flush of held, when one is due
	dropped int

	reading bool // holds a user of the delta feed (begin); guarded by c.activeMu
}

// onBus reports whether s's deltas go onto the bus.
func (s *deltaStream) onBus() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bus
}

// finish marks the call returned and reports whether its deltas went onto the bus
// (then its end goes too: done).
func (s *deltaStream) finish() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	return s.bus
}

// add holds d for the next batch, which goes out after deltaLinger.
func (s *deltaStream) add(d messages.ModelDelta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.bus {
		return // in the text kept (openCall): a watcher that comes gets it (catchUp)
	}
	if len(s.held) >= deltaHeldMax || s.bytes >= deltaHeldBytes {
		s.dropped++ // the bus is slower than the model: best effort
		return
	}
	s.held = append(s.held, d)
	s.bytes += len(d.Content) + len(d.Arguments) + len(d.Key) + len(d.ToolName) + len(d.ToolCallID) + 64
	if s.timer == nil {
		s.timer = time.AfterFunc(s.c.linger, func() { s.flush(nil) })
	}
}

// flush publishes the deltas held, if any, and end, when set (the call's last batch).
func (s *deltaStream) flush(end *messages.DeltaEnd) {
	s.send.Lock()
	defer s.send.Unlock()
	s.publish(messages.TypeModelDelta, s.take(), end)
}

// take returns the deltas held, and no more are.
func (s *deltaStream) take() []messages.ModelDelta {
	s.mu.Lock()
	batch, dropped := s.held, s.dropped
	s.held, s.bytes, s.dropped = nil, 0, 0
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.mu.Unlock()
	if dropped > 0 {
		s.c.logger.Debug("model deltas dropped: the bus is slower than the model", "session", s.sid, "dropped", dropped)
	}
	return batch
}

// publish publishes batch and end, unless both are empty, as a message of type typ.
// The caller holds s.send.
func (s *deltaStream) publish(typ messages.Type, batch []messages.ModelDelta, end *messages.DeltaEnd) {
	if len(batch) == 0 && end == nil {
		return
	}
	b, err := messages.EncodeCommand(&messages.DeltaBatch{SessionID: s.sid, Node: s.c.node, Deltas: batch, End: end})
	if err != nil {
		return // a struct of strings and numbers: it cannot fail
	}
	msg := message.NewMessage(watermill.NewUUID(), b)
	msg.Metadata.Set(messages.MetaSessionID, s.sid)
	msg.Metadata.Set(messages.MetaType, string(typ))
	if err := s.c.pub.Publish(messages.TopicDeltas, msg); err != nil {
		s.c.logger.Debug("model deltas not published", "session", s.sid, "deltas", len(batch), "err", err)
	}
}

// catchUp publishes the call's text so far (messages.TypeDeltaCatchUp), in order
// with its batches: after the deltas held, which it stands for too. A call that
// did not stream onto the bus streams onto it from now on: a delta kept in the
// text before and published after it too is not shown twice (its Seq is not past
// the text's: offerDelta).
func (s *deltaStream) catchUp() {
	s.send.Lock()
	defer s.send.Unlock()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	switched := !s.bus
	s.bus = true
	s.mu.Unlock()
	if switched {
		s.c.read(s) // the asks of the watchers that come next
	}
	s.publish(messages.TypeModelDelta, s.take(), nil)
	ds, n, ok := s.hub.textSoFar(s.sid, s.key)
	if !ok {
		return // the call ended
	}
	s.publish(messages.TypeDeltaCatchUp, ds, &messages.DeltaEnd{Key: s.key, Sent: n})
}

// done publishes what is held once the call returned, with end (the call's last
// batch, which the watchers' nodes wait for before they show its answer), waiting
// at most deltaFlushWait (the call's reply waits for it).
func (s *deltaStream) done(end messages.DeltaEnd) {
	published := make(chan struct{})
	go func() {
		defer close(published)
		s.flush(&end)
	}()
	t := time.NewTimer(deltaFlushWait)
	defer t.Stop()
	select {
	case <-published:
	case <-t.C:
	}
}

// deltaLeases are the sessions this node owns that other nodes watch, each until
// the lease its last messages.DeltaWatch gave ends.
type deltaLeases struct {
	mu    sync.Mutex
	until map[string]time.Time
	swept time.Time
}

// watch records a watcher of sessionID elsewhere for ttl (at most deltaWatchTTLMax).
func (l *deltaLeases) watch(sessionID string, ttl time.Duration) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until[sessionID] = now.Add(min(ttl, deltaWatchTTLMax))
	if now.Sub(l.swept) > deltaWatchTTLMax {
		l.swept = now
		for sid, t := range l.until {
			if now.After(t) {
				delete(l.until, sid)
			}
		}
	}
}

// watched reports whether another node watches sessionID's deltas.
func (l *deltaLeases) watched(sessionID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.until[sessionID]
	return ok && time.Now().Before(t)
}

// handleDeltaWatch records a remote watcher of a session this node owns (a
// messages.DeltaWatch read from messages.TopicTasks).
func (n *Node) handleDeltaWatch(msg *message.Message) error {
	w, err := messages.DecodeDeltaWatch(msg.Payload)
	if err != nil {
		return fmt.Errorf("%w: delta watch %s: %w", errPermanent, idHead(msg.UUID), err)
	}
	if forwarded, err := n.forward(msg, nil, w.SessionID, nil); forwarded || err != nil {
		return err
	}
	// A watcher on this node needs no lease: the node hands its own watchers the
	// deltas of the calls it performs, and marks the requests it sends elsewhere
	// while it has watchers (streamingRequests).
	if n.hub.cluster != nil && w.Node != n.cfg.NodeID {
		n.hub.cluster.leases.watch(w.SessionID, time.Duration(w.TTLMS)*time.Millisecond)
		n.hub.cluster.watchedNow(w.SessionID)
	}
	return nil
}

// deltaAnnouncer tells sessions' owners that this node watches their deltas: a
// messages.DeltaWatch when a session's first remote watcher of deltas comes, then
// every deltaWatchRenew until its last one left, and when another node took the
// session's partition over (again).
type deltaAnnouncer struct {
	c *clusterDeltas

	mu     sync.Mutex
	closed bool
	by     map[string]*announcement
}

// announcement is a session's announcing.
type announcement struct {
	users int
	sent  chan struct{} // closed once the first DeltaWatch is published (or failed)
	timer *time.Timer   // the next renewal
}

// add counts a watcher of sessionID and returns once the owner was told (the
// DeltaWatch is published, after the tasks this node published before).
func (a *deltaAnnouncer) add(sessionID string) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	if x := a.by[sessionID]; x != nil {
		x.users++
		a.mu.Unlock()
		<-x.sent
		return
	}
	x := &announcement{users: 1, sent: make(chan struct{})}
	a.by[sessionID] = x
	a.mu.Unlock()
	a.c.announce(sessionID)
	close(x.sent)
	a.schedule(sessionID, x)
}

// schedule renews x after deltaWatchRenew, while it is sessionID's announcing.
func (a *deltaAnnouncer) schedule(sessionID string, x *announcement) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.by[sessionID] != x {
		return
	}
	x.timer = time.AfterFunc(deltaWatchRenew, func() {
		a.mu.Lock()
		current := !a.closed && a.by[sessionID] == x
		a.mu.Unlock()
		if current {
			a.c.announce(sessionID)
			a.schedule(sessionID, x)
		}
	})
}

// remove uncounts a watcher of sessionID. It does no I/O (the hub calls it under
// its lock).
func (a *deltaAnnouncer) remove(sessionID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	x := a.by[sessionID]
	if x == nil {
		return
	}
	if x.users--; x.users > 0 {
		return
	}
	delete(a.by, sessionID)
	if x.timer != nil {
		x.timer.Stop()
	}
}

func (a *deltaAnnouncer) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for sid, x := range a.by {
		if x.timer != nil {
			x.timer.Stop()
		}
		delete(a.by, sid)
	}
}

// again announces at once the sessions for which match is true (their owner
// changed), in the background.
func (a *deltaAnnouncer) again(match func(sessionID string) bool) {
	a.mu.Lock()
	var sids []string
	for sid := range a.by {
		if match(sid) {
			sids = append(sids, sid)
		}
	}
	a.mu.Unlock()
	if len(sids) == 0 {
		return
	}
	go func() {
		for _, sid := range sids {
			a.c.announce(sid)
		}
	}()
}

// After a rebalance the sessions' new owners know none of their remote watchers:
// each node that takes partitions over says so on messages.TopicDeltas
// (messages.DeltaOwners), which every node with remote watchers of deltas reads, and
// those nodes announce the watchers of the sessions there again at once, rather
// than at their next renewal (deltaWatchRenew). A call the new owner issues before
// the announcement reaches it does not stream, unless its performer still performs
// it for the previous owner (the same key, streamed as it was asked first).

// takenOver tells the nodes that watch deltas that this node took partitions over:
// those of the assignment (of total) that the last one did not have.
func (n *Node) takenOver(partitions []int, total int) {
	c := n.hub.cluster
	if c == nil || c.partition == nil {
		return
	}
	c.ownedMu.Lock()
	var gained []int
	for _, p := range partitions {
		if c.ownedOf != total || !c.owned[p] {
			gained = append(gained, p)
		}
	}
	c.owned, c.ownedOf = make(map[int]bool, len(partitions)), total
	for _, p := range partitions {
		c.owned[p] = true
	}
	c.ownedMu.Unlock()
	if len(gained) == 0 {
		return
	}
	b, err := messages.EncodeCommand(&messages.DeltaOwners{Node: c.node, Partitions: gained, Total: total})
	if err != nil {
		return // a struct of strings and numbers: it cannot fail
	}
	msg := message.NewMessage(watermill.NewUUID(), b)
	msg.Metadata.Set(messages.MetaType, messages.TypeDeltaOwners)
	go func() { // not in the rebalance: the announcements it asks for come when they can
		if err := c.pub.Publish(messages.TopicDeltas, msg); err != nil {
			c.logger.Warn("cannot tell the watchers' nodes of partitions taken over; their calls stream here from their next deltas.watch",
				"partitions", gained, "err", err)
		}
	}()
}

// ownersChanged announces again the watchers of the sessions whose partitions a
// messages.DeltaOwners names.
func (c *clusterDeltas) ownersChanged(payload []byte) {
	o, err := messages.DecodeDeltaOwners(payload)
	if err != nil || o.Node == c.node || c.partition == nil {
		return
	}
	taken := make(map[int]bool, len(o.Partitions))
	for _, p := range o.Partitions {
		taken[p] = true
	}
	c.watching.again(func(sid string) bool { return taken[c.partition(sid, o.Total)] })
}

// announce publishes a DeltaWatch of sessionID on messages.TopicTasks.
func (c *clusterDeltas) announce(sessionID string) {
	b, err := messages.EncodeCommand(&messages.DeltaWatch{SessionID: sessionID, Node: c.node, TTLMS: deltaWatchTTL.Milliseconds()})
	if err != nil {
		return // a struct of strings and numbers: it cannot fail
	}
	msg := message.NewMessage(watermill.NewUUID(), b)
	msg.Metadata.Set(messages.MetaSessionID, sessionID)
	msg.Metadata.Set(messages.MetaType, messages.TypeDeltaWatch)
	if err := c.pub.Publish(messages.TopicTasks, msg); err != nil {
		c.logger.Warn("cannot tell the session's owner about a watcher of its deltas; its model calls may not stream here",
			"session", sessionID, "err", err)
	}
}

// streamingRequests stands before the model effects of a node's own sessions in a
// cluster. Asking other nodes (not local), it marks the model requests to stream
// (messages.EffectRequest.Stream) while their session has a watcher of deltas, on
// this node or another. Either way, for a call that did not stream onto the bus
// (no watcher elsewhere as it started) whose session is watched elsewhere by the
// time it is answered, it publishes the call's end (messages.DeltaEnd, none sent)
// before the answer goes on: a watcher that got the call's model.requested
// without its deltas (its owner heard of it after the call started) holds the
// call's model.responded until the end came (offerAmongDeltas), and would else wait
// deltaTailWait for an end no node sends.
type streamingRequests struct {
	actors.Effects
	hub *Hub
	// local: the node performs the calls itself (modelDeltas streams them when the
	// session is watched elsewhere as they start).
	local bool
}

// Perform implements actors.Effects.
func (s streamingRequests) Perform(req messages.EffectRequest, reply func(messages.EffectReply)) {
	c := s.hub.cluster
	if req.Model == nil || c == nil {
		s.Effects.Perform(req, reply)
		return
	}
	sid := req.SessionID
	if !s.local && (s.hub.wantsDeltas(sid) || c.leases.watched(sid)) {
		req.Stream = true
	}
	streamed := req.Stream || s.local && c.leases.watched(sid)
	if streamed {
		s.Effects.Perform(req, reply)
		return
	}
	key := req.Key.String()
	s.Effects.Perform(req, func(rep messages.EffectReply) {
		end := messages.DeltaEnd{Key: key}
		if !s.local && s.hub.wantsDeltas(sid) {
			// Watchers here that read the bus for the session's deltas.
			s.hub.endDeltas(sid, c.node, end)
		}
		if c.leases.watched(sid) {
			c.stream(sid).done(end)
		}
		reply(rep)
	})
}
