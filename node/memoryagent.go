package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// The agent's memory in its loop (issue 12: "write path like Mem0, control like
// Letta"), for an agent with a memory tool (Config.MemoryTool), in its namespace
// (the tool's, or the agent's own: NamedAgent.MemoryNamespace):
//
//   - its core blocks are in the system prompt of every task: the ingress renders
//     the blocks of the tool's namespace into the task (messages.TaskSubmitted.Memory),
//     so the session, a refold and replay verify all build the prompt from the log;
//   - with Config.MemoryWriteAfterTask, each completed task is remembered: a
//     worker runs memory.Namespace.Remember on the tool's namespace with the task's
//     turn, off the session actor.

// coreMemoryTimeout bounds the read of the blocks for one task at ingress.
const coreMemoryTimeout = 5 * time.Second

// coreMemory returns the core blocks of the namespace of agent (the task's,
// Config.memoryNamespace), rendered (memory.RenderBlocks), as they stand now: "" when
// the node has no memory tool or no block holds a value. The namespace first folds what other writers appended (a
// memory tool call on another node); when that read fails, the blocks this node
// folded last are used, and the failure is logged: a task is not refused for it.
func (n *Node) coreMemory(agent string) string {
	if n.memories == nil || n.cfg.MemoryTool == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), coreMemoryTimeout)
	defer cancel()
	name := n.cfg.memoryNamespace(agent)
	ns, err := n.memories.Namespace(ctx, name)
	if err != nil {
		n.cfg.Logger.Warn("core memory: the task runs without its blocks", "namespace", name, "err", err)
		return ""
	}
	if err := ns.Refresh(ctx); err != nil {
		n.cfg.Logger.Warn("core memory: the blocks may miss a recent edit", "namespace", name, "err", err)
	}
	blocks := ns.Blocks()
	for _, b := range blocks {
		if b.Value != "" {
			return memory.RenderBlocks(blocks)
		}
	}
	return ""
}

// sessionEvents is SessionDeps.Live: each batch of a session's events, once durable,
// goes to the hub's local watchers, the session feed, the write after task and the
// cancellation of a failed task's sub-agents (parentEnds). It never blocks.
func (n *Node) sessionEvents(sessionID string, events []messages.Envelope) {
	n.metrics.sessions.observe(events)
	n.feed.observe(events)
	if n.afterTask != nil {
		n.afterTask.observe(sessionID, events)
	}
	if n.parentEnds != nil {
		n.parentEnds.observe(sessionID, events)
	}
	n.hub.deliver(sessionID, events)
}

// Bounds of the write after task.
const (
	// afterTaskQueue bounds the completed tasks waiting to be remembered; past it a
	// task is not remembered, and a warning says so.
	afterTaskQueue = 1024
	// afterTaskInputs bounds the inputs of running tasks kept from their
	// task.submitted; past it (or for a task submitted before this process started)
	// the input is read from the log.
	afterTaskInputs = 4096
	// afterTaskTimeout bounds one Remember (extraction and decisions, with a model).
	afterTaskTimeout = 2 * time.Minute
	// afterTaskRetryFirst, afterTaskRetryMax and afterTaskRetryFor pace the
	// retries of a Remember that failed transiently (rememberLogged).
	afterTaskRetryFirst = 500 * time.Millisecond
	afterTaskRetryMax   = 30 * time.Second
	afterTaskRetryFor   = 5 * time.Minute
	// afterTaskRecover is how far back a start, or a partition's assignment, looks
	// for completed tasks not remembered yet (recoverPending): a node down for
	// longer leaves those that completed before unremembered.
	afterTaskRecover = time.Hour
	// afterTaskRecoverSessions bounds the sessions whose logs one recovery reads
	// (their ends: recentEvents): the most recently started of those updated
	// within afterTaskRecover.
	afterTaskRecoverSessions = 4096
	// afterTaskHandled bounds the turns a process remembers having remembered
	// (afterTaskWriter.handled).
	afterTaskHandled = 4096
)

