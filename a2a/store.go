package a2a

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/troupe-run/troupe/messages"
)

// A task's ID names its session and its task.submitted envelope:
// "<contextId>~<hex>", the hex being EnvelopeID's (of the message that started
// it). Session IDs have no '~'. So a task is found again from the session's
// events alone, by any node over the same log, after a restart too.

// taskIDSep separates a task ID's session from its envelope part.
const taskIDSep = "~"

// TaskIDFor is the ID of the A2A task that message messageID starts in context
// (session) contextID.
func TaskIDFor(contextID, messageID string) sdk.TaskID {
	return sdk.TaskID(contextID + taskIDSep + strings.TrimPrefix(EnvelopeID(contextID, messageID), "a2a-"))
}

// ParseTaskID returns the session and the task.submitted envelope ID a task ID
// names, and false for an ID that is not one of TaskIDFor's.
func ParseTaskID(id sdk.TaskID) (session, envID string, ok bool) {
	s := string(id)
	i := strings.LastIndex(s, taskIDSep)
	if i <= 0 || len(s)-i-1 != 32 {
		return "", "", false
	}
	return s[:i], "a2a-" + s[i+1:], true
}

// maxLiveTasks bounds the tasks a TaskStore holds in memory. Past it, the half
// used longest ago (saved or read) is dropped, whatever their state: their
// sessions' events still have them, and Get rebuilds them from there, as any other
// node over the same log does. Only a claimed task (ClaimKey: its session has not
// recorded it yet) is never dropped.
const maxLiveTasks = 10000

// TaskStore is the a2asrv.TaskStore of a node's A2A tasks: the tasks this process
// runs, as the SDK saves them (every event), in memory; any other task — after a
// restart, or run by another node over the same log — rebuilt from its session's
// events (the state, the answer as the answer artifact, the question of a call that
// waits for approval), each time it is read.
type TaskStore struct {
	backend Backend
	// agent, when set, is the agent whose tasks the store serves: a task its
	// session's events say another agent runs is not found (TaskStore.foreign).
	// "" serves any agent's.
	agent string
	max   int // maxLiveTasks; tests set fewer
	mu    sync.Mutex
	live  map[sdk.TaskID]*liveTask
	tick  uint64 // counts uses: liveTask.used
	// found are the seqs of the task.submitted events of tasks rebuilt (not
	// live), by task, at most max of them (cleared when full): the next read of
	// such a task reads its session's events from there on, as a live task's
	// (liveTask.from), not the whole history again.
	found map[sdk.TaskID]uint64
	// saved, when set (tests), is called with each task saved, after it is.
	saved func(*sdk.Task)
}

// liveTask is a task a TaskStore holds: a snapshot (the SDK changes the tasks it
// saved), and when it was last saved or read (TaskStore.tick).
type liveTask struct {
	task *sdk.Task
	used uint64
	// from is the seq of the task's task.submitted event once a read of its
	// session's events found it (0 before): a read of a running task checks its
	// session's events from there on, not the session's whole history.
	from uint64
}

var _ a2asrv.TaskStore = (*TaskStore)(nil)

// NewTaskStore returns a store reading sessions from b.
func NewTaskStore(b Backend) *TaskStore {
	return &TaskStore{backend: b, max: maxLiveTasks, live: map[sdk.TaskID]*liveTask{}, found: map[sdk.TaskID]uint64{}}
}

// snapshot copies what of a saved task the SDK changes in place afterwards: it
// appends the parts of an artifact update to the saved artifact's and sets its
// metadata. The task's and its artifacts' structs, slices and metadata maps are
// copied; the parts are shared up to their length (the SDK neither changes a part
// nor writes below a slice's length). A save is then as cheap for a long answer as
// for a short one: the SDK saves the task at each token of a streamed answer, and
// copying its text each time (JSON) made an answer of n tokens cost n² (a 2000-token
// answer took 3 s of CPU; BenchmarkStreamedAnswer).
func snapshot(t *sdk.Task) *sdk.Task {
	c := *t
	c.Metadata = maps.Clone(t.Metadata)
	c.History = slices.Clip(t.History)
	if t.Artifacts != nil {
		c.Artifacts = make([]*sdk.Artifact, len(t.Artifacts))
		for i, a := range t.Artifacts {
			ac := *a
			ac.Parts = slices.Clip(a.Parts)
			ac.Metadata = maps.Clone(a.Metadata)
			c.Artifacts[i] = &ac
		}
	}
	return &c
}

