package actors

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Human-in-the-loop approvals. A call to one of Agent.Approvals is recorded as every
// call is (ToolCallRequested), then the agent decides an ApprovalRequested for it and
// the call is not performed: PendingCalls leaves it out, and a chain call does not
// start its steps. The session waits, durably (it is a fold of its log: a session
// refolded after a restart or on another node waits still), for an ApprovalResolved:
//
//   - a human's answer (ResolveApproval, from the node's HTTP API, the tasks topic or
//     a terminal), which the session actor records as an input;
//   - or, when the approval has an expiry (Agent.ApprovalTimeout), the agent's own
//     rejection "by timeout", decided with the time like a task's deadline, so that
//     replay decides it at the same event.
//
// Approved, the call is performed as any other. Rejected, the agent records the
// call's ToolCallCompleted with an error saying so, which the model reads as the
// tool's result; the task goes on. The other calls of the same reply run meanwhile,
// and the task asks the model again once every call is answered.

// approval is a call's approval as folded.
type approval struct {
	req         messages.ApprovalRequested
	requestID   string // the ApprovalRequested event's ID
	requestedUS int64  // its timestamp
	resolved    bool
	res         messages.ApprovalResolved
	resolveID   string // the ApprovalResolved event's ID
	resolvedUS  int64
}

// waitsForApproval reports whether a call is not to be performed now: its approval
// was requested and not granted.
func (c *callState) waitsForApproval() bool {
	return c.approval != nil && !(c.approval.resolved && c.approval.res.Approve)
}

// requiresApproval reports whether the agent's calls of tool wait for approval.
func (a Agent) requiresApproval(tool string) bool {
	return a.Approvals[tool]
}

// callNeedsApproval reports whether call r waits for approval: it calls a tool that
// needs one, directly, through call_tool (ToolCallTool, the search disclosure's),
// which names it in its arguments, or as a step of a chain it runs (directly or
// through call_tool): each would otherwise run such a tool unapproved. The last two
// hold from decision rules 5 (rulesIndirectApproval) on: a task recorded under
// older rules ran them without approval, and refolds as it ran.
func (a Agent) callNeedsApproval(rules int, r messages.ToolCallRequested) bool {
	if a.requiresApproval(r.Tool) {
		return true
	}
	if len(a.Approvals) == 0 || rules < rulesIndirectApproval {
		return false
	}
	if ch, _ := a.chainOf(r); ch != nil && slices.ContainsFunc(ch.Steps(), func(s tools.ChainStep) bool { return a.requiresApproval(s.Tool) }) {
		return true
	}
	if r.Tool != ToolCallTool || !a.hasTool(ToolCallTool) {
		return false
	}
	nc, err := tools.ParseNamedCall(ToolCallTool, r.Arguments)
	return err == nil && a.requiresApproval(nc.Name) // a call call_tool refuses runs nothing
}

func (s *SessionState) applyApprovalRequested(t *taskState, e messages.Envelope, p *messages.ApprovalRequested) {
	for _, c := range t.calls {
		if c.req.Key == p.Key && !c.done && c.approval == nil {
			c.approval = &approval{req: *p, requestID: e.ID, requestedUS: e.TS}
			if s.approvals == nil {
				s.approvals = map[string]*approval{} // made by the first: most sessions have none
			}
			s.approvals[p.Key] = c.approval
			s.approvalOrder = append(s.approvalOrder, c.approval)
			return
		}
	}
}

func (s *SessionState) applyApprovalResolved(e messages.Envelope, p *messages.ApprovalResolved) {
	if ap := s.approvals[p.Key]; ap != nil && !ap.resolved {
		ap.resolved, ap.res, ap.resolveID, ap.resolvedUS = true, *p, e.ID, e.TS
	}
}

// decideApprovals returns the next approval event of the task's calls: a request for
// a call that needs one, a rejection by timeout of an approval past its expiry, or
// the result of a rejected call. Nil when none is due.
func decideApprovals(a *Agent, t *taskState, nowUS int64) *Decision {
	for _, c := range t.calls {
		if c.done {
			continue
		}
		ap := c.approval
		switch {
		case ap == nil && a.callNeedsApproval(t.rules, c.req):
			req := &messages.ApprovalRequested{Key: c.req.Key, CallID: c.req.CallID, Tool: c.req.Tool, Arguments: c.req.Arguments}
			if a.ApprovalTimeout > 0 {
				req.ExpiresUS = nowUS + a.ApprovalTimeout.Microseconds()
			}
			return &Decision{Payload: req, CausationID: c.eventID}
		case ap == nil:
		case !ap.resolved && ap.req.ExpiresUS > 0 && nowUS >= ap.req.ExpiresUS:
			return &Decision{Payload: &messages.ApprovalResolved{Key: ap.req.Key, Approve: false,
				Reason: "nobody answered before the approval expired", By: messages.ApprovedByTimeout}, CausationID: ap.requestID}
		case ap.resolved && !ap.res.Approve:
			return &Decision{Payload: &messages.ToolCallCompleted{Key: c.req.Key, CallID: c.req.CallID, Tool: c.req.Tool,
				Error: rejection(ap.res)}, CausationID: ap.resolveID}
		}
	}
	return nil
}