// afterTaskWriter remembers completed tasks (Config.MemoryWriteAfterTask): observe
// picks the task.completed events out of a session's batches, and one worker (a
// queueWorker) runs Remember for each, in order.
//
// The queue is in memory; what it held is derived again from the log. A node
// that closed, or was killed, while turns waited (or were retried, the embedder
// down) remembers them at its next start, and in a cluster the next owner of a
// session's partition does (recover, recoverPending): each task.completed of the
// sessions updated within afterTaskRecover whose turn's Remember the namespace's
// stream does not show done is remembered, under the key it had, before the tasks
// completed after it. A turn remembered before is not performed again: one that
// wrote facts is known by their keys, one whose Remember found nothing to write
// by the memory.remembered it ended with (memory.RememberOptions.Mark). A node
// stopped between a turn's extraction and that mark (or a turn an older build
// remembered, or a node pinned to decision rules older than 12 did, which wrote
// no mark: actors.MarksRemembered) extracts it once more at the next start, or
// the next node does, and writes nothing again; the recoveries of the process
// that remembered it (a partition's assignment) skip it.
type afterTaskWriter struct {
	n *Node
	q *queueWorker[afterTaskJob]

	mu     sync.Mutex
	inputs map[string]taskInput // task ID (its task.submitted's event ID) -> its input and agent
	closed bool
	// handled holds the keys (afterTaskKey) of the last afterTaskHandled turns
	// this process remembered, whatever they wrote: a recovery does not perform
	// them again, nor reads their namespace for them (a turn that wrote nothing
	// and whose mark failed to be written looks to the namespace as one never
	// remembered), and the live job of a turn that a recovery ahead of it in the
	// queue remembered (the turn completed as the recovery listed the sessions)
	// is not performed either.
	handled *boundedSet
}

// taskInput is what a task.submitted says that the write after task needs.
type taskInput struct{ input, agent string }

// afterTaskJob is one completed task: its session, the task.completed event and the
// task's input when observe saw its task.submitted.
type afterTaskJob struct {
	session   string
	completed messages.Envelope
	input     taskInput
	haveInput bool
	// recover, when set, makes the job the recovery of the turns of the sessions
	// it picks that the log says are not remembered yet (recoverPending).
	recover func(session string) bool
}

// newAfterTaskWriter remembers each task in the namespace of its agent
// (Config.memoryNamespace).
func newAfterTaskWriter(n *Node) *afterTaskWriter {
	w := &afterTaskWriter{n: n, inputs: map[string]taskInput{}, handled: newBoundedSet(afterTaskHandled)}
	w.q = newQueueWorker(afterTaskQueue, w.rememberLogged)
	return w
}

// observe queues the completed tasks of a batch; it never blocks.
func (w *afterTaskWriter) observe(sessionID string, events []messages.Envelope) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	for _, e := range events {
		switch e.Type {
		case messages.TypeTaskSubmitted:
			if len(w.inputs) >= afterTaskInputs {
				continue
			}
			if in, err := taskInputOf(e); err == nil {
				w.inputs[e.ID] = in
			}
		case messages.TypeTaskFailed:
			delete(w.inputs, e.CorrelationID)
		case messages.TypeTaskCompleted:
			input, ok := w.inputs[e.CorrelationID]
			delete(w.inputs, e.CorrelationID)
			if w.q.offer(afterTaskJob{session: sessionID, completed: e, input: input, haveInput: ok}) == queueFull {
				w.n.cfg.Logger.Warn("memory write after task: the queue is full; this task is not remembered",
					"session", sessionID, "seq", e.Seq, "namespace", w.n.cfg.memoryNamespace(input.agent))
			}
		}
	}
}

