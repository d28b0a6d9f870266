package node

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// sessionFeed is the node-wide feed of session changes behind GET
// /v1/feed/sessions: each time a session starts a task, ends one, or a call of it
// waits for approval or is answered (sessionChange), its triggering event goes to
// every subscriber, whose stream turns it into the session's row (row).
//
// Its source is the same as the hub's. On the embedded bus the node's session actors
// hand it each durable batch (observe, beside the metrics); on a shared bus it reads
// messages.TopicEvents through the hub's bus feed (fromBus), held while it has a
// subscriber, so that a node that runs no sessions sees the whole cluster's; when
// that subscription ends by itself, the streams end (busEnded) and their clients
// connect again.
//
// Nothing a subscriber does slows a session: each has a channel of feedBuffer
// events, filled without waiting; when it is full, the subscriber is told it fell
// behind (behind) and its stream drops what is queued and sends a resync event, after
// which the client lists the sessions again. Without subscribers, observe costs one
// atomic load.
type sessionFeed struct {
	count atomic.Int32 // subscribers
	bus   *busFeed     // nil on the embedded bus

	// rows are the rows of the latest changes, by event ID, made once for all the
	// subscribers (makeRow reads the session's log: one read per change, not one
	// per change and client); rowOrder keeps at most feedRows of them, oldest first.
	rowsMu   sync.Mutex
	rows     map[string]*feedRowEntry
	rowOrder []string

	// folds are the folds of the sessions whose changes had rows, by session, at
	// most feedSessions of them, the least recently used dropped first: a change's
	// row reads only the events after its session's fold (makeRow), not the whole
	// history.
	foldsMu sync.Mutex
	folds   lru[*foldEntry]

	mu   sync.Mutex
	subs map[*feedSub]struct{}
}

// feedBuffer is the events queued for one subscriber; two per task, and two per
// call held for approval, so a client that falls this far behind is better served
// by a new list.
const feedBuffer = 64

// feedSub is one subscriber of a sessionFeed.
type feedSub struct {
	ch chan messages.Envelope
	// behind has a value once ch overflowed: what is queued is incomplete.
	behind chan struct{}
	// gone is closed when the bus subscription the feed read ended: the stream
	// ends, and the client, connecting again, makes a new one.
	gone   chan struct{}
	closed bool // gone is closed; guarded by sessionFeed.mu
}

// newSessionFeed makes a feed; bus is the hub's bus feed (nil on the embedded bus).
func newSessionFeed(bus *busFeed) *sessionFeed {
	return &sessionFeed{bus: bus, subs: map[*feedSub]struct{}{}}
}

// sessionChange reports whether an event of type t changes a session's row as the
// feed reports it: a task starts or ends, or a call waits for approval or is
// answered (SessionRow.Waiting).
func sessionChange(t messages.Type) bool {
	switch t {
	case messages.TypeTaskSubmitted, messages.TypeTaskCompleted, messages.TypeTaskFailed,
		messages.TypeApprovalRequested, messages.TypeApprovalResolved:
		return true
	}
	return false
}

// observe takes a batch of a session's durable events from the node's session
// actors (Node.sessionEvents). It never blocks.
func (f *sessionFeed) observe(events []messages.Envelope) {
	if f.count.Load() == 0 || f.bus != nil {
		return // nobody listens, or the feed reads the bus, which has these too
	}
	for i := range events {
		if sessionChange(events[i].Type) {
			f.publish(events[i])
		}
	}
}

// fromBus takes a message the hub's bus feed read from messages.TopicEvents (Hub.tap).
// Only the few events that change a session are decoded.
func (f *sessionFeed) fromBus(msg *message.Message) {
	if f.count.Load() == 0 || !sessionChange(messages.Type(msg.Metadata.Get(messages.MetaType))) {
		return
	}
	if msg.Metadata.Get(messages.MetaStored) != "" {
		// The reference of an event too large for the bus, which the hub could
		// not read from the log (Hub.lost): the change is missed.
		f.missed()
		return
	}
	e, err := messages.Unmarshal(msg.Payload)
	if err != nil {
		f.missed() // the log holds the event; the client's next list shows it
		return
	}
	f.publish(e)
}

