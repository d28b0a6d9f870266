package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// A consolidation asked of a namespace's owner by another node (Node.Consolidate,
// a consolidate MemoryCommand) asks the model to distil and to judge conflicts,
// which may take minutes. Run in the tasks handler, it held its command
// unacknowledged all that time: the partition's committed offset stayed before it
// and, past kafka.NodeTasksInFlight messages behind it, every task and command of
// the partition (other sessions', other namespaces') waited for the model. The
// owner runs it beside the handler instead, as its own scheduled runs go (the
// consolidator's actors), and publishes its answer once the run ends; the command
// is acknowledged as the run starts.
//
// A run is keyed by its command's key: delivered again (the owner died before the
// acknowledgement was committed, or the partition moved), the command runs again
// under the same key, and the decisions the first run applied are not applied
// twice (consolidator.DecisionKey). A command delivered again while its run goes on
// here starts nothing: the run answers it. A run cut off as the node stops, or as
// the namespace moves to another node (its writes fenced), sends its command on to
// the namespace's next owner, which runs it under the same key and answers the
// caller, who still waits, as a command left unacknowledged would have reached it;
// sent on at all, it is answered so, for its caller to ask again. A run whose write
// is fenced while the node still owns the partition (its lease being taken) is not
// sent on, to come back here at once, but runs again here after taskResendPause. A node that dies
// mid-run (kill -9) answers nothing: its caller's wait ends, and a run asked again
// under the same key applies nothing twice.

// consolidates tells a command that runs a consolidation: Node.Consolidate's, or a
// call of the memory tool's consolidate (the tool's op, or its action expanded as a
// tool of its own, <name>_consolidate). call is the memory tool call c carries
// (toolCallArgs), decoded once by the caller, which runs it with these arguments;
// the zero memoryToolArgs for any other command.
func consolidates(c messages.MemoryCommand, call memoryToolArgs) bool {
	switch c.Action {
	case memoryConsolidate:
		return true
	case memoryToolCall:
		return isConsolidateCall(call.Tool, call.Arguments)
	}
	return false
}

// isConsolidateCall tells a call of the memory tool named tool that consolidates.
func isConsolidateCall(tool, arguments string) bool {
	if strings.HasSuffix(tool, "_consolidate") {
		return true
	}
	var outer struct {
		Op string `json:"op"`
	}
	return json.Unmarshal([]byte(arguments), &outer) == nil && outer.Op == "consolidate"
}

// maxConsolidationsAside bounds the consolidations a node runs for commands at
// once: each holds its namespace in memory and asks the model, for minutes. A
// command past it waits in the tasks handler for a run to end, as every
// consolidate command did before they ran beside it.
const maxConsolidationsAside = 16

// consolidationsAside are the consolidations this node runs for commands.
type consolidationsAside struct {
	mu      sync.Mutex
	running map[string]bool // by command ID
	closed  bool
	wg      sync.WaitGroup
	max     int           // at once (0: maxConsolidationsAside)
	slots   chan struct{} // one value per run under way
}

// consolidateAside starts the consolidation command c asks for and returns: its
// message is acknowledged, and the run publishes its answer when it ends. call is
// the memory tool call c carries, decoded (consolidates).
func (n *Node) consolidateAside(ctx context.Context, c messages.MemoryCommand, call memoryToolArgs) error {
	r := &n.aside
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return fmt.Errorf("%w: memory command consolidate on %s", errStopping, c.Namespace)
	}
	if r.running[c.ID] {
		r.mu.Unlock()
		return nil // delivered again meanwhile: the run under way answers it
	}
	if r.running == nil {
		r.running = map[string]bool{}
		r.slots = make(chan struct{}, cmp.Or(r.max, maxConsolidationsAside))
	}
	r.running[c.ID] = true
	r.wg.Add(1)
	slots := r.slots
	r.mu.Unlock()
	// Past the bound, the command waits here for a run to end: its message stays
	// unacknowledged, and the bus holds the partition's later ones back, as
	// before; not past the node's stop nor its message's (the partition given up).
	var refused error
	select {
	case slots <- struct{}{}:
	case <-n.stopping:
		refused = fmt.Errorf("%w: memory command consolidate on %s", errStopping, c.Namespace)
	case <-ctx.Done():
		refused = fmt.Errorf("%w: memory command consolidate on %s, waiting for a run to end: %w", errNotOwner, c.Namespace, ctx.Err())
	}
	if refused != nil {
		r.mu.Lock()
		delete(r.running, c.ID)
		r.mu.Unlock()
		r.wg.Done()
		return refused
	}
	go func() {
		defer r.wg.Done()
		defer func() { <-slots }()
		done := sync.OnceFunc(func() {
			r.mu.Lock()
			delete(r.running, c.ID)
			r.mu.Unlock()
		})
		defer done()
		// Nobody waits longer than consolidateTimeout for the answer; the node's
		// Close cuts the run off.
		ctx, cancel := context.WithTimeout(context.Background(), consolidateTimeout)
		defer cancel()
		go func() {
			select {
			case <-n.stopping:
				cancel()
			case <-ctx.Done():
			}
		}()
		rep, cut := n.consolidateAnswer(ctx, c, call)
		for cut && ctx.Err() == nil && n.ownsKey(c.SessionID) {
			// Its write was fenced, yet the node still owns the stream's
			// partition (its lease is being taken, or a newer owner fenced it
			// and the group has not revoked it here yet): sent on, the command
			// would come back here at once, again and again. It runs again
			// here after a pause, as the handler's refused command was handed
			// over again, until it runs or the partition moves.
			select {
			case <-ctx.Done():
			case <-time.After(taskResendPause):
				rep, cut = n.consolidateAnswer(ctx, c, call)
			}
		}
		// No longer under way before it is sent on: a copy read back here
		// meanwhile would start nothing, and nobody would answer it.
		done()
		if cut && ctx.Err() != context.DeadlineExceeded {
			err := n.sendOn(c)
			if err == nil {
				return
			}
			rep.Error += fmt.Sprintf("; it could not be sent on to the namespace's next owner: %v", err)
		}
		if err := n.publishMemoryReply(c, rep); err != nil {
			n.cfg.Logger.Warn("the answer of a consolidation was not sent: its caller's wait ends without it (asked again under the same key, the run applies nothing twice)",
				"command", c.ID, "namespace", c.Namespace, "err", err)
		}
	}()
	return nil
}