// rememberLogged remembers job, and logs a failure: the task's result stands. A
// transient failure (llm.ErrTransient: the embedder or the model down, slow or
// answering 5xx) is tried again, afterTaskRetryFirst, then twice as long each time up to
// afterTaskRetryMax apart, for afterTaskRetryFor: the key makes a retry write
// nothing twice, and a turn that completed during a restart of the embedder is
// remembered once it is back instead of being lost. The jobs behind it wait, in order.
func (w *afterTaskWriter) rememberLogged(ctx context.Context, job afterTaskJob) {
	if job.recover != nil {
		w.recoverPending(ctx, job.recover)
		return
	}
	if w.wasHandled(afterTaskKey(job)) {
		// The start's recovery (or a partition's) ran while the task completed,
		// found its turn in the log and remembered it, ahead of this job queued
		// behind it: the turn is not extracted twice.
		return
	}
	giveUp := time.Now().Add(afterTaskRetryFor)
	wait := afterTaskRetryFirst
	var err error
	defer func() {
		if err != nil {
			w.n.cfg.Logger.Warn("memory write after task failed; the task's result stands", "session", job.session,
				"seq", job.completed.Seq, "err", err)
		}
	}()
	for {
		if err = w.remember(ctx, job); err == nil {
			w.markHandled(afterTaskKey(job))
			return
		}
		if !errors.Is(err, llm.ErrTransient) || ctx.Err() != nil || time.Now().Add(wait).After(giveUp) {
			return
		}
		w.n.cfg.Logger.Info("memory write after task failed for now; it is tried again", "session", job.session,
			"seq", job.completed.Seq, "in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, afterTaskRetryMax)
	}
}

// remember writes what a completed task said to the namespace of its agent, under
// its key (afterTaskKey): a task remembered twice writes once, and a turn with
// nothing to keep is marked remembered once (Node.remember).
func (w *afterTaskWriter) remember(ctx context.Context, job afterTaskJob) error {
	ctx, cancel := context.WithTimeout(ctx, afterTaskTimeout)
	defer cancel()
	p, err := job.completed.Decode()
	if err != nil {
		return err
	}
	output := p.(*messages.TaskCompleted).Output
	in := job.input
	if !job.haveInput {
		if in, err = w.inputOf(ctx, job.session, job.completed.CorrelationID); err != nil {
			return err
		}
	}
	name := w.n.cfg.memoryNamespace(in.agent)
	turn := memory.Turn{
		Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: in.input}, {Role: messages.RoleAssistant, Content: output}},
		Source:   messages.MemorySource{Kind: "session", ID: job.session, Seq: job.completed.Seq},
	}
	key := afterTaskKey(job)
	if w.n.memoryRouted() {
		// The namespace is written by the owner of its partition, as every other
		// write of it is (memoryroute.go): this node's write would be fenced.
		if err := w.n.rememberRemote(ctx, name, key, turn); err != nil {
			return fmt.Errorf("namespace %s: %w", name, err)
		}
		return nil
	}
	if _, err := w.n.remember(ctx, name, key, turn); err != nil {
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	return nil
}

// afterTaskKey is the idempotency key of a job's Remember: "<session>/<seq of
// task.completed>/<its task.submitted's event ID>", the task's ID telling a
// session pruned and begun again under the same ID apart, whose turn at the
// same seq was remembered under "<session>/<seq>" alone.
func afterTaskKey(job afterTaskJob) string {
	return legacyAfterTaskKey(job) + "/" + job.completed.CorrelationID
}

// legacyAfterTaskKey is the key a job's Remember had before afterTaskKey named
// its task: the recovery takes a turn remembered under it by an earlier build
// for remembered, rather than remembering it twice.
func legacyAfterTaskKey(job afterTaskJob) string {
	return job.session + "/" + strconv.FormatUint(job.completed.Seq, 10)
}

// recover queues the recovery of the turns of the sessions pick picks that are
// not remembered yet (recoverPending), behind the jobs queued: the node offers it
// as it starts, before it routes a task, and as it is assigned partitions.
func (w *afterTaskWriter) recover(pick func(session string) bool) {
	if pick == nil {
		pick = func(string) bool { return true }
	}
	if w.q.offer(afterTaskJob{recover: pick}) == queueFull {
		w.n.cfg.Logger.Warn("memory write after task: the queue is full; the completed tasks not remembered yet are not looked for")
	}
}