// missed tells every subscriber that a change was missed: its stream sends a
// resync, and the client lists the sessions again.
func (f *sessionFeed) missed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		select {
		case s.behind <- struct{}{}:
		default:
		}
	}
}

// publish hands e to every subscriber without waiting.
func (f *sessionFeed) publish(e messages.Envelope) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		select {
		case s.ch <- e:
		default:
			select {
			case s.behind <- struct{}{}:
			default:
			}
		}
	}
}

// subscribe adds a subscriber; on a shared bus it returns once the feed reads
// messages.TopicEvents. Call the returned func to leave.
func (f *sessionFeed) subscribe() (*feedSub, func(), error) {
	if f.bus != nil {
		if err := f.bus.acquire(); err != nil {
			return nil, nil, err
		}
	}
	s := &feedSub{ch: make(chan messages.Envelope, feedBuffer), behind: make(chan struct{}, 1), gone: make(chan struct{})}
	f.mu.Lock()
	f.subs[s] = struct{}{}
	f.count.Add(1)
	f.mu.Unlock()
	var once sync.Once
	return s, func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.subs, s)
			f.count.Add(-1)
			f.mu.Unlock()
			if f.bus != nil {
				f.bus.release()
			}
		})
	}, nil
}

// busEnded ends every subscriber's stream: the bus subscription they read ended by
// itself (busFeed.ended).
func (f *sessionFeed) busEnded() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		if !s.closed {
			s.closed = true
			close(s.gone)
		}
	}
}

// feedFilter is what a subscriber of GET /v1/feed/sessions asked for: the filters
// of GET /v1/sessions.
type feedFilter struct {
	status string // "" or a session status
	since  string // as given: a duration slides with the clock
	agent  string // "" or the agent of the session's first task
}

// parseFeedFilter reads the filters of GET /v1/feed/sessions.
func parseFeedFilter(r *http.Request) (feedFilter, error) {
	q := r.URL.Query()
	f := feedFilter{status: q.Get("status"), since: q.Get("since"), agent: q.Get("agent")}
	switch f.status {
	case "", messages.StatusRunning, messages.StatusCompleted, messages.StatusFailed:
	default:
		return f, fmt.Errorf("status must be %s, %s or %s", messages.StatusRunning, messages.StatusCompleted, messages.StatusFailed)
	}
	if _, err := eventlog.ParseSince(f.since, time.Now()); err != nil {
		return f, err
	}
	// As GET /v1/sessions: a value that cannot be an agent's name would match no
	// session, silently.
	if f.agent != "" && f.agent != eventlog.DefaultAgent && !agentNamePattern.MatchString(f.agent) {
		return f, fmt.Errorf("agent must be %s, or default; got %s", AgentNameRule, QuoteHead(f.agent))
	}
	return f, nil
}

// wants reports whether a subscriber gets row, whose status was prev before the
// change ("" for a new session): when it matches, or when it matched but for a
// status it just left, so that the client drops the row it shows.
func (f feedFilter) wants(row SessionRow, prev string, now time.Time) bool {
	if f.agent != "" && row.Agent != f.agent {
		return false
	}
	if since, _ := eventlog.ParseSince(f.since, now); since > 0 && row.StartedUS < since {
		return false
	}
	return f.status == "" || row.Status == f.status || prev == f.status
}

// feedRows bounds the change rows a feed keeps for its subscribers: more than one
// change per subscriber's buffer, so a row is made once however far apart its
// subscribers read.
const feedRows = 4 * feedBuffer

// feedRowTimeout bounds the making of a change's row, which every subscriber may
// wait for, whichever asked first.
const feedRowTimeout = 30 * time.Second

// feedRowEntry is a change's row, made once (done closes then).
type feedRowEntry struct {
	done chan struct{}
	row  SessionRow
	prev string
	err  error
}

