package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// The ways replay import takes a session exported with tasks that had not ended
// (--unfinished). Such a session is still running where it was exported: the
// deployment it came from goes on with it, and performs (or performed) the
// effects it had requested. A log that holds it as it is would have its nodes
// resume it too (node serve resumes every running session at its start): they
// would perform those effects a second time, in another deployment.
const (
	// unfinishedRefuse, the default, imports nothing and says which tasks are
	// unfinished and what to choose instead.
	unfinishedRefuse = "refuse"
	// unfinishedPark imports the session with each unfinished task ended as
	// cancelled (parkedError): no node resumes it, and it shows and verifies as
	// recorded.
	unfinishedPark = "park"
	// unfinishedResume imports the session as it is, for this log's nodes to go
	// on with it: the effects it requested and had no answer of are performed
	// again here.
	unfinishedResume = "resume"
)

// parkedError is the error of the messages.TaskFailed (messages.ReasonCancelled)
// that replay import --unfinished park records for each task that had not ended
// in the export. A cancellation is an input, not the agent's decision: verify takes
// it as recorded, by any build.
const parkedError = "imported unfinished (replay import --unfinished park): the deployment it was exported from runs this task; no node of this log goes on with it"

// unfinishedTask is a task of a session that had not ended at its last event.
type unfinishedTask struct {
	id      string // the ID of its task.submitted event
	seq     uint64 // the seq of its task.submitted event
	name    string // the client's name for it (task_id), "" for none
	running bool   // false: it waits its turn behind the running task
	waits   []string
}

// describe says what the task is and what it waits for, for a human.
func (t unfinishedTask) describe() string {
	what := fmt.Sprintf("the task at seq %d", t.seq)
	if t.name != "" {
		what = fmt.Sprintf("task %q (seq %d)", t.name, t.seq)
	}
	switch {
	case !t.running:
		return what + ", which waits its turn"
	case len(t.waits) == 0:
		return what + ", running"
	}
	return what + ", waiting for " + strings.Join(t.waits, " and ")
}

// tasksNotEnded returns the tasks of a session's events (in seq order, from its
// first) that have not ended at its last event, in the order they were
// submitted: the first runs, the others wait their turn. A running task's waits
// name the effects it requested and has no answer of: the model's answer, a tool
// call (performed, or being performed, where it was recorded) or a human's
// approval of one.
func tasksNotEnded(events []messages.Envelope) []unfinishedTask {
	var scan notEndedScan
	scan.add(events)
	tasks := scan.tasks()
	if len(tasks) > 0 {
		w := newWaitsScan(tasks[0].id)
		w.add(events)
		tasks[0].waits = w.waits()
	}
	return tasks
}

// notEndedScan is tasksNotEnded of a session read in batches (add): the tasks
// not ended (tasks), then, in a second reading, what the running one waits for
// (waitsScan).
type notEndedScan struct {
	submitted []unfinishedTask // every task, in the order submitted
	ended     map[string]bool  // the tasks ended, by ID
}

func (s *notEndedScan) add(events []messages.Envelope) {
	if s.ended == nil {
		s.ended = map[string]bool{}
	}
	for _, e := range events {
		switch e.Type {
		case messages.TypeTaskCompleted, messages.TypeTaskFailed:
			s.ended[e.CorrelationID] = true
		case messages.TypeTaskSubmitted:
			name := ""
			if p, err := e.Decode(); err == nil {
				name = p.(*messages.TaskSubmitted).TaskID
			}
			s.submitted = append(s.submitted, unfinishedTask{id: e.ID, seq: e.Seq, name: name})
		}
	}
	// Those ended are dropped as they go: what is kept is about the tasks that
	// may not have ended yet.
	s.submitted = slices.DeleteFunc(s.submitted, func(t unfinishedTask) bool { return s.ended[t.id] })
}

// tasks is the tasks not ended, without the running one's waits.
func (s *notEndedScan) tasks() []unfinishedTask {
	var out []unfinishedTask
	for _, t := range s.submitted {
		if !s.ended[t.id] {
			t.running = len(out) == 0
			out = append(out, t)
		}
	}
	return out
}

// waitsScan finds what the running task waits for: the effects it requested
// and has no answer of, by key, in the order they were requested.
type waitsScan struct {
	running   string
	asked     []waitRequest
	answered  map[string]bool
	approvals map[string]bool // keys of the calls waiting for an approval
}

type waitRequest struct {
	key  string
	what string
}

func newWaitsScan(running string) *waitsScan {
	return &waitsScan{running: running, answered: map[string]bool{}, approvals: map[string]bool{}}
}