// copyTask is a deep copy of a snapshot (the SDK changes the tasks it reads too).
func copyTask(t *sdk.Task) (*sdk.Task, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("a2a: task %s: %w", t.ID, err)
	}
	var c sdk.Task
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("a2a: task %s: %w", t.ID, err)
	}
	for _, a := range c.Artifacts {
		if a != nil {
			a.Parts = joinTexts(a.Parts)
		}
	}
	return &c, nil
}

// joinTexts joins each run of text parts without metadata into one: a streamed
// answer is saved as a part per token (each artifact update appends one), which
// a reader of the task (tasks/get, a resubscription's first event) should get as
// its text, not as pieces the SDKs join with newlines.
func joinTexts(parts sdk.ContentParts) sdk.ContentParts {
	out := parts[:0]
	var run strings.Builder
	inRun := false
	flush := func() {
		if inRun {
			out = append(out, sdk.TextPart{Text: run.String()})
			run.Reset()
			inRun = false
		}
	}
	for _, p := range parts {
		if tp, ok := p.(sdk.TextPart); ok && len(tp.Metadata) == 0 {
			run.WriteString(tp.Text)
			inRun = true
			continue
		}
		flush()
		out = append(out, p)
	}
	flush()
	return out
}

// Save implements a2asrv.TaskStore. A claimed task (ClaimKey) loses its mark once
// past submitted.
func (s *TaskStore) Save(ctx context.Context, task *sdk.Task) error {
	snap := snapshot(task)
	if _, ok := snap.Metadata[ClaimKey]; ok && snap.Status.State != sdk.TaskStateSubmitted {
		delete(snap.Metadata, ClaimKey)
		if len(snap.Metadata) == 0 {
			snap.Metadata = nil
		}
	}
	s.mu.Lock()
	s.put(task.ID, snap)
	s.mu.Unlock()
	if s.saved != nil {
		s.saved(snap)
	}
	return nil
}

// put holds task t as id, making room first when id is new and the store is
// full. The caller holds s.mu.
func (s *TaskStore) put(id sdk.TaskID, t *sdk.Task) {
	old, ok := s.live[id]
	if ok {
		s.tick++
		old.task, old.used = t, s.tick
		return
	}
	if len(s.live) >= s.max {
		s.dropOldest()
	}
	s.tick++
	s.live[id] = &liveTask{task: t, used: s.tick}
}