// rejection is the error the model reads for a rejected call.
func rejection(r messages.ApprovalResolved) string {
	switch {
	case r.By == messages.ApprovedByTimeout:
		return "not performed: the call needed a human's approval and " + r.Reason
	case r.By == messages.ApprovedByAPI && r.Reason != "":
		return "rejected: " + r.Reason // a program's answer (node run without a terminal)
	case r.Reason == "":
		return "rejected by a human"
	}
	return "rejected by a human: " + r.Reason
}

// PendingApproval is a tool call that waits for a human's approval.
type PendingApproval struct {
	// Key is the call's idempotency key; CallID the model's ID of the call.
	Key       string
	CallID    string
	Tool      string
	Arguments string
	// RequestedUS is when the approval was requested, ExpiresUS when it expires (0:
	// never), in Unix microseconds.
	RequestedUS, ExpiresUS int64
}

// PendingApprovals returns the running task's calls that wait for approval, in the
// order they were requested.
func (s *SessionState) PendingApprovals() []PendingApproval {
	t := s.active
	if t == nil || t.phase != phaseAwaitTools {
		return nil
	}
	var out []PendingApproval
	for _, c := range t.calls {
		if ap := c.approval; ap != nil && !ap.resolved && !c.done {
			out = append(out, PendingApproval{Key: ap.req.Key, CallID: ap.req.CallID, Tool: ap.req.Tool, Arguments: ap.req.Arguments,
				RequestedUS: ap.requestedUS, ExpiresUS: ap.req.ExpiresUS})
		}
	}
	return out
}

// NextApprovalExpiry returns the earliest expiry of the running task's pending
// approvals in Unix microseconds, or 0 when none expires.
func (s *SessionState) NextApprovalExpiry() int64 {
	var next int64
	for _, p := range s.PendingApprovals() {
		if p.ExpiresUS > 0 && (next == 0 || p.ExpiresUS < next) {
			next = p.ExpiresUS
		}
	}
	return next
}

// ErrApprovalNotPending answers a ResolveApproval naming no call whose approval is
// pending; the error wrapping it says why (none waits, or the call was answered
// otherwise already).
var ErrApprovalNotPending = errors.New("no approval of this call is pending")

// ReusedCallIDError refuses an answer by a call ID that names a call waiting for
// approval and an earlier call of the session too (models reuse call IDs from
// reply to reply and from task to task): it may be meant for either, so it
// answers neither, and the call waiting is to be answered by its key. It wraps
// ErrApprovalNotPending.
type ReusedCallIDError struct {
	SessionID, Call string
	// Earlier is the key of the earlier call of the call ID, Waiting that of
	// the call waiting.
	Earlier, Waiting string
	// Taken reports that the earlier call took this very answer: sent again (a
	// client's retry of an answer that landed), it stands for that call.
	Taken bool
	was   string
}

func (e *ReusedCallIDError) Error() string {
	if e.Taken {
		return fmt.Sprintf("session %s: call %s: %v: the call ID names call %s, %s, and call %s, waiting: nothing was done; "+
			"if this is the answer to %s sent again, it stands, taken already; to answer %s, answer by its key",
			e.SessionID, e.Call, ErrApprovalNotPending, e.Earlier, e.was, e.Waiting, e.Earlier, e.Waiting)
	}
	return fmt.Sprintf("session %s: call %s: %v: the call ID names call %s, %s, and call %s, waiting: answer by key",
		e.SessionID, e.Call, ErrApprovalNotPending, e.Earlier, e.was, e.Waiting)
}

func (e *ReusedCallIDError) Unwrap() error { return ErrApprovalNotPending }

