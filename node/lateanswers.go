package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// A task that fails while a delegate call's child runs records its task.failed
// before the child ends: the child's spend, which it records only as it ends, is
// not in the failed task's sub_agents_usage. From decision rules 10 the node that
// cancels the child as the task's end is durable (parentEnds) then waits for the
// child's end, its figures complete (lateChild), and has the parent's session
// record the call's answer after the task's end (actors.LateAnswer): a
// tool.call.completed of the failed task whose usage is what the child spent,
// folded into the task's sub-agents' usage (actors.SessionState.TaskSubAgentsUsage).
// A child's figures are complete once its own task ended and each of its delegate
// calls has an answer, in time or late: so a grandchild's spend reaches the root
// through its parent's late answer. The wait is bounded (lateAnswerWait), and the
// waits run side by side (lateWaits), so that a parent's wait for a child does not
// hold up the child's wait for its own child.
//
// The waiting is durable: it is derived again from the parent's log. A session
// hands the node the delegate calls its failed tasks left unanswered each time it
// folds its events as it starts (actors.SessionState.LateCalls,
// SessionDeps.LateCalls: recovered), on any node: after a restart, or on the next
// owner of its partition. And a start, or a partition's assignment, wakes the
// failed parents of the child sessions updated within lateAnswerRecover
// (lateParents), which nothing else would wake, so that a node that closed or
// crashed before a child ended (or before it recorded the child's end) records
// it at its next start, and a parent whose partition moved gets it from its new
// owner (the old one's answer is refused, actors.ErrNotOwner). The session
// records a call's late answer once: a second is a duplicate, and records nothing.

// Bounds of the late answers.
const (
	// lateAnswersQueue bounds the calls waiting for their children's ends at once.
	lateAnswersQueue = 1024
	// lateAnswerWait bounds the wait for one child's end and complete figures.
	lateAnswerWait = 2 * time.Minute
	// lateAnswerPoll is the first interval between reads of a child's log; it
	// doubles up to lateAnswerPollMax.
	lateAnswerPoll    = 50 * time.Millisecond
	lateAnswerPollMax = 2 * time.Second
	// lateAnswerRecover is how far back a start looks for child sessions whose
	// failed parents may wait for their late answers (lateParents): a node down
	// for longer leaves those of the children that ended before unrecorded.
	lateAnswerRecover = time.Hour
)

// lateCall is a delegate call of a failed task of session parent, whose child's
// end is to be recorded on it. recovered: the call was found folding the parent's
// log as its session started (recovered), not as its task failed here.
type lateCall struct {
	parent    string
	key       messages.EffectKey
	recovered bool
}

// lateWaits runs the waits for the children's ends (answerLate), each in its own
// goroutine, at most lateAnswersQueue at once and one per call.
type lateWaits struct {
	handle func(ctx context.Context, c lateCall)
	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	pending map[string]bool // by the call's key
}

func newLateWaits(handle func(ctx context.Context, c lateCall)) *lateWaits {
	ctx, stop := context.WithCancel(context.Background())
	return &lateWaits{handle: handle, ctx: ctx, stop: stop, pending: map[string]bool{}}
}

// offer starts the wait for c's child unless one waits for it already (queued),
// lateAnswersQueue do (queueFull) or the waits are closed; it never blocks.
func (w *lateWaits) offer(c lateCall) queueOffer {
	key := c.key.String()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return queueClosed
	case w.pending[key]:
		return queued
	case len(w.pending) >= lateAnswersQueue:
		return queueFull
	}
	w.pending[key] = true
	w.wg.Go(func() {
		defer func() {
			w.mu.Lock()
			delete(w.pending, key)
			w.mu.Unlock()
		}()
		w.handle(w.ctx, c)
	})
	return queued
}

