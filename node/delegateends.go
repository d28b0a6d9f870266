package node

import (
	"context"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// A task that fails (cancelled, out of time, over its budget) with delegate calls
// unanswered has no use for their children any more. The calls in flight here
// cancel theirs as they end (delegateCalls), but a call is not always in flight
// where its task ends: a session resumed on another node (its node died, or its
// partition moved) and cancelled before it issued its calls again, a call waiting
// in the node's queue of delegate calls (LocalEffects runs no tool for a queued
// call it cancels), or one waiting for a free slot of its session's tool calls.
// Their children, started by the calls' earlier performances, would run on, paying
// for their models, until their deadline. So the node that runs a session, as its
// failed task's end is durable, cancels the child of every delegate call the task
// recorded and got no answer to, wherever the call was performed (parentEnds). A
// child that ended, or was never started, is left as it is (cancelChild). A node
// that stopped before it cancelled them (it crashed, or it closed: an embedded
// node's session host, which cancels the children, stops before parentEnds
// drains) leaves the children to their next start: a child session resumed there
// whose parent's task failed with the child's call unanswered is cancelled then
// (resumed). This is an effect of the node: the session's events, and what its
// task decides from them, are the same.

// Bounds of parentEnds.
const (
	// parentEndsQueue bounds the failed tasks waiting for their children to be
	// cancelled; past it a task's are not, and a warning says so (they end at
	// their deadline).
	parentEndsQueue = 1024
	// parentEndsRead bounds the read of one failed task's session.
	parentEndsRead = 30 * time.Second
)

// parentEnds cancels the children of the unanswered delegate calls of the failed
// tasks of the sessions this node runs: observe picks the task.failed events out of
// a session's batches (Node.sessionEvents), and one worker (a queueWorker) reads
// each one's session and cancels the children, in order.
type parentEnds struct {
	n *Node
	q *queueWorker[failedTask]
	// late waits for the ends of the children cancelled, to record them on
	// their parents' tasks (lateanswers.go).
	late *lateWaits
}

// failedTask is a task that failed: its session and its ID. Or, with children
// set, the parent session of child sessions resumed at a start (resumed): every
// failed task of session, its children among them.
type failedTask struct {
	session, task string
	children      map[string]bool
}

func newParentEnds(n *Node) *parentEnds {
	p := &parentEnds{n: n}
	p.q = newQueueWorker(parentEndsQueue, p.cancelOrphans)
	p.late = newLateWaits(p.answerLate)
	return p
}

// observe queues the failed tasks of a batch; it never blocks.
func (p *parentEnds) observe(sessionID string, events []messages.Envelope) {
	for _, e := range events {
		if e.Type != messages.TypeTaskFailed {
			continue
		}
		if p.q.offer(failedTask{session: sessionID, task: e.CorrelationID}) == queueFull {
			p.n.cfg.Logger.Warn("delegate: too many failed tasks waiting for their sub-agents to be cancelled; this one's run until their deadline",
				"session", sessionID, "task", e.CorrelationID)
		}
	}
}

// resumed queues the parents of the child sessions among infos, the sessions
// whose tasks a start (or a partition's assignment) resumed: a child whose
// parent's task failed with the child's call unanswered is cancelled, as the
// parent's node would have as the task ended had it not stopped first (a crash,
// or a close that found the session host stopped: an embedded node's children
// are cancelled on its host). It never blocks.
func (p *parentEnds) resumed(infos []eventlog.SessionInfo) {
	byParent := map[string]map[string]bool{}
	var parents []string
	for _, s := range infos {
		if s.Parent == "" {
			continue
		}
		if byParent[s.Parent] == nil {
			byParent[s.Parent] = map[string]bool{}
			parents = append(parents, s.Parent)
		}
		byParent[s.Parent][s.ID] = true
	}
	for _, parent := range parents {
		switch p.q.offer(failedTask{session: parent, children: byParent[parent]}) {
		case queueClosed:
			return
		case queueFull:
			p.n.cfg.Logger.Warn("delegate: too many failed tasks waiting for their sub-agents to be cancelled; these resumed sub-agents run until their deadline",
				"parent", parent, "sessions", len(byParent[parent]))
		}
	}
}

// cancelOrphans reads the session of a failed task (or of resumed children's
// parent) and cancels the children of its unanswered delegate calls. ctx ends
// when close gives up waiting.
func (p *parentEnds) cancelOrphans(ctx context.Context, job failedTask) {
	rctx, cancel := context.WithTimeout(ctx, parentEndsRead)
	events, err := p.n.log.Read(rctx, job.session, 1)
	cancel()
	if err != nil {
		p.n.cfg.Logger.Warn("delegate: read a failed task's session to cancel its sub-agents; they run until their deadline",
			"session", job.session, "task", job.task, "err", err)
		return
	}
	orphans := p.orphans(events, job)
	for _, key := range orphans {
		if ctx.Err() != nil {
			return // closed past its timeout
		}
		p.n.cancelChild(ctx, ChildSessionID(key))
	}
	for _, key := range lateAnswerCalls(events, orphans) {
		if p.late.offer(lateCall{parent: job.session, key: key}) == queueFull {
			p.n.cfg.Logger.Warn("delegate: too many sub-agents waiting to be counted in their failed parents' figures; this one's spend is not",
				"parent", job.session, "session", ChildSessionID(key))
		}
	}
}

// orphans returns the keys of the job's unanswered delegate calls: of its failed
// task, or, for resumed children, of every failed task of its session whose child
// is one of them.
func (p *parentEnds) orphans(events []messages.Envelope, job failedTask) []messages.EffectKey {
	if job.children == nil {
		return unansweredDelegateCalls(events, job.task)
	}
	var keys []messages.EffectKey
	for _, e := range events {
		if e.Type != messages.TypeTaskFailed {
			continue
		}
		for _, key := range unansweredDelegateCalls(events, e.CorrelationID) {
			if job.children[ChildSessionID(key)] {
				keys = append(keys, key)
			}
		}
	}
	return keys
}

// close stops the worker once it has handled the tasks queued, waiting at most
// timeout; past it, the cancellations running end and the tasks still queued are
// dropped (their children end at their deadline, or are cancelled at the node's
// next start: resumed). The session actors are stopped first, so nothing more is
// observed.
func (p *parentEnds) close(timeout time.Duration) {
	p.q.close(timeout, -1)
	p.late.close(time.Second, time.Second) // the children's ends unrecorded, as after a crash
}

// unansweredDelegateCalls returns the keys of the delegate calls that task
// requested in events and that no tool.call.completed answers.
func unansweredDelegateCalls(events []messages.Envelope, task string) []messages.EffectKey {
	var keys []messages.EffectKey
	answered := map[string]bool{}
	for _, e := range events {
		if e.CorrelationID != task || (e.Type != messages.TypeToolCallRequested && e.Type != messages.TypeToolCallCompleted) {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			continue
		}
		switch p := p.(type) {
		case *messages.ToolCallRequested:
			if p.Tool != DelegateTool {
				continue
			}
			if key, err := messages.ParseEffectKey(p.Key); err == nil {
				keys = append(keys, key)
			}
		case *messages.ToolCallCompleted:
			answered[p.Key] = true
		}
	}
	out := keys[:0]
	for _, k := range keys {
		if !answered[k.String()] {
			out = append(out, k)
		}
	}
	return out
}
