package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/troupe-run/troupe/actors"
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
// through its parent's late answer. The wait is bounded (lateAnswerWait); a node
// that closes or crashes meanwhile leaves the answer unrecorded (the parent's
// figures then miss that child's spend, as under older rules).

// Bounds of the late answers.
const (
	// lateAnswersQueue bounds the calls waiting for their children's ends.
	lateAnswersQueue = 1024
	// lateAnswerWait bounds the wait for one child's end and complete figures.
	lateAnswerWait = 2 * time.Minute
	// lateAnswerPoll is the first interval between reads of a child's log; it
	// doubles up to lateAnswerPollMax.
	lateAnswerPoll    = 50 * time.Millisecond
	lateAnswerPollMax = 2 * time.Second
)

// lateCall is a delegate call of a failed task of session parent, whose child's
// end is to be recorded on it.
type lateCall struct {
	parent string
	key    messages.EffectKey
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
	end, ok := p.lateChild(wctx, childID)
	if !ok {
		p.n.cfg.Logger.Debug("delegate: the child did not end in time to be counted in its failed parent's figures",
			"parent", c.parent, "session", childID)
		return
	}
	m := &actors.LateAnswer{SessionID: c.parent, Key: c.key.String(), Usage: end.usage}
	switch {
	case end.failed != nil:
		m.Error = fmt.Sprintf("sub-agent failed (%s) in child session %s: %s", end.failed.Reason, childID, end.failed.Error)
	default:
		m.Output = cutResult(end.output, childID, MaxDelegateResult)
	}
	res, err := p.n.system.Root.RequestFuture(p.n.host, m, p.n.cfg.SubmitTimeout).Result()
	if err == nil {
		err, _ = res.(error)
	}
	if err != nil && !errors.Is(err, actors.ErrNoLateCall) {
		p.n.cfg.Logger.Warn("delegate: record a sub-agent's end on its failed parent's task; its spend is not in the parent's figures",
			"parent", c.parent, "session", childID, "err", err)
	}
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
// ended, returns what it has.
func (p *parentEnds) lateChild(ctx context.Context, childID string) (childFigures, bool) {
	poll := lateAnswerPoll
	var (
		last  childFigures
		ended bool
	)
	for {
		events, err := p.n.log.Read(ctx, childID, 1)
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
