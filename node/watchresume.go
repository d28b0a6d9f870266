package node

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/troupe-run/troupe/messages"
)

// WatchResuming is Watch (WatchDeltas with deltas) for a reader that must see every
// event of the session: when its feed falls behind (a burst of events larger than a
// watcher's backlog, such as a team's member sharing thousands of STATE facts in
// one answer), it watches again and reads the events it missed from the log, so
// that its channel carries the session's events in seq order, each once, from
// the first one recorded after the call. after is the seq of the last event the
// reader has already (a fork's session.forked event, which the events copied into
// it precede), or 0: no event up to it is handed on, live or from the log, where a
// catch-up would read them again from the session's first. The channel closes when
// cancel is called, ctx ends, the node stops, the log cannot be read, or the feed
// closes again before anything new came (it cannot be caught up). No model.delta
// comes after the model.responded of its call. Once it has
// closed, lost says why when the feed was lost (the node stopped, the log could not
// be read, the feed could not be caught up), so that a reader can tell its user,
// and is nil when cancel or ctx closed it.
func (n *Node) WatchResuming(ctx context.Context, sessionID string, deltas bool, after uint64) (events <-chan messages.Envelope, cancel func(), lost func() error) {
	watch := n.Watch
	if deltas {
		watch = n.WatchDeltas
	}
	live, stop := watch(sessionID)
	out := make(chan messages.Envelope)
	done := make(chan struct{})
	var once sync.Once
	cancel = func() { once.Do(func() { close(done) }) }
	var mu sync.Mutex
	var why error // set before out closes
	lost = func() error {
		mu.Lock()
		defer mu.Unlock()
		return why
	}
	loses := func(err error) {
		mu.Lock()
		why = err
		mu.Unlock()
	}
	go func() {
		defer close(out)
		defer func() { stop() }()
		last := after // the seq of the last event handed on
		var answered answeredCalls
		send := func(e messages.Envelope) bool {
			if e.Seq != 0 { // a model.delta has none
				if e.Seq <= last {
					return true // read from the log already
				}
				last = e.Seq
				if e.Type == messages.TypeModelResponded {
					answered.add(e.CausationID)
				}
			} else if e.Type == messages.TypeModelDelta && answered.has(deltaKey(e)) {
				// A delta of a call whose answer was read from the log (the
				// feed watched again while the call streamed, and the call was
				// answered before the log was read): the reader shows the
				// answer, not its text after it.
				return true
			}
			select {
			case out <- e:
				return true
			case <-done:
			case <-ctx.Done():
			}
			return false
		}
		progressed := true // an event came since the last time the feed was watched again
		for {
			select {
			case e, ok := <-live:
				if ok {
					progressed = progressed || e.Seq > last
					if !send(e) {
						return
					}
					continue
				}
				// Fallen behind: watch again first, so that nothing recorded after
				// the log is read passes unseen, then read what the log has.
				stop()
				select {
				case <-n.stopping:
					loses(errors.New("the node is stopping"))
					return
				default:
				}
				if !progressed {
					loses(errors.New("it fell behind again before any new event came, so it cannot be caught up"))
					return
				}
				progressed = false
				live, stop = watch(sessionID)
				events, err := n.log.Read(ctx, sessionID, last+1)
				if err != nil {
					loses(fmt.Errorf("reading the events it missed from the log: %w", err))
					return
				}
				for _, e := range events {
					progressed = true
					if !send(e) {
						return
					}
				}
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, cancel, lost
}

// answeredCalls are the keys of the model calls whose model.responded a reader
// of a session's events and deltas was given (a WatchResuming feed, a session's
// stream), the last answeredCallsKept of them.
type answeredCalls struct {
	keys  map[string]bool
	order []string
}

// answeredCallsKept bounds answeredCalls: the deltas that come after their call's
// answer are those a new watcher holds after a catch-up read of the log, of the
// calls whose answers that read handed on, which are few.
const answeredCallsKept = 64

func (a *answeredCalls) add(key string) {
	if key == "" || a.keys[key] {
		return
	}
	if a.keys == nil {
		a.keys = map[string]bool{}
	}
	if len(a.order) == answeredCallsKept {
		delete(a.keys, a.order[0])
		a.order = append(a.order[:0], a.order[1:]...)
	}
	a.keys[key] = true
	a.order = append(a.order, key)
}

func (a *answeredCalls) has(key string) bool { return key != "" && a.keys[key] }

// deltaKey is the key of the call of e, a model.delta ("" when it does not decode).
func deltaKey(e messages.Envelope) string {
	p, err := e.Decode()
	if d, ok := p.(*messages.ModelDelta); err == nil && ok {
		return d.Key
	}
	return ""
}