// recoverPending remembers, in the order of the log, the completed tasks of the
// sessions pick picks, among those updated within afterTaskRecover (at most
// afterTaskRecoverSessions of them), whose Remember the namespace does not show
// done yet (memory.Namespace.RememberedUnder their key: a fact written under it,
// or its memory.remembered): those a node closed or killed before it remembered
// them, on this node or another. Each is
// remembered as a job observed live is (rememberLogged), under the same key.
func (w *afterTaskWriter) recoverPending(ctx context.Context, pick func(string) bool) {
	since := w.n.cfg.Clock.Now().Add(-afterTaskRecover).UnixMicro()
	infos, err := w.n.log.Sessions(ctx, eventlog.Filter{UpdatedSinceUS: since, SessionsOnly: true, Limit: afterTaskRecoverSessions})
	if err != nil {
		w.n.cfg.Logger.Warn("memory write after task: list the sessions updated lately; the completed tasks not remembered yet are not", "err", err)
		return
	}
	slices.Reverse(infos) // the oldest first
	recovered := 0
	refreshed := map[string]*memory.Namespace{} // each namespace read from the log once a pass
	for _, s := range infos {
		if ctx.Err() != nil {
			return
		}
		if !pick(s.ID) {
			continue
		}
		events, err := w.recentEvents(ctx, s.ID, s.LastSeq, since)
		if err != nil {
			w.n.cfg.Logger.Warn("memory write after task: read a session; its completed tasks not remembered yet are not", "session", s.ID, "err", err)
			continue
		}
		inputs := map[string]taskInput{}
		for _, e := range events {
			switch e.Type {
			case messages.TypeTaskSubmitted:
				if in, err := taskInputOf(e); err == nil {
					inputs[e.ID] = in
				}
			case messages.TypeTaskCompleted:
				if e.TS < since {
					continue
				}
				in, ok := inputs[e.CorrelationID]
				job := afterTaskJob{session: s.ID, completed: e, input: in, haveInput: ok}
				if w.wasHandled(afterTaskKey(job)) || w.remembered(ctx, job, refreshed, false) {
					continue
				}
				// The namespace was read at the pass's first turn of it, maybe
				// many model calls ago (the turns of other namespaces'): another
				// writer (a recovery of another node, the session's previous owner
				// draining its queue) may have remembered this turn since. It is
				// read again, up to its end, right before the extraction.
				if w.remembered(ctx, job, refreshed, true) {
					continue
				}
				recovered++
				w.rememberLogged(ctx, job)
			}
		}
	}
	if recovered > 0 {
		w.n.cfg.Logger.Info("memory write after task: completed tasks not remembered before a restart or a rebalance were remembered again", "count", recovered)
	}
}

// markHandled records that the turn of key was remembered by this process.
func (w *afterTaskWriter) markHandled(key string) { w.handled.add(key) }

// wasHandled reports whether this process remembered the turn of key.
func (w *afterTaskWriter) wasHandled(key string) bool { return w.handled.has(key) }

// recentSpan is how many events at the end of a session recentEvents reads
// first; it reads four times as many each time that was not enough.
const recentSpan = 64

// recentEvents reads the end of session's log (lastSeq its highest seq): back to
// its first event stamped before since, and to the task.submitted of each
// task.completed stamped since then, reading a span of events at the end and
// then longer ones, each four times the last, until it holds them (or the whole
// log). A long session with a turn within afterTaskRecover costs its last
// events, not its whole log, which recoverPending read for each session
// updated within it.
func (w *afterTaskWriter) recentEvents(ctx context.Context, session string, lastSeq uint64, since int64) ([]messages.Envelope, error) {
	for span := uint64(recentSpan); ; span *= 4 {
		from := uint64(1)
		if lastSeq > span {
			from = lastSeq - span + 1
		}
		events, err := w.n.log.Read(ctx, session, from)
		if err != nil || from == 1 {
			return events, err
		}
		if len(events) == 0 {
			// lastSeq counts events the reads do not return (on ClickHouse, a
			// stale owner's hidden at the end of the log): read further back.
			continue
		}
		if events[0].TS < since && allSubmitted(events, since) {
			return events, nil
		}
	}
}