func (w *waitsScan) add(events []messages.Envelope) {
	for _, e := range events {
		if e.CorrelationID != w.running {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			continue
		}
		switch p := p.(type) {
		case *messages.ModelRequested:
			w.asked = append(w.asked, waitRequest{p.Key, "the answer of model " + clipped(p.Model, 40)})
		case *messages.ModelResponded:
			w.answered[p.Key] = true
		case *messages.ToolCallRequested:
			w.asked = append(w.asked, waitRequest{p.Key, fmt.Sprintf("the tool call %s(%s)", clipped(p.Tool, 40), clipped(p.Arguments, 60))})
		case *messages.ToolCallCompleted:
			w.answered[p.Key] = true
		case *messages.ApprovalRequested:
			w.approvals[p.Key] = true
		case *messages.ApprovalResolved:
			delete(w.approvals, p.Key)
		}
	}
}

// waits names what the running task waits for.
func (w *waitsScan) waits() []string {
	var out []string
	for _, r := range w.asked {
		switch {
		case w.answered[r.key]:
		case w.approvals[r.key]:
			out = append(out, "an approval of "+strings.TrimPrefix(r.what, "the tool call "))
		default:
			out = append(out, r.what)
		}
	}
	return out
}

// clipped is s cut to at most n bytes (at a character's start), "..." marking a cut.
func clipped(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "..."
}

// unfinishedError is the error of an import refused for the session's unfinished
// tasks: it names them, what the running one waits for, and the choices.
func unfinishedError(id string, tasks []unfinishedTask) error {
	var b strings.Builder
	fmt.Fprintf(&b, "session %s was exported before its tasks ended, and the deployment it was exported from goes on with it: ", id)
	for i, t := range tasks {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(t.describe())
	}
	b.WriteString(". Imported as it is, a node serving this log would resume it: it would perform again what the task requested and has no answer of, and go on with it in both deployments. Nothing was imported; choose:\n" +
		"  --unfinished park    import it with those tasks ended as cancelled (\"imported unfinished\"): no node goes on with it; show and verify read it\n" +
		"  --unfinished resume  import it for this log's nodes to go on with it, performing again what it requested and has no answer of here\n" +
		"  (or export it again once its tasks have ended)")
	return fmt.Errorf("%s", b.String())
}

// parkEvents returns the events that end a session's unfinished tasks as
// cancelled (parkedError), to append after its events (a session's, from its
// first; configs are its configurations' events): the tasks waiting their turn
// first, each failing while it waits, then the running one, with the steps and
// usage it had (as a cancellation records them). They are stamped ts, or the last
// event's time when that is later, by the actor "replay".
func parkEvents(events, configs []messages.Envelope, tasks []unfinishedTask, ts int64) ([]messages.Envelope, error) {
	p, err := newParker(events[0].SessionID, configs)
	if err != nil {
		return nil, err
	}
	if err := p.add(events); err != nil {
		return nil, err
	}
	return p.park(tasks, ts)
}

// parker is parkEvents of a session read in batches: it folds the session's
// events (add), then makes the events that park its tasks (park).
type parker struct {
	id   string
	st   *actors.SessionState
	last messages.Envelope
}

func newParker(id string, configs []messages.Envelope) (*parker, error) {
	recorded := make(map[string]*messages.AgentConfig, len(configs))
	for _, c := range configs {
		p, err := c.Decode()
		if err != nil {
			return nil, err
		}
		d := p.(*messages.ConfigRecorded).Digest
		if cfg, ok, err := messages.RecordedConfig(d, []messages.Envelope{c}); err == nil && ok {
			recorded[d] = cfg
		}
	}
	return &parker{id: id, st: actors.NewSessionState(id).WithConfigs(recorded)}, nil
}

func (k *parker) add(events []messages.Envelope) error {
	for _, e := range events {
		if err := k.st.Apply(e); err != nil {
			return err
		}
		k.last = e
	}
	return nil
}

func (k *parker) park(tasks []unfinishedTask, ts int64) ([]messages.Envelope, error) {
	st, last, id := k.st, k.last, k.id
	order := append(append([]unfinishedTask{}, tasks[1:]...), tasks[0])
	out := make([]messages.Envelope, 0, len(order))
	for i, t := range order {
		p := &messages.TaskFailed{Reason: messages.ReasonCancelled, Error: parkedError}
		if st.Active() == t.id {
			p.Steps, p.Usage = st.Progress()
			p.SubAgentsUsage = st.SubAgentsUsage()
		}
		e, err := messages.NewEnvelope(p)
		if err != nil {
			return nil, err
		}
		seq := last.Seq + uint64(i) + 1
		e.ID = messages.EffectKey{SessionID: id, Seq: seq}.String()
		e.SessionID, e.Seq, e.TS, e.Actor = id, seq, max(ts, last.TS), "replay"
		e.CausationID, e.CorrelationID = t.id, t.id
		if err := st.Apply(e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if st.Active() != "" {
		return nil, fmt.Errorf("session %s: task %s still runs after the unfinished tasks were ended", id, st.Active())
	}
	return out, nil
}