// row returns the row of e's change (makeRow), made by the first subscriber that
// asks and shared with the others; a failed one is made again by the next that
// asks.
func (f *sessionFeed) row(ctx context.Context, log eventlog.Log, e messages.Envelope) (SessionRow, string, error) {
	f.rowsMu.Lock()
	ent, made := f.rows[e.ID]
	if !made {
		if f.rows == nil {
			f.rows = map[string]*feedRowEntry{}
		}
		ent = &feedRowEntry{done: make(chan struct{})}
		f.rows[e.ID] = ent
		f.rowOrder = append(f.rowOrder, e.ID)
		if len(f.rowOrder) > feedRows {
			delete(f.rows, f.rowOrder[0])
			f.rowOrder = f.rowOrder[1:]
		}
	}
	f.rowsMu.Unlock()
	if !made {
		// Not under the asking client's context: the others wait for the same row.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), feedRowTimeout)
		ent.row, ent.prev, ent.err = f.makeRow(rctx, log, e)
		cancel()
		if ent.err != nil {
			f.rowsMu.Lock()
			if f.rows[e.ID] == ent {
				delete(f.rows, e.ID) // the order keeps its ID: it only bounds the map
			}
			f.rowsMu.Unlock()
		}
		close(ent.done)
	}
	select {
	case <-ent.done:
		return ent.row, ent.prev, ent.err
	case <-ctx.Done():
		return SessionRow{}, "", ctx.Err()
	}
}

// feedSessions bounds the session folds a feed keeps: a session whose fold was
// dropped costs one read of its whole history at its next change.
const feedSessions = 1024

// foldEntry is the fold of one session's events, kept by a feed.
type foldEntry struct {
	session string
	// mu is held while a change's row is made from the fold, so that the rows
	// of one session are made one at a time, each from where the last left it.
	mu sync.Mutex
	// fold is a fold of the session's first events, from seq 1 on without a gap;
	// the zero fold (seq 0) when none is known.
	fold feedFold
}

// feedVerify bounds the events read from the log that a fold checks again at its
// session's next change (feedFold.tail).
const feedVerify = 16

// feedFold is a fold kept by a feed, with the IDs of the last events it read from
// the log (not those the feed handed it), for the next change to check. After a
// takeover, where the check of the fence and the write are not one step
// (eventlog.Fencing: ClickHouse), a stale owner's batch may land after the new owner
// read the session, and a log that lags shows it at positions where the new owner's
// events are not visible yet; those replace it once they are, and a fold of the
// stale events would be wrong from then on. Such events are never handed to the
// feed (their append failed with ErrFenced), and they are at most the stale owner's
// last batch: the next change that reads the log (one that does not follow the fold
// right away) reads the tail again with what follows it, and a tail whose events
// are no longer there, or not the same ones, makes the row be folded again from the
// whole history.
type feedFold struct {
	sessionFold
	// tail are the last events read from the log and folded (at most
	// feedVerify), ending at or below seq; it has no digest.
	tail logTail
}

// clone returns a copy of f that folds on without changing f.
func (f *feedFold) clone() feedFold {
	return feedFold{sessionFold: f.sessionFold.clone(), tail: logTail{from: f.tail.from, ids: slices.Clone(f.tail.ids)}}
}

// foldRead folds the events read from the log whose seq is below stop
// (sessionFold.foldBefore), and keeps the IDs of the last ones as the tail.
func (f *feedFold) foldRead(events []messages.Envelope, stop uint64) (contiguous bool, err error) {
	if contiguous, err = f.foldBefore(events, stop); err != nil || !contiguous {
		return contiguous, err
	}
	for _, e := range events {
		if e.Seq >= stop {
			break
		}
		f.tail.add(e, feedVerify)
	}
	return true, nil
}

// replaced reports whether events, read from the log from seq tail.from or
// before, no longer hold the tail's events at their seqs: another owner's
// replaced them, or hid them (eventlog.Superseded).
func (f *feedFold) replaced(events []messages.Envelope) bool {
	if len(f.tail.ids) == 0 {
		return false
	}
	_, held := f.tail.heldIn(events)
	return !held
}