// allSubmitted reports whether events hold the task.submitted of each of their
// task.completed stamped at or after since.
func allSubmitted(events []messages.Envelope, since int64) bool {
	submitted := map[string]bool{}
	for _, e := range events {
		switch e.Type {
		case messages.TypeTaskSubmitted:
			submitted[e.ID] = true
		case messages.TypeTaskCompleted:
			if e.TS >= since && !submitted[e.CorrelationID] {
				return false
			}
		}
	}
	return true
}

// remembered reports whether job's Remember is done already (it wrote facts, or
// marked the turn remembered with nothing to keep), as the namespace's stream in
// the log says (on any node: the owner of the
// namespace appends its writes before it answers). When the log cannot tell, it
// reports false: the write is made again under its key, which writes nothing twice.
// refreshed holds the namespaces this recovery pass brought up to date with the
// log already: each is read once a pass, not once a task, unless again asks for
// what was appended to it since (a read of its new events, right before a turn's
// extraction).
func (w *afterTaskWriter) remembered(ctx context.Context, job afterTaskJob, refreshed map[string]*memory.Namespace, again bool) bool {
	if w.n.memories == nil {
		return false
	}
	name := w.n.cfg.memoryNamespace(job.input.agent)
	ns := refreshed[name]
	if ns != nil && again {
		if err := ns.Refresh(ctx); err != nil {
			return false
		}
	}
	if ns == nil {
		var err error
		if ns, err = w.n.memories.Namespace(ctx, name); err != nil {
			return false
		}
		if err := ns.Refresh(ctx); err != nil {
			return false
		}
		refreshed[name] = ns
	}
	return ns.RememberedUnder(afterTaskKey(job)) || ns.RememberedUnder(legacyAfterTaskKey(job))
}

// remember runs Remember on namespace name here, and returns how many memories it
// updated.
func (n *Node) remember(ctx context.Context, name, key string, turn memory.Turn) (int, error) {
	ns, err := n.memories.Namespace(ctx, name)
	if err != nil {
		return 0, err
	}
	// Mark: a turn with nothing to keep says so in the namespace's stream, so
	// that no recovery extracts it again (afterTaskWriter.remembered); not when
	// the node is pinned to decision rules older than 12 (a rolling upgrade),
	// whose builds cannot fold a namespace holding the mark.
	decisions, err := ns.Remember(ctx, key, turn, memory.RememberOptions{Mark: actors.MarksRemembered(n.cfg.DecisionRules)})
	// Its adds are heard of through memory.Config.Written, as every Add is; its
	// updates are told here.
	updated := 0
	for _, d := range decisions {
		if d.Event == memory.EventUpdate {
			updated++
		}
	}
	if updated > 0 {
		n.memoryWritten(name, updated)
	}
	return updated, err
}

// rememberAnswer is the answer of a routed Remember: how many memories it
// updated, or why it failed, and whether that failure is transient (llm.ErrTransient
// at the owner: its embedder or model down), which the sender's write after task
// tries again (rememberLogged) as it does a local one.
type rememberAnswer struct {
	Updated   int    `json:"updated"`
	Error     string `json:"error,omitempty"`
	Transient bool   `json:"transient,omitempty"`
}