// sendOn sends command c again to troupe.tasks, for the owner of its stream's
// partition, as a new message (a node dedupes messages by ID) with c's ID, which its
// caller's reply waits for.
func (n *Node) sendOn(c messages.MemoryCommand) error {
	b, err := messages.EncodeCommand(&c)
	if err != nil {
		return err
	}
	msg := message.NewMessage(n.cfg.IDs.NewID(), b)
	msg.Metadata.Set(messages.MetaSessionID, c.SessionID)
	msg.Metadata.Set(messages.MetaType, messages.TypeMemoryCommand)
	return n.pub.Publish(messages.TopicTasks, msg)
}

// consolidateAnswer runs the consolidation c asks for (call: the memory tool call
// it carries, decoded) and returns its answer; cut tells a run cut off on this
// node (it stops, or no longer owns the namespace).
func (n *Node) consolidateAnswer(ctx context.Context, c messages.MemoryCommand, call memoryToolArgs) (rep messages.MemoryReply, cut bool) {
	rep = messages.MemoryReply{ID: c.ID}
	if c.Action == memoryToolCall {
		res, err := n.runMemoryTool(ctx, c.Key, call)
		switch {
		case err != nil && (errors.Is(err, errStopping) || errors.Is(err, eventlog.ErrFenced)):
			rep.Error = fmt.Sprintf("the memory tool's consolidate of %s was cut off on node %s, which owned it: %v", c.Namespace, n.cfg.NodeID, err)
			return rep, true
		case errors.Is(err, memory.ErrInvalid):
			rep.Error, rep.Kind = err.Error(), "invalid"
		case err != nil:
			rep.Error = err.Error()
		default:
			rep.Result = res
		}
		return rep, false
	}
	res, err := n.consolidateLocal(ctx, c.Namespace, c.Key)
	var out consolidateAnswer
	switch {
	case err != nil && (ctx.Err() != nil || errors.Is(err, eventlog.ErrFenced) || errors.Is(err, consolidator.ErrNotOwned) || errors.Is(err, consolidator.ErrClosed)):
		rep.Error = fmt.Sprintf("the consolidation of %s was cut off on node %s, which owned it (it stops, or the namespace moved to another node): %v; asked again under the same key, it applies nothing twice",
			c.Namespace, n.cfg.NodeID, err)
		return rep, true
	case errors.Is(err, memory.ErrInvalid):
		rep.Error, rep.Kind = err.Error(), "invalid"
		return rep, false
	case err != nil:
		out.Error = err.Error() // as the run's error would be, run here
	default:
		out.Report = &res
	}
	b, err := json.Marshal(out)
	if err != nil {
		rep.Error = fmt.Sprintf("the report of the consolidation of %s: %v", c.Namespace, err)
		return rep, false
	}
	rep.Result = b
	return rep, false
}

// close ends the runs: the node's stopping cut them off; it waits for their
// answers until ctx ends.
func (r *consolidationsAside) close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("node: consolidations still running past the stop timeout: %w", ctx.Err())
	}
}
