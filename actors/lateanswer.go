package actors

import (
	"errors"
	"fmt"

	actor "github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/messages"
)

// LateAnswer answers a call of a task that ended before the call did: a delegate
// call whose task failed (cancelled, out of time) while its child ran. The child
// records what it spent when it ends, later than its parent's task.failed, whose
// sub_agents_usage therefore misses it. From decision rules 10 the session records
// the answer after the task's end, a tool.call.completed of the task (its
// correlation) caused by the call's request, with Usage, what the child spent; the
// fold adds it to the task's sub-agents' usage (TaskSubAgentsUsage), and nothing
// else: the task ended, and decides nothing more. It is an input, not a decision:
// replay takes it as recorded. The reply is a *TaskAccepted for its event
// (Duplicate when the call was answered already), or ErrNoLateCall.
type LateAnswer struct {
	SessionID string
	// Key is the call's idempotency key (messages.EffectKey's text).
	Key string
	// Error is why the call failed (the child's end); Output its result.
	Output, Error string
	// Usage is what the call spent on models: the child's own and its sub-agents'.
	Usage messages.Usage
}

// ErrNoLateCall answers a LateAnswer naming no call of an ended task of the session
// recorded under rules 10 or later: a call of a running task (its answer comes as
// its effect's), a task under older rules, or a key the session never requested.
var ErrNoLateCall = errors.New("actors: no ended task of the session waits for the answer of that call")

// AnswersLate reports whether a task recorded as spec has the calls left
// unanswered by its end answered later (LateAnswer): from rules 10.
func AnswersLate(spec *messages.TaskSubmitted) bool {
	v := rulesOf(spec)
	return v >= rulesLateAnswer && supportedRules(v)
}

// lateCall returns the ended task that requested the call keyed key, and the
// call, when the task's rules answer it late (AnswersLate); answered reports that
// it was answered already.
func (s *SessionState) lateCall(key string) (t *taskState, c *callState, answered bool, ok bool) {
	for _, t := range s.tasks {
		if t.phase != phaseDone || t.rules < rulesLateAnswer || !supportedRules(t.rules) {
			continue
		}
		for _, calls := range [][]*callState{t.calls, t.aux} {
			for _, c := range calls {
				if c.req.Key == key {
					return t, c, c.done, true
				}
			}
		}
	}
	return nil, nil, false, false
}

// LateCalls returns the keys of the delegate calls that the session's failed tasks
// recorded under rules 10 or later (AnswersLate) left unanswered, in the order
// requested: the calls whose answers a node records after their tasks' ends
// (LateAnswer). A session hands them to SessionDeps.LateCalls each time it folds
// its events as it starts, so that the node running it waits for their children's
// ends after a restart, or on the next owner of its partition, as the node that
// ran the task did.
func (s *SessionState) LateCalls() []string {
	var keys []string
	for _, t := range s.tasks {
		if t.phase != phaseDone || t.Status != messages.StatusFailed || t.rules < rulesLateAnswer || !supportedRules(t.rules) {
			continue
		}
		for _, calls := range [][]*callState{t.calls, t.aux} {
			for _, c := range calls {
				if !c.done && c.req.Tool == DelegateTool {
					keys = append(keys, c.req.Key)
				}
			}
		}
	}
	return keys
}

// foldLateAnswer folds p, a call's answer recorded after its task t ended.
func (s *SessionState) foldLateAnswer(t *taskState, p *messages.ToolCallCompleted) {
	t.noteSubUsage(p)
	for _, calls := range [][]*callState{t.calls, t.aux} {
		for _, c := range calls {
			if c.req.Key == p.Key && !c.done {
				c.done, c.result = true, *p
			}
		}
	}
}

// TaskSubAgentsUsage reports what the sub-agents of the task with this ID spent:
// what its end recorded (messages.TaskFailed.SubAgentsUsage), with the answers
// recorded after its end (LateAnswer); zero for a task the session does not have.
func (s *SessionState) TaskSubAgentsUsage(id string) messages.Usage {
	for _, t := range s.tasks {
		if t.ID == id {
			return t.SubUsage()
		}
	}
	return messages.Usage{}
}

// lateAnswer records m, a late answer (LateAnswer).
func (a *SessionActor) lateAnswer(ctx actor.Context, m *LateAnswer) {
	t, c, answered, ok := a.state.lateCall(m.Key)
	switch {
	case !ok:
		ctx.Respond(fmt.Errorf("%w: session %s, call %s", ErrNoLateCall, a.id, m.Key))
		return
	case answered:
		ctx.Respond(&TaskAccepted{SessionID: a.id, Duplicate: true})
		return
	}
	p := &messages.ToolCallCompleted{Key: c.req.Key, CallID: c.req.CallID, Tool: c.req.Tool, Result: m.Output, Error: m.Error, Usage: m.Usage}
	e, err := a.event(p, c.eventID, t.ID, a.state.LastSeq+1)
	if err != nil {
		ctx.Respond(err)
		return
	}
	e.Actor = a.deps.actors.tool(c.req.Tool)
	if err := a.step(ctx, oneEvent(e), p); err != nil {
		ctx.Respond(err)
		return
	}
	ctx.Respond(&TaskAccepted{SessionID: a.id, Seq: e.Seq})
}