// close takes no more waits, gives those running timeout to end, then ends them
// and waits for them at most cancelWait more.
func (w *lateWaits) close(timeout, cancelWait time.Duration) {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(timeout):
	}
	w.stop()
	select {
	case <-done:
	case <-time.After(cancelWait):
	}
}

// recovered starts the waits for the children of the calls keys of session, the
// delegate calls its failed tasks left unanswered (SessionDeps.LateCalls), as
// the session folds its events on this node. It never blocks.
func (p *parentEnds) recovered(session string, keys []string) {
	for _, k := range keys {
		key, err := messages.ParseEffectKey(k)
		if err != nil {
			continue
		}
		if p.late.offer(lateCall{parent: session, key: key, recovered: true}) == queueFull {
			p.n.cfg.Logger.Warn("delegate: too many sub-agents waiting to be counted in their failed parents' figures; this one's spend is not",
				"parent", session, "session", ChildSessionID(key))
		}
	}
}

// lateParents returns, among the sessions updated within lateAnswerRecover, the
// failed parents of child sessions that pick picks: those whose failed tasks may
// wait for their children's late answers, and which a start resumes no other way
// (a failed session has no unfinished task). Waking one folds its log, which
// starts the waits (recovered).
func (n *Node) lateParents(ctx context.Context, pick func(string) bool) ([]string, error) {
	if n.parentEnds == nil {
		return nil, nil
	}
	infos, err := n.log.Sessions(ctx, eventlog.Filter{UpdatedSinceUS: n.cfg.Clock.Now().Add(-lateAnswerRecover).UnixMicro(), SessionsOnly: true})
	if err != nil {
		return nil, err
	}
	byID := make(map[string]eventlog.SessionInfo, len(infos))
	for _, s := range infos {
		byID[s.ID] = s
	}
	var out []string
	seen := map[string]bool{}
	for _, s := range infos {
		parent, ok := byID[s.Parent]
		if s.Parent == "" || !ok || seen[s.Parent] || parent.Status != messages.StatusFailed || !pick(s.Parent) {
			continue
		}
		seen[s.Parent] = true
		out = append(out, s.Parent)
	}
	return out, nil
}

// lateAnswerCalls returns, among keys, the calls of events' tasks that are
// answered late (actors.AnswersLate): those whose task was recorded under rules
// 10 or later.
func lateAnswerCalls(events []messages.Envelope, keys []messages.EffectKey) []messages.EffectKey {
	if len(keys) == 0 {
		return nil
	}
	late := map[string]bool{} // by task
	byKey := map[string]string{}
	for _, e := range events {
		switch e.Type {
		case messages.TypeTaskSubmitted:
			if p, err := e.Decode(); err == nil && actors.AnswersLate(p.(*messages.TaskSubmitted)) {
				late[e.ID] = true
			}
		case messages.TypeToolCallRequested:
			if p, err := e.Decode(); err == nil {
				byKey[p.(*messages.ToolCallRequested).Key] = e.CorrelationID
			}
		}
	}
	var out []messages.EffectKey
	for _, k := range keys {
		if late[byKey[k.String()]] {
			out = append(out, k)
		}
	}
	return out
}

// answerLate waits for the end of the call's child, its figures complete, and has
// the parent's session record the call's answer (actors.LateAnswer). ctx ends
// when the node closes past its timeout.
func (p *parentEnds) answerLate(ctx context.Context, c lateCall) {
	childID := ChildSessionID(c.key)
	wctx, cancel := context.WithTimeout(ctx, lateAnswerWait)
	defer cancel()
	end, ok := p.lateChild(wctx, childID, c.recovered)
	if !ok {
		p.n.cfg.Logger.Debug("delegate: the child did not end in time to be counted in its failed parent's figures",
			"parent", c.parent, "session", childID)
		return
	}
	m := &actors.LateAnswer{SessionID: c.parent, Key: c.key.String(), Usage: end.usage}
	m.Output, m.Error = lateOutcome(childID, end)
	res, err := p.n.system.Root.RequestFuture(p.n.host, m, p.n.cfg.SubmitTimeout).Result()
	if err == nil {
		err, _ = res.(error)
	}
	switch {
	case err == nil, errors.Is(err, actors.ErrNoLateCall):
	case errors.Is(err, actors.ErrNotOwner):
		// The parent's partition moved, or the node stops: its next owner (this
		// node's next start) folds the call as the session starts there
		// (recovered), and records the answer.
		p.n.cfg.Logger.Debug("delegate: the failed parent's session is not this node's now; its next owner records its sub-agent's end",
			"parent", c.parent, "session", childID)
	default:
		p.n.cfg.Logger.Warn("delegate: record a sub-agent's end on its failed parent's task; its spend is not in the parent's figures",
			"parent", c.parent, "session", childID, "err", err)
	}
}