// rememberRemote sends the write after task of a turn to the owner of namespace
// name (a MemoryCommand, action memoryRemember) and waits for its answer.
func (n *Node) rememberRemote(ctx context.Context, name, key string, turn memory.Turn) error {
	args, err := json.Marshal(turn)
	if err != nil {
		return err
	}
	if len(args) > memoryMessageMax-16<<10 {
		return fmt.Errorf("the turn is %d bytes of JSON, more than the %d it can be sent to the namespace's owner in", len(args), memoryMessageMax-16<<10)
	}
	c := messages.MemoryCommand{ID: n.cfg.IDs.NewID(), SessionID: memory.Stream(name), Namespace: name, Action: memoryRemember,
		Key: key, Args: args, ReplyTopic: messages.TopicReplies, ReplyNode: n.cfg.NodeID}
	res, err := n.memoryRemoteWithin(ctx, c, afterTaskTimeout)
	if errors.Is(err, context.DeadlineExceeded) {
		// The owner did not answer (it stops, or its partition moves): sent again
		// under its key, the write is made once.
		return fmt.Errorf("%w: %w", err, llm.ErrTransient)
	}
	if err != nil {
		return err
	}
	var ans rememberAnswer
	if err := json.Unmarshal(res, &ans); err != nil {
		return fmt.Errorf("the answer of the namespace's owner: %w", err)
	}
	switch {
	case ans.Error != "" && ans.Transient:
		return fmt.Errorf("the namespace's owner: %s: %w", ans.Error, llm.ErrTransient)
	case ans.Error != "":
		return errors.New(ans.Error)
	}
	return nil
}

// rememberLocal runs a routed write after task on this node, the namespace's
// owner. A failure of Remember (its model's, say) is answered, not retried here: a
// retry would hold the namespace's later commands behind it. A transient one is
// answered as such (rememberAnswer.Transient), and its sender tries it again. A fenced write is not answered (handleMemoryCommand).
func (n *Node) rememberLocal(ctx context.Context, c messages.MemoryCommand) (json.RawMessage, error) {
	var turn memory.Turn
	if err := json.Unmarshal(c.Args, &turn); err != nil {
		return nil, fmt.Errorf("%w: remember: %v", memory.ErrInvalid, err)
	}
	ctx, cancel := context.WithTimeout(ctx, afterTaskTimeout)
	defer cancel()
	updated, err := n.remember(ctx, c.Namespace, c.Key, turn)
	if errors.Is(err, eventlog.ErrFenced) {
		return nil, err
	}
	ans := rememberAnswer{Updated: updated}
	if err != nil {
		ans.Error, ans.Transient = err.Error(), errors.Is(err, llm.ErrTransient)
	}
	return json.Marshal(ans)
}

// inputOf reads a task's input and agent from its session's task.submitted in the log.
func (w *afterTaskWriter) inputOf(ctx context.Context, session, taskID string) (taskInput, error) {
	events, err := w.n.log.Read(ctx, session, 1)
	if err != nil {
		return taskInput{}, err
	}
	for _, e := range events {
		if e.ID == taskID && e.Type == messages.TypeTaskSubmitted {
			return taskInputOf(e)
		}
	}
	return taskInput{}, fmt.Errorf("node: no task.submitted %s in session %s", taskID, session)
}

// taskInputOf reads a task's input and agent from its task.submitted event e.
func taskInputOf(e messages.Envelope) (taskInput, error) {
	p, err := e.Decode()
	if err != nil {
		return taskInput{}, err
	}
	ts := p.(*messages.TaskSubmitted)
	return taskInput{input: ts.Input, agent: ts.Agent}, nil
}

// close stops the worker once it has remembered the tasks queued (node run closes
// its node right after its task), waiting at most timeout; past it, the Remember
// running is cancelled (its writes are keyed: the part done stays, nothing is
// half-written) and the tasks still queued are not remembered. The session actors
// are stopped first, so nothing more is observed.
func (w *afterTaskWriter) close(timeout time.Duration) {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	if finished, dropped := w.q.close(timeout, time.Second); !finished {
		w.n.cfg.Logger.Warn("memory write after task: closing before every completed task was remembered", "timeout", timeout,
			"not_remembered", dropped)
	}
}