// foldOf returns the kept fold of session, or a new empty one, kept from now on in
// place of the least recently used when there are feedSessions already.
func (f *sessionFeed) foldOf(session string) *foldEntry {
	f.foldsMu.Lock()
	defer f.foldsMu.Unlock()
	if ent, ok := f.folds.get(session); ok {
		return ent
	}
	ent := &foldEntry{session: session}
	// A row being made from a fold dropped for it still completes; what it
	// keeps there is lost.
	f.folds.put(session, ent, feedSessions)
	return ent
}

// makeRow returns the row of e's session as GET /v1/sessions?detail=true would
// have listed it right after e, and the session's status right before e ("" when
// e is its first task.* event).
//
// It starts from the session's kept fold and reads from the log only the events
// after it (and before e), with the last ones of the fold that were read from the
// log (feedFold.tail, checked again); it reads the whole history when no fold is
// kept, when the kept one is past e (a subscriber far behind), when the events
// read do not follow it without a gap, or when a takeover replaced the tail. e itself comes from the feed, so the row is right
// even when a log copy (a cluster's sink) lags behind the bus; the fold kept is
// then the prefix the log had, and the next change reads on from there.
func (f *sessionFeed) makeRow(ctx context.Context, log eventlog.Log, e messages.Envelope) (SessionRow, string, error) {
	ent := f.foldOf(e.SessionID)
	ent.mu.Lock()
	defer ent.mu.Unlock()
	fresh := feedFold{sessionFold: sessionFold{row: SessionRow{SessionInfo: eventlog.SessionInfo{ID: e.SessionID}}}}
	fold, contiguous := ent.fold, false
	switch {
	case e.Seq == 1: // nothing comes before it
		fold, contiguous = fresh, true
	case fold.seq > 0 && fold.seq < e.Seq:
		fold = fold.clone()
		contiguous = true
		if fold.seq+1 < e.Seq {
			// The tail is checked again (feedFold) by the next change that reads,
			// not by one right after the fold, which reads nothing.
			from := fold.seq + 1
			if len(fold.tail.ids) > 0 {
				from = fold.tail.from
			}
			events, err := log.Read(ctx, e.SessionID, from)
			if err != nil {
				return SessionRow{}, "", err
			}
			if fold.replaced(events) {
				ent.fold, contiguous = feedFold{}, false
				break
			}
			fold.tail.ids = fold.tail.ids[:0]
			i, _ := slices.BinarySearchFunc(events, fold.seq+1, func(e messages.Envelope, seq uint64) int { return cmp.Compare(e.Seq, seq) })
			if contiguous, err = fold.foldRead(events[i:], e.Seq); err != nil {
				return SessionRow{}, "", err
			}
		}
	}
	if !contiguous {
		events, err := log.Read(ctx, e.SessionID, 1)
		if err != nil {
			return SessionRow{}, "", err
		}
		if ent.fold.replaced(events) {
			ent.fold = feedFold{} // the kept fold past e was made of replaced events
		}
		fold = fresh
		if contiguous, err = fold.foldRead(events, e.Seq); err != nil {
			return SessionRow{}, "", err
		}
	}
	prev := fold.status()
	complete := contiguous && fold.seq+1 == e.Seq
	if contiguous && !complete && fold.seq > ent.fold.seq {
		ent.fold = fold.clone() // the log lags: keep what it had
	}
	if err := fold.add(e); err != nil {
		return SessionRow{}, "", err
	}
	if complete && fold.seq > ent.fold.seq {
		ent.fold = fold
	}
	return fold.snapshot(), prev, nil
}