// CheckAnswer judges an answer to the approval of call (its call_id or key): the
// pending approval it resolves, or duplicate true when the call's approval was
// already resolved with the same decision (the answer is then to be acknowledged and
// not recorded again; pending is then the call it was taken for), or an error
// wrapping ErrApprovalNotPending (a *ReusedCallIDError when the call ID names
// a call waiting and an earlier one).
func (s *SessionState) CheckAnswer(call string, approve bool) (pending PendingApproval, duplicate bool, err error) {
	// A key names its own call only: a call ID is the model's, any string, and may
	// be the key of another call. A text shaped as a key of this session
	// (<session>/<seq>, as the session writes it) is a key whether or not an
	// approval is at that seq yet: else an answer taken by call ID now would be
	// taken, sent again once a later call got that key, as that call's.
	byKey := s.keyShaped(call)
	if keys := s.approvalsOfCallID(call); !byKey && len(keys) > 1 {
		// A model gave calls of one reply the same ID: an answer by that ID could
		// approve a call nobody looked at (the same answer sent twice would approve
		// both), so it must name the call by its key.
		return PendingApproval{}, false, fmt.Errorf("session %s: call %s: %w: %d calls of the model's reply have this call ID (keys %s): answer by key",
			s.SessionID, call, ErrApprovalNotPending, len(keys), strings.Join(keys, ", "))
	}
	open := s.PendingApprovals()
	if i := slices.IndexFunc(open, func(p PendingApproval) bool { return byKey && p.Key == call || !byKey && p.CallID == call }); i >= 0 {
		if !byKey {
			if ap := s.otherOfCallID(call, open[i].Key); ap != nil {
				// Models reuse call IDs from reply to reply and from task to task: this
				// answer may be one meant for that call (sent again by a client's retry
				// or a redelivery, or late), come once the session was at the next,
				// which nobody looked at yet.
				// Even the very answer that call took is refused, nothing done: it
				// may be that answer sent again (a client's retry), or one meant for
				// the call waiting, whose client, told it was taken, would believe
				// that call answered while it waits (and times out).
				e := &ReusedCallIDError{SessionID: s.SessionID, Call: call, Earlier: ap.req.Key, Waiting: open[i].Key, was: "left unanswered"}
				if ap.resolved {
					e.was = describeResolution(ap.res) + " already"
					e.Taken = ap.res.Approve == approve && ap.res.By != messages.ApprovedByTimeout
				}
				return PendingApproval{}, false, e
			}
		}
		return open[i], false, nil
	}
	// An answer already given: by key, or by call ID (the latest call with that ID:
	// models may reuse IDs from one reply to the next).
	ap := s.approvals[call]
	for i := len(s.approvalOrder) - 1; ap == nil && !byKey && i >= 0; i-- {
		if s.approvalOrder[i].req.CallID == call {
			ap = s.approvalOrder[i]
		}
	}
	if ap != nil && ap.resolved {
		if ap.res.Approve == approve && ap.res.By != messages.ApprovedByTimeout {
			return PendingApproval{Key: ap.req.Key, CallID: ap.req.CallID, Tool: ap.req.Tool}, true, nil
		}
		return PendingApproval{}, false, fmt.Errorf("session %s: call %s: %w: it was %s already", s.SessionID, call, ErrApprovalNotPending, describeResolution(ap.res))
	}
	if len(open) == 0 {
		return PendingApproval{}, false, fmt.Errorf("session %s: call %s: %w: the session waits for no approval", s.SessionID, call, ErrApprovalNotPending)
	}
	waiting := make([]string, len(open))
	for i, p := range open {
		waiting[i] = fmt.Sprintf("%s (call ID %s)", p.Key, p.CallID)
	}
	return PendingApproval{}, false, fmt.Errorf("session %s: call %s: %w: the calls waiting are, by key, %s", s.SessionID, call, ErrApprovalNotPending, strings.Join(waiting, ", "))
}

// keyShaped reports whether call is written as a key of this session's events:
// <session>/<seq>, the seq in decimal without leading zeros (messages.EffectKey).
func (s *SessionState) keyShaped(call string) bool {
	k, err := messages.ParseEffectKey(call)
	return err == nil && k.SessionID == s.SessionID && k.String() == call
}

// otherOfCallID returns the latest approval of the session with the call ID call
// other than the one of key, or nil.
func (s *SessionState) otherOfCallID(call, key string) *approval {
	for i := len(s.approvalOrder) - 1; i >= 0; i-- {
		if ap := s.approvalOrder[i]; ap.req.CallID == call && ap.req.Key != key {
			return ap
		}
	}
	return nil
}

// approvalsOfCallID returns the keys of the running task's calls of the model's
// latest reply that asked for approval with the call ID call, unless call is the
// key of one of them.
func (s *SessionState) approvalsOfCallID(call string) []string {
	t := s.active
	if t == nil || s.approvals[call] != nil {
		return nil
	}
	var keys []string
	for _, c := range t.calls {
		if c.approval != nil && c.req.CallID == call {
			keys = append(keys, c.req.Key)
		}
	}
	return keys
}

func describeResolution(r messages.ApprovalResolved) string {
	verb := "rejected"
	if r.Approve {
		verb = "approved"
	}
	if r.By == messages.ApprovedByTimeout {
		return "rejected on its timeout"
	}
	return verb + " (by " + r.By + ")"
}
