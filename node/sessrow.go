package node

import (
	"cmp"
	"slices"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// sessionFold is a session's row (SessionRow) folded from its events in seq order:
// what GET /v1/sessions?detail=true lists and the session feed sends. It folds one
// event at a time, so that the feed can keep a session's fold and bring it forward
// with the events after it (sessionFeed.makeRow) instead of folding the whole
// history again at each change.
type sessionFold struct {
	row SessionRow
	// seq is the seq of the last event folded: 0 before the first.
	seq uint64
	// latest is the status the latest task.* event set; submitted and ended count
	// the task.submitted and the task.completed or task.failed events.
	latest           string
	submitted, ended uint64
	// waiting are the calls that wait for approval, in the order they were
	// requested.
	waiting []waitingCall
}

// waitingCall is a tool call waiting for approval: its idempotency key, its tool and
// its task (the correlation ID of the task's events).
type waitingCall struct{ key, tool, task string }

// add folds e, the session's next event.
func (f *sessionFold) add(e messages.Envelope) error {
	first := f.row.Events == 0
	if first || e.TS < f.row.StartedUS {
		f.row.StartedUS = e.TS
	}
	f.row.UpdatedUS = max(f.row.UpdatedUS, e.TS)
	f.row.LastSeq = max(f.row.LastSeq, e.Seq)
	f.row.Events++
	f.seq = e.Seq
	if s, ok := eventlog.TaskStatus(e.Type); ok {
		f.latest = s
		if e.Type == messages.TypeTaskSubmitted {
			f.submitted++
		} else {
			f.ended++
			// The task's calls wait no more.
			f.waiting = slices.DeleteFunc(f.waiting, func(w waitingCall) bool { return w.task == e.CorrelationID })
		}
	}
	switch e.Type {
	case messages.TypeModelRequested:
		f.row.Steps++
		return nil
	case messages.TypeTaskSubmitted, messages.TypeModelResponded, messages.TypeApprovalRequested, messages.TypeApprovalResolved:
	case messages.TypeToolCallCompleted:
		if len(f.waiting) == 0 {
			return nil // no need to decode the result
		}
	default:
		return nil
	}
	p, err := e.Decode()
	if err != nil {
		return err
	}
	switch p := p.(type) {
	case *messages.TaskSubmitted:
		if first && p.Parent != nil {
			f.row.Parent = p.Parent.SessionID
		}
		if f.row.Agent == "" {
			f.row.Agent = cmp.Or(p.Agent, "default")
		}
	case *messages.ModelResponded:
		f.row.Usage = f.row.Usage.Add(p.Usage)
	case *messages.ApprovalRequested:
		if !slices.ContainsFunc(f.waiting, func(w waitingCall) bool { return w.key == p.Key }) {
			f.waiting = append(f.waiting, waitingCall{key: p.Key, tool: p.Tool, task: e.CorrelationID})
		}
	case *messages.ApprovalResolved:
		f.done(p.Key)
	case *messages.ToolCallCompleted:
		f.done(p.Key)
	}
	return nil
}

// done drops the call of key from the calls waiting for approval: answered, or
// completed otherwise.
func (f *sessionFold) done(key string) {
	f.waiting = slices.DeleteFunc(f.waiting, func(w waitingCall) bool { return w.key == key })
}

// status is the session's status after the events folded; "" before its first
// task.* event.
func (f *sessionFold) status() string {
	if f.latest == "" {
		return ""
	}
	return eventlog.SessionStatus(f.latest, f.submitted, f.ended)
}

// snapshot returns the session's row after the events folded, sharing nothing with
// f.
func (f *sessionFold) snapshot() SessionRow {
	row := f.row
	row.Status = f.status()
	row.Waiting = f.waitingTools()
	return row
}

// waitingTools names the tools of the calls waiting for approval; nil when none.
func (f *sessionFold) waitingTools() []string {
	if len(f.waiting) == 0 {
		return nil
	}
	tools := make([]string, len(f.waiting))
	for i, w := range f.waiting {
		tools[i] = w.tool
	}
	return tools
}

// clone returns a copy of f that folds on without changing f.
func (f *sessionFold) clone() sessionFold {
	c := *f
	c.waiting = slices.Clone(f.waiting)
	return c
}

// foldBefore folds the events whose seq is below stop, in order, and reports
// whether they followed f's last seq without a gap (a prefix of the session's
// history, which a later fold may start from).
func (f *sessionFold) foldBefore(events []messages.Envelope, stop uint64) (contiguous bool, err error) {
	contiguous = true
	for _, e := range events {
		if e.Seq >= stop {
			break
		}
		if e.Seq != f.seq+1 {
			contiguous = false
		}
		if err := f.add(e); err != nil {
			return false, err
		}
	}
	return contiguous, nil
}