// current returns the fold of session's events as the log holds them now, for a
// list's rows (GET /v1/sessions?detail=true, which the dashboard fetches again
// every minute): it starts from the session's kept fold, as makeRow does, and
// reads only the events after it, with the fold's tail checked again
// (feedFold.replaced), so that listing 200 long sessions again reads what they
// appended since, not their whole histories. It reads the whole history when no
// fold is kept, when a takeover replaced the tail, or when the events read do not
// follow the fold without a gap; the fold is kept when it is a prefix of the
// session's history.
func (f *sessionFeed) current(ctx context.Context, log eventlog.Log, session string) (sessionFold, error) {
	ent := f.foldOf(session)
	ent.mu.Lock()
	defer ent.mu.Unlock()
	if ent.fold.seq > 0 {
		fold := ent.fold.clone()
		from := fold.seq + 1
		if len(fold.tail.ids) > 0 {
			from = fold.tail.from
		}
		events, err := log.Read(ctx, session, from)
		if err != nil {
			return sessionFold{}, err
		}
		if !fold.replaced(events) {
			i, _ := slices.BinarySearchFunc(events, fold.seq+1, func(e messages.Envelope, seq uint64) int { return cmp.Compare(e.Seq, seq) })
			contiguous, err := fold.foldRead(events[i:], math.MaxUint64)
			if err != nil {
				return sessionFold{}, err
			}
			if contiguous {
				ent.fold = fold
				return fold.clone().sessionFold, nil
			}
		}
	}
	events, err := log.Read(ctx, session, 1)
	if err != nil {
		return sessionFold{}, err
	}
	fold := feedFold{sessionFold: sessionFold{row: SessionRow{SessionInfo: eventlog.SessionInfo{ID: session}}}}
	contiguous, err := fold.foldRead(events, math.MaxUint64)
	if err != nil {
		return sessionFold{}, err
	}
	if contiguous {
		ent.fold = fold
		return fold.clone().sessionFold, nil
	}
	ent.fold = feedFold{} // not a prefix of the history: nothing to keep
	return fold.sessionFold, nil
}

// sessionsStream serves GET /v1/feed/sessions: the node's session changes as
// Server-Sent Events, filtered as GET /v1/sessions (status, since, agent). Each
// change is a "session" event whose data is the session's row as GET
// /v1/sessions?detail=true lists it; a "resync" event says the client fell behind
// and changes were dropped: list the sessions again. Nothing is sent on connect:
// a client lists the sessions once the stream is open, then applies the changes.
func (n *Node) sessionsStream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming is not supported by this connection")
		return
	}
	filter, err := parseFeedFilter(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	sub, leave, err := n.feed.subscribe()
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "the session feed cannot read the events topic: %v", err)
		return
	}
	defer leave()
	w, stopKeepAlive := n.startSSE(w)
	defer stopKeepAlive()
	fl = w.(http.Flusher)
	fl.Flush()
	if r.Method == http.MethodHead {
		return // the headers only, as stream's
	}
	n.serveFeed(r.Context(), w, fl.Flush, sub, filter)
}

// serveFeed writes sub's changes that filter wants to w until ctx ends, the node
// closes its streams or a write fails; the keep-alive of its writer (startSSE) keeps proxies
// from closing an idle stream.
func (n *Node) serveFeed(ctx context.Context, w io.Writer, flush func(), sub *feedSub, filter feedFilter) {
	// resync drops what is queued, which misses changes, and has the client list the
	// sessions again.
	resync := func() bool {
		for len(sub.ch) > 0 { // this goroutine is the only reader
			<-sub.ch
		}
		if _, err := io.WriteString(w, "event: resync\ndata: {}\n\n"); err != nil {
			return false
		}
		flush()
		return true
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.streamsDone:
			return
		case <-sub.gone:
			return
		case <-sub.behind:
			if !resync() {
				return
			}
		case e := <-sub.ch:
			select {
			case <-sub.behind: // e and what follows it miss changes
				if !resync() {
					return
				}
				continue
			default:
			}
			row, prev, err := n.feed.row(ctx, n.log, e)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				n.cfg.Logger.Warn("session feed: cannot read the session; the client is told to list again", "session", e.SessionID, "err", err)
				if !resync() {
					return
				}
				continue
			}
			if !filter.wants(row, prev, time.Now()) {
				continue
			}
			b, err := json.Marshal(row)
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "event: session\ndata: %s\n\n", b); err != nil {
				return
			}
			flush()
		}
	}
}