// lateOutcome is the late answer of a delegate call whose child ended as end: its
// answer, or its error, each cut to MaxDelegateResult with a note naming the
// child session, which holds it whole (as a call answered in time is, childOutcome:
// a child's error may be a provider's error page of 60 KiB).
func lateOutcome(childID string, end childFigures) (output, errText string) {
	if end.failed != nil {
		return "", cutError(fmt.Sprintf("sub-agent failed (%s) in child session %s: %s", end.failed.Reason, childID, end.failed.Error), childID, MaxDelegateResult)
	}
	return cutResult(end.output, childID, MaxDelegateResult), ""
}

// childFigures is a child's end, as its parent's late answer records it.
type childFigures struct {
	// usage is what the child spent: its own model calls, and its sub-agents' in
	// its end and in the answers recorded after it.
	usage  messages.Usage
	output string
	failed *messages.TaskFailed
}

// lateChild waits until the child's task ended and each of its delegate calls has
// an answer (its figures are complete), and returns its figures; false when ctx
// ended first. A child whose figures are not complete when ctx ends, but which
// ended, returns what it has. For a call found folding its parent's log
// (recovered), a child whose log has no event was never started, and never will
// be (its parent's task ended): false at once.
func (p *parentEnds) lateChild(ctx context.Context, childID string, recovered bool) (childFigures, bool) {
	poll := lateAnswerPoll
	var (
		last  childFigures
		ended bool
	)
	for {
		events, err := p.n.log.Read(ctx, childID, 1)
		if err == nil && len(events) == 0 && recovered {
			return last, false
		}
		if err == nil {
			var complete bool
			last, ended, complete = figuresOf(events)
			if complete {
				return last, true
			}
		}
		select {
		case <-ctx.Done():
			return last, ended
		case <-time.After(poll):
		}
		poll = min(2*poll, lateAnswerPollMax)
	}
}

// figuresOf folds a child's events: its first task's figures, whether it ended,
// and whether its figures are complete (it ended, and none of its delegate calls
// waits for an answer).
func figuresOf(events []messages.Envelope) (f childFigures, ended, complete bool) {
	var task string
	for _, e := range events {
		if e.Type == messages.TypeTaskSubmitted {
			task = e.ID
			break
		}
	}
	if task == "" {
		return f, false, false
	}
	st := actors.NewSessionState(events[0].SessionID)
	for _, e := range events {
		if err := st.Apply(e); err != nil {
			return f, false, false
		}
	}
	for _, e := range events {
		if e.CorrelationID != task || (e.Type != messages.TypeTaskCompleted && e.Type != messages.TypeTaskFailed) {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			return f, false, false
		}
		switch p := p.(type) {
		case *messages.TaskCompleted:
			f.usage, f.output = p.Usage, p.Output
		case *messages.TaskFailed:
			f.usage, f.failed = p.Usage, p
		}
		ended = true
		break
	}
	if !ended {
		return f, false, false
	}
	f.usage = f.usage.Add(st.TaskSubAgentsUsage(task))
	return f, true, len(unansweredDelegateCalls(events, task)) == 0
}