// claim saves task unless the store has the task already, live or in its
// session's events, and reports whether it did. A task that failed before its
// session recorded it (the node refused it) is claimed again: a retry may succeed.
func (s *TaskStore) claim(ctx context.Context, task *sdk.Task) (bool, error) {
	if old, err := s.Get(ctx, task.ID); err == nil {
		if old.Status.State != sdk.TaskStateFailed {
			return false, nil
		}
		if _, err := s.rebuild(ctx, task.ID); err == nil {
			return false, nil // the session has it: it failed there
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.live[task.ID]; ok && cur.task.Status.State != sdk.TaskStateFailed {
		return false, nil
	}
	s.put(task.ID, snapshot(task))
	return true, nil
}

// holds reports whether the store holds task id (live: this process saved or
// claimed it).
func (s *TaskStore) holds(id sdk.TaskID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.live[id]
	return ok
}

// release forgets a task claimed whose execution never started (the SDK refused
// the request), so that the message may be sent again.
func (s *TaskStore) release(id sdk.TaskID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.live[id]; ok && claimed(t.task) {
		delete(s.live, id)
	}
}

// claimed reports whether t is a claimed task its session has not recorded yet.
func claimed(t *sdk.Task) bool {
	c, _ := t.Metadata[ClaimKey].(bool)
	return c
}

// dropOldest forgets the half of the tasks used longest ago, claimed ones
// excepted, so that a store kept full drops tasks once per max/2 new ones. The
// caller holds s.mu.
func (s *TaskStore) dropOldest() {
	type use struct {
		id   sdk.TaskID
		used uint64
	}
	uses := make([]use, 0, len(s.live))
	for id, t := range s.live {
		if !claimed(t.task) {
			uses = append(uses, use{id, t.used})
		}
	}
	slices.SortFunc(uses, func(a, b use) int { return cmp.Compare(a.used, b.used) })
	for _, u := range uses[:min(len(uses), max(len(s.live)/2, 1))] {
		delete(s.live, u.id)
	}
}

// Get implements a2asrv.TaskStore: the live task, else the one its session's
// events tell, else sdk.ErrTaskNotFound. A live task that has not ended is never
// older than its session's events: when they say it ended, its state and
// artifacts are theirs (the SDK saves a task's answer artifact and its end one
// after the other, and the task saved between says working with the answer).
func (s *TaskStore) Get(ctx context.Context, id sdk.TaskID) (*sdk.Task, error) {
	s.mu.Lock()
	var t *sdk.Task
	var from uint64
	if lt, ok := s.live[id]; ok {
		s.tick++
		lt.used, t, from = s.tick, lt.task, lt.from
	}
	s.mu.Unlock()
	if t == nil {
		return s.rebuild(ctx, id)
	}
	c, err := copyTask(t)
	if err != nil || c.Status.State.Terminal() || claimed(c) {
		return c, err
	}
	ended, submitted, err := s.rebuildFrom(ctx, id, max(from, 1))
	if err != nil {
		return c, nil
	}
	if from == 0 {
		s.mu.Lock()
		if lt, ok := s.live[id]; ok {
			lt.from = submitted
		}
		s.mu.Unlock()
	}
	if ended.Status.State.Terminal() {
		c.Status, c.Artifacts = ended.Status, ended.Artifacts
	}
	return c, nil
}

var _ TaskEnds = (*TaskStore)(nil)

// RunningLister is a Backend that lists its sessions running a task now
// (eventlog.SessionInfo.Status running) in one read: TaskStore.EndedAmong asks it
// once for many tasks instead of reading each task's session.
type RunningLister interface {
	RunningSessions(ctx context.Context) ([]string, error)
}

// Ended implements TaskEnds: the task is in a terminal state, or there is no such
// task. A task that cannot be read (the log fails) has not ended.
func (s *TaskStore) Ended(ctx context.Context, id sdk.TaskID) bool {
	t, err := s.Get(ctx, id)
	if errors.Is(err, sdk.ErrTaskNotFound) {
		return true // no such task: none to notify of
	}
	return err == nil && t.Status.State.Terminal()
}

// EndedAmong implements TaskEnds. With a Backend that lists its running sessions
// (RunningLister), one listing answers for every task this process does not hold:
// a task whose session runs no task ended (or never was); only those whose session
// runs one (it, or a later task of the session) are read one by one, as Ended
// reads them. Without, each task is read as Ended reads it.
func (s *TaskStore) EndedAmong(ctx context.Context, ids []sdk.TaskID) (map[sdk.TaskID]bool, error) {
	out := make(map[sdk.TaskID]bool, len(ids))
	lister, ok := s.backend.(RunningLister)
	if !ok {
		for _, id := range ids {
			out[id] = s.Ended(ctx, id)
		}
		return out, nil
	}
	list, err := lister.RunningSessions(ctx)
	if err != nil {
		return nil, fmt.Errorf("a2a: the running sessions: %w", err)
	}
	running := make(map[string]bool, len(list))
	for _, id := range list {
		running[id] = true
	}
	for _, id := range ids {
		s.mu.Lock()
		t, live := s.live[id]
		s.mu.Unlock()
		session, _, valid := ParseTaskID(id)
		switch {
		case live:
			out[id] = t.task.Status.State.Terminal()
		case !valid || !running[session]:
			out[id] = true
		default:
			out[id] = s.Ended(ctx, id)
		}
	}
	return out, nil
}

// logged is task id as its session's events alone tell it, whatever this
// process's execution of it reported last (Get): read from its task.submitted
// on when a read found it before.
func (s *TaskStore) logged(ctx context.Context, id sdk.TaskID) (*sdk.Task, error) {
	task, _, err := s.loggedRun(ctx, id)
	return task, err
}

// loggedRun is task id as logged tells it, and what its session's events say
// of its run (the calls that wait for approval).
func (s *TaskStore) loggedRun(ctx context.Context, id sdk.TaskID) (*sdk.Task, *taskRun, error) {
	session, envID, ok := ParseTaskID(id)
	if !ok {
		return nil, nil, sdk.ErrTaskNotFound
	}
	events, err := s.backend.Events(ctx, session, max(s.submittedSeq(id), 1))
	if err != nil {
		return nil, nil, fmt.Errorf("a2a: session %s: %w", session, err)
	}
	return taskOf(id, session, envID, events)
}

// refresh gives the task this process holds as in input-required naming calls
// shown the status its session's events tell (status): it waits for other calls
// (answered over the task API, or their approval timed out, and the task asked
// for another since), which tasks/get and the next answer then name. A task
// saved since in another state (an execution runs it) is left as it is.
func (s *TaskStore) refresh(id sdk.TaskID, shown map[string]string, status sdk.TaskStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lt, ok := s.live[id]
	if !ok || !maps.Equal(shownCalls(lt.task), shown) {
		return
	}
	c := *lt.task
	c.Status = status
	lt.task = &c
}

// submittedSeq is the seq of task id's task.submitted event, as a read of its
// session's events found it (liveTask.from, found); 0 when none did.
func (s *TaskStore) submittedSeq(id sdk.TaskID) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lt, ok := s.live[id]; ok && lt.from > 0 {
		return lt.from
	}
	return s.found[id]
}

// rebuild tells task id from its session's events: from its task.submitted
// event on when a rebuild found it before and it is still there (the events
// before it say nothing of the task: taskRun.scan), else from the first.
func (s *TaskStore) rebuild(ctx context.Context, id sdk.TaskID) (*sdk.Task, error) {
	session, envID, ok := ParseTaskID(id)
	if !ok {
		return nil, sdk.ErrTaskNotFound
	}
	s.mu.Lock()
	from := s.found[id]
	s.mu.Unlock()
	events, err := taskEvents(ctx, s.backend, session, envID, from)
	if err != nil && from > 1 {
		// A failed read from the task's event is read again from the first.
		events, err = s.backend.Events(ctx, session, 1)
	}
	if err != nil {
		return nil, fmt.Errorf("a2a: session %s: %w", session, err)
	}
	task, _, err := taskOf(id, session, envID, events)
	if err != nil {
		return nil, err
	}
	if s.foreign(events, envID) {
		return nil, fmt.Errorf("%w: task %s is another agent's", sdk.ErrTaskNotFound, id)
	}
	if submitted := submittedOf(events, envID).Seq; submitted > 1 && submitted != from {
		s.mu.Lock()
		if len(s.found) >= s.max {
			clear(s.found)
		}
		s.found[id] = submitted
		s.mu.Unlock()
	}
	return task, nil
}

// foreign reports whether the task whose task.submitted is envID, in events, is
// another agent's than the one the store serves (its agent; the default agent's
// task.submitted names none). A client that mixed up the endpoints of a node's
// agents does not act on another agent's task: it is not found there.
func (s *TaskStore) foreign(events []messages.Envelope, envID string) bool {
	if s == nil || s.agent == "" {
		return false
	}
	sub := submittedOf(events, envID)
	if sub == nil {
		return false
	}
	p, err := sub.Decode()
	ts, ok := p.(*messages.TaskSubmitted)
	if err != nil || !ok {
		return false
	}
	return cmp.Or(ts.Agent, "default") != s.agent
}

// taskEvents reads session's events from seq from on, where a read found task
// envID's task.submitted (TaskStore.submittedSeq), when it is still there; else
// (from 0 or 1, or the session begun again) from the first. The events before a
// task's task.submitted say nothing of it (taskRun.scan), so a read of a task of
// a long session reads its task's events, not the session's whole history.
// GetTask (TaskStore.rebuild), an answer (Executor.answer) and a subscription
// (Dedupe.subscribe) read a task's events through it.
func taskEvents(ctx context.Context, b Backend, session, envID string, from uint64) ([]messages.Envelope, error) {
	if from > 1 {
		events, err := b.Events(ctx, session, from)
		if err != nil {
			return nil, err
		}
		if s := submittedOf(events, envID); s != nil && s.Seq == from {
			return events, nil
		}
	}
	return b.Events(ctx, session, 1)
}

// rebuildFrom tells task id from its session's events from seq from on (at most
// the seq of the task's task.submitted event), and returns that event's seq too.
func (s *TaskStore) rebuildFrom(ctx context.Context, id sdk.TaskID, from uint64) (*sdk.Task, uint64, error) {
	session, envID, ok := ParseTaskID(id)
	if !ok {
		return nil, 0, sdk.ErrTaskNotFound
	}
	events, err := s.backend.Events(ctx, session, from)
	if err != nil {
		return nil, 0, fmt.Errorf("a2a: session %s: %w", session, err)
	}
	task, _, err := taskOf(id, session, envID, events)
	if err != nil {
		return nil, 0, err
	}
	return task, submittedOf(events, envID).Seq, nil
}

// submittedOf is the task.submitted event envID among events; nil when none is.
func submittedOf(events []messages.Envelope, envID string) *messages.Envelope {
	for i := range events {
		if events[i].Type == messages.TypeTaskSubmitted && events[i].ID == envID {
			return &events[i]
		}
	}
	return nil
}

// taskOf tells task id (the task.submitted envID of session) from the session's
// events from its first on, and returns what they say of its run too (the
// subscription of a task follows it from there); sdk.ErrTaskNotFound when the
// events have no such task.
func taskOf(id sdk.TaskID, session, envID string, events []messages.Envelope) (*sdk.Task, *taskRun, error) {
	run := newTaskRun()
	submitted := submittedOf(events, envID)
	if submitted == nil {
		return nil, nil, sdk.ErrTaskNotFound
	}
	if err := run.scan(events, envID, nil); err != nil {
		return nil, nil, err
	}
	task := &sdk.Task{ID: id, ContextID: session}
	message := func(suffix string, role sdk.MessageRole, text string) *sdk.Message {
		return &sdk.Message{ID: envID + suffix, ContextID: session, TaskID: id, Role: role, Parts: sdk.ContentParts{sdk.TextPart{Text: text}}}
	}
	if p, err := submitted.Decode(); err == nil {
		if ts, ok := p.(*messages.TaskSubmitted); ok {
			first := message("", sdk.MessageRoleUser, ts.Input)
			if id, ok := strings.CutPrefix(submitted.CausationID, messageCausePrefix); ok && id != "" {
				first.ID = id // the client's messageId
			}
			task.History = []*sdk.Message{first}
		}
	}
	at := func(e messages.Envelope) *time.Time { t := time.UnixMicro(e.TS).UTC(); return &t }
	task.Status = sdk.TaskStatus{State: sdk.TaskStateWorking, Timestamp: at(*submitted)}
	switch {
	case run.done != nil:
		p, err := run.done.Decode()
		if err != nil {
			return nil, nil, fmt.Errorf("a2a: session %s: %w", session, err)
		}
		switch v := p.(type) {
		case *messages.TaskCompleted:
			task.Artifacts = []*sdk.Artifact{{ID: sdk.ArtifactID(AnswerArtifact + "-" + string(id)), Name: AnswerArtifact, Parts: sdk.ContentParts{sdk.TextPart{Text: v.Output}}}}
			task.Status = sdk.TaskStatus{State: sdk.TaskStateCompleted, Message: message("-end", sdk.MessageRoleAgent, v.Output), Timestamp: at(*run.done)}
		case *messages.TaskFailed:
			state := sdk.TaskStateFailed
			if v.Reason == messages.ReasonCancelled {
				state = sdk.TaskStateCanceled
			}
			task.Status = sdk.TaskStatus{State: state, Message: message("-end", sdk.MessageRoleAgent, fmt.Sprintf("%s: %s", v.Reason, v.Error)), Timestamp: at(*run.done)}
		}
	case len(run.waiting()) > 0:
		msg := approvalMessage(task, run.waiting())
		msg.ID = envID + "-approval"
		task.Status = sdk.TaskStatus{State: sdk.TaskStateInputRequired, Message: msg}
	}
	return task, run, nil
}
