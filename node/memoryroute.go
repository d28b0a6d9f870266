package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/telemetry"
)

// A memory namespace is owned like a session. On an embedded node (or one that does
// not shard its sessions) every namespace is this node's, and its operations run here.
// On a sharded cluster, a namespace belongs to the owner of its stream's partition of
// troupe.tasks ("memory/<namespace>", partitioned as a session ID is): an operation
// travels there as a messages.MemoryCommand on troupe.tasks, in order with the
// namespace's other commands, and its answer comes back on troupe.replies. So one
// node at a time writes a namespace, and a rebalance hands namespaces over with the
// partitions: the next owner folds the stream before its first operation.

// The actions of a MemoryCommand.
const (
	memoryAdd     = "add"     // args: []memory.Input → {"ids": [...]}
	memorySearch  = "search"  // args: memory.Query → {"results": [...]}
	memoryHistory = "history" // args: {"id"} → HistoryAnswer
	// args: memoryToolArgs → memoryToolAnswer (memorytool.go)
	memoryToolCall = "tool"
	// args: memory.Turn → rememberAnswer (memoryagent.go: the write after task)
	memoryRemember = "remember"
	// args: []memory.Input → {}: would an add under the key write, or is the key
	// used for other memories (key_reused)? Nothing is written.
	memoryCheckKey = "check_key"
	// args: {} → consolidateAnswer: a consolidation run under the command's key
	// (Node.Consolidate)
	memoryConsolidate = "consolidate"
)

// consolidateAnswer is the answer of a consolidate command: the run's report, or
// the error it failed with.
type consolidateAnswer struct {
	Report *consolidator.Report `json:"report,omitempty"`
	Error  string               `json:"error,omitempty"`
}

// memoryTimeout bounds the wait for a namespace's owner to answer a command.
const memoryTimeout = 30 * time.Second

// memoryWait is how long memoryRemote waits: memoryTimeout, shorter in tests.
var memoryWait = memoryTimeout

// memoryMessageMax bounds the payload of a MemoryCommand and of a MemoryReply on
// the bus, under the 1 MiB a Kafka message holds by default (the broker's
// message.max.bytes, the producer's BatchBytes). A larger add is sent in parts
// (addMemories); a search's answer keeps its best results that fit (at most
// limit, as ever); any other answer past it is an error, never a reply the bus
// refuses over and over.
const memoryMessageMax = 768 << 10

// memoryRouter holds the commands this node sent, waiting for their replies.
type memoryRouter struct {
	mu      sync.Mutex
	pending map[string]chan messages.MemoryReply
}

// memoryRouted reports whether the node sends its memory operations to the
// namespaces' owners.
func (n *Node) memoryRouted() bool { return n.sharded() }

// memoryExec runs one operation on a namespace, here or on its owner, and returns
// its JSON result. Errors of the request wrap memory.ErrInvalid or
// memory.ErrNotFound, wherever they happened.
func (n *Node) memoryExec(ctx context.Context, namespace, action, key string, args any) (json.RawMessage, error) {
	return n.memoryExecWithin(ctx, namespace, action, key, args, memoryWait)
}

// memoryExecWithin is memoryExec waiting at most wait for the owner's answer: an
// HTTP write or search waits as long as it does on one node (memoryWriteTimeout,
// searchTimeout), for the owner embeds its memories or its query first.
func (n *Node) memoryExecWithin(ctx context.Context, namespace, action, key string, args any, wait time.Duration) (json.RawMessage, error) {
	if n.memories == nil {
		return nil, errors.New("node: no memory configured")
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("node: memory %s: %w", action, err)
	}
	c := messages.MemoryCommand{ID: n.cfg.IDs.NewID(), SessionID: memory.Stream(namespace), Namespace: namespace, Action: action,
		Key: key, Args: raw, ReplyTopic: messages.TopicReplies, ReplyNode: n.cfg.NodeID}
	if !n.memoryRouted() {
		return n.memoryLocal(ctx, c, 0)
	}
	return n.memoryRemoteWithin(ctx, c, wait)
}

// addMemories adds a namespace's share of a request under key, in one command; on a
// node that routes its memory operations, in as many commands as the bus needs
// (each at most memoryMessageMax, each one append, under requestPartKey), in order. It
// returns the IDs in the order of batch. digest, when given, is that of the
// client's request (memory.RequestKey): the key sent with another request is
// refused (memory.ErrKeyReused).
func (n *Node) addMemories(ctx context.Context, namespace, key, digest string, batch []memory.Input) ([]string, error) {
	parts := [][]memory.Input{batch}
	if n.memoryRouted() {
		var err error
		if parts, err = splitInputs(batch, memoryMessageMax-16<<10); err != nil {
			return nil, err
		}
	}
	ids := make([]string, 0, len(batch))
	for i, part := range parts {
		k := requestPartKey(key, digest, i, len(parts))
		// The owner embeds the part before it appends: as long a wait as on one
		// node, not the 30 s of a command, past which the sender answered 503 for
		// memories the owner went on to store.
		res, err := n.memoryExecWithin(ctx, namespace, memoryAdd, k, part, memoryWriteTimeout)
		if err != nil {
			return nil, err
		}
		var got struct{ IDs []string }
		if err := json.Unmarshal(res, &got); err != nil {
			return nil, fmt.Errorf("node: the answer of memory add: %w", err)
		}
		if len(got.IDs) != len(part) {
			return nil, fmt.Errorf("node: %d ids for %d memories", len(got.IDs), len(part))
		}
		ids = append(ids, got.IDs...)
	}
	return ids, nil
}

// requestPartKey is the key of part i of n of a namespace's share of a request
// under key: key itself for one part, key/<i> for more; with the request's
// digest, when given, RequestKey or RequestPartKey of them, so that the parts
// name one client's key (a share cut otherwise, sent again, is still the same
// key).
func requestPartKey(key, digest string, i, n int) string {
	switch {
	case digest == "" && n > 1:
		return fmt.Sprintf("%s/%d", key, i)
	case digest == "":
		return key
	case n > 1:
		return memory.RequestPartKey(key, digest, i)
	}
	return memory.RequestKey(key, digest)
}

// splitInputs cuts inputs into runs whose JSON arrays are at most max bytes; an
// input larger on its own is refused (memory.ErrInvalid).
func splitInputs(inputs []memory.Input, max int) ([][]memory.Input, error) {
	var parts [][]memory.Input
	start, size := 0, 2
	for i, in := range inputs {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("%w: memory %d: %v", memory.ErrInvalid, i, err)
		}
		if len(b)+2 > max {
			return nil, fmt.Errorf("%w: memory %d is %d bytes of JSON, more than the %d a memory can be sent to its namespace's owner in", memory.ErrInvalid, i, len(b), max)
		}
		if size+len(b)+1 > max {
			parts = append(parts, inputs[start:i])
			start, size = i, 2
		}
		size += len(b) + 1
	}
	return append(parts, inputs[start:]), nil
}

// checkMemories tells, writing nothing, whether addMemories(ctx, namespace, key,
// batch) would be refused as a key used for other memories (memory.ErrKeyReused):
// the parts of the batch are checked under the keys addMemories would write them
// with.
func (n *Node) checkMemories(ctx context.Context, namespace, key, digest string, batch []memory.Input) error {
	parts := [][]memory.Input{batch}
	if n.memoryRouted() {
		var err error
		if parts, err = splitInputs(batch, memoryMessageMax-16<<10); err != nil {
			return err
		}
	}
	for i, part := range parts {
		k := requestPartKey(key, digest, i, len(parts))
		if _, err := n.memoryExec(ctx, namespace, memoryCheckKey, k, part); err != nil {
			return err
		}
	}
	return nil
}

// memoryLocal runs a command on this node's memories. max, when positive, bounds
// the bytes of a search's answer: its best results that fit.
func (n *Node) memoryLocal(ctx context.Context, c messages.MemoryCommand, max int) (json.RawMessage, error) {
	var out any
	switch c.Action {
	case memoryAdd:
		var inputs []memory.Input
		if err := json.Unmarshal(c.Args, &inputs); err != nil {
			return nil, fmt.Errorf("%w: %v", memory.ErrInvalid, err)
		}
		v, err := n.memHost.Do(ctx, c.Namespace, func(ctx context.Context, _ *memory.Namespace) (any, error) {
			res, err := addToNamespace(ctx, n.memories, c.Namespace, c.Key, inputs, "added over HTTP")
			if err != nil {
				return nil, err
			}
			return resultIDs(res), nil
		})
		ids, _ := v.([]string)
		if err != nil {
			return nil, err
		}
		out = map[string][]string{"ids": ids}
	case memoryCheckKey:
		var inputs []memory.Input
		if err := json.Unmarshal(c.Args, &inputs); err != nil {
			return nil, fmt.Errorf("%w: %v", memory.ErrInvalid, err)
		}
		_, err := n.memHost.Do(ctx, c.Namespace, func(ctx context.Context, _ *memory.Namespace) (any, error) {
			return nil, checkKey(ctx, n.memories, c.Namespace, c.Key, inputs, "added over HTTP")
		})
		if err != nil {
			return nil, err
		}
		out = struct{}{}
	case memorySearch:
		var q memory.Query
		if err := json.Unmarshal(c.Args, &q); err != nil {
			return nil, fmt.Errorf("%w: %v", memory.ErrInvalid, err)
		}
		results, note, err := n.memHost.SearchNoted(ctx, c.Namespace, q)
		if err != nil {
			return nil, err
		}
		warnUnwritableTimes(n.cfg.Logger, c.Namespace, results)
		hits := SearchHits(results)
		if note == "" {
			if ns, err := n.memories.Namespace(ctx, c.Namespace); err == nil {
				note = ns.VectorNote(q)
			}
		}
		for {
			b, err := json.Marshal(SearchAnswer{Results: hits, Note: note})
			if err != nil || max <= 0 || len(b) <= max || len(hits) == 0 {
				return b, err
			}
			hits = hits[:len(hits)-1] // the worst of them
		}
	case memoryHistory:
		var a struct{ ID string }
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return nil, fmt.Errorf("%w: %v", memory.ErrInvalid, err)
		}
		ans, err := MemoryHistory(ctx, n.memories, c.Namespace, a.ID)
		if err != nil {
			return nil, err
		}
		out = ans
	case memoryConsolidate:
		rep, err := n.consolidateLocal(ctx, c.Namespace, c.Key)
		switch {
		case err != nil && ctx.Err() != nil:
			// Not answered: the namespace's next owner runs it, under the same key.
			return nil, fmt.Errorf("%w: consolidation of %s cut off on its owner (%w): %w", errStopping, c.Namespace, context.Cause(ctx), err)
		case errors.Is(err, eventlog.ErrFenced), errors.Is(err, consolidator.ErrNotOwned):
			return nil, err // not answered: its owner runs it (handleMemoryCommand)
		case errors.Is(err, memory.ErrInvalid):
			return nil, err
		case err != nil:
			out = consolidateAnswer{Error: err.Error()} // as the run's error would be, run here
		default:
			out = consolidateAnswer{Report: &rep}
		}
	case memoryToolCall:
		call, err := toolCallArgs(c)
		if err != nil {
			return nil, err
		}
		return n.runMemoryTool(ctx, c.Key, call)
	case memoryRemember:
		return n.rememberLocal(ctx, c) // memoryagent.go
	case notesToolCall:
		return n.runNotesTool(ctx, c) // notesroute.go
	case kbAddAction, kbRemoveAction, kbPartAction:
		return n.kbLocal(ctx, c) // knowledgeroute.go
	default:
		return nil, fmt.Errorf("%w: unknown memory action %q", memory.ErrInvalid, c.Action)
	}
	return json.Marshal(out)
}

// memoryRemote sends a command to the namespace's owner and waits for its reply.
func (n *Node) memoryRemote(ctx context.Context, c messages.MemoryCommand) (json.RawMessage, error) {
	return n.memoryRemoteWithin(ctx, c, memoryWait)
}

// memoryRemoteWithin is memoryRemote waiting at most timeout for the reply.
func (n *Node) memoryRemoteWithin(ctx context.Context, c messages.MemoryCommand, timeout time.Duration) (json.RawMessage, error) {
	b, err := messages.EncodeCommand(&c)
	if err != nil {
		return nil, err
	}
	ch := make(chan messages.MemoryReply, 1)
	r := &n.memRouter
	r.mu.Lock()
	if r.pending == nil {
		r.pending = map[string]chan messages.MemoryReply{}
	}
	r.pending[c.ID] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.pending, c.ID)
		r.mu.Unlock()
	}()
	msg := message.NewMessage(c.ID, b)
	msg.Metadata.Set(messages.MetaSessionID, c.SessionID)
	msg.Metadata.Set(messages.MetaType, messages.TypeMemoryCommand)
	if n.tracing.on() {
		telemetry.Inject(ctx, msg.Metadata) // the owner's span of it is the tool call's child
	}
	msg.SetContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Its reply, published before this node reads troupe.replies (its subscription
	// there is positioned at the latest offset once the router runs), would never
	// be read: a command sent while the node starts waits for the router.
	//
	// A node that stops meanwhile does not answer the call (it waits for its context,
	// which the node's Close ends, effects answering nobody then): answered, "the
	// node stops" would be recorded as the tool's result, a change never made (or
	// made, its answer lost), and the session would go on from it; unanswered, the
	// session's next owner performs the call again under its key, once.
	select {
	case <-n.routing:
	case <-ctx.Done():
		return nil, fmt.Errorf("node: the command to the owner of namespace %s was not sent: the node does not read replies yet: %w", c.Namespace, ctx.Err())
	}
	if err := n.pub.Publish(messages.TopicTasks, msg); err != nil {
		return nil, fmt.Errorf("node: publish memory command: %w", err)
	}
	select {
	case rep := <-ch:
		switch {
		case rep.Kind == "key_reused":
			return nil, fmt.Errorf("%w: %s", memory.ErrKeyReused, rep.Error)
		case rep.Kind == "invalid":
			return nil, fmt.Errorf("%w: %s", memory.ErrInvalid, rep.Error)
		case rep.Kind == "not_found":
			return nil, fmt.Errorf("%w: %s", memory.ErrNotFound, rep.Error)
		case rep.Kind == "vector_store":
			return nil, fmt.Errorf("%w: %s", memory.ErrVectorStore, rep.Error)
		case rep.Error != "":
			return nil, errors.New(rep.Error)
		}
		return rep.Result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("node: the owner of namespace %s did not answer: %w (a write sent again with the same key is made once)", c.Namespace, ctx.Err())
	}
}

// handleMemoryCommand runs a command read from troupe.tasks, on the namespace's
// owner, and publishes its reply. A failure of the request is answered; a failure
// of the node (the log) is retried.
func (n *Node) handleMemoryCommand(msg *message.Message) error {
	c, err := messages.DecodeMemoryCommand(msg.Payload)
	if err != nil {
		if c.ID != "" && c.ReplyTopic != "" && c.ReplyNode != "" {
			// Its asker waits for an answer (a node of another build, say, whose
			// command this one cannot read): it gets why, not a timeout.
			rep := messages.MemoryReply{ID: c.ID, Kind: "invalid", Error: fmt.Sprintf("the node that owns %s refused the command: %v", c.SessionID, err)}
			if perr := n.publishMemoryReply(c, rep); perr != nil {
				n.cfg.Logger.Warn("answering a refused memory command", "command", c.ID, "err", perr)
			}
		}
		return fmt.Errorf("%w: memory command %s: %w", errPermanent, idHead(msg.UUID), err)
	}
	if forwarded, err := n.forward(msg, nil, c.SessionID, nil); forwarded || err != nil {
		return err
	}
	// A memory tool call's arguments are read once, for consolidates and to run it.
	var call memoryToolArgs
	var callErr error
	if c.Action == memoryToolCall {
		call, callErr = toolCallArgs(c)
	}
	if consolidates(c, call) && n.memories != nil && n.ownsKey(memory.Stream(c.Namespace)) {
		// It may take minutes: run beside the handler (consolidateaside.go).
		return n.consolidateAside(msg.Context(), c, call)
	}
	rep := messages.MemoryReply{ID: c.ID}
	ctx := msg.Context()
	if n.tracing.on() {
		var end func(string)
		ctx, end = n.tracing.startMemory(telemetry.Extract(ctx, msg.Metadata), c)
		defer func() { end(rep.Error) }()
	}
	if n.memories == nil && !isKBAction(c.Action) && c.Action != notesToolCall {
		rep.Error = "the node that owns the namespace has no memory configured"
	} else {
		var res json.RawMessage
		var err error
		switch {
		case c.Action != memoryToolCall:
			res, err = n.memoryLocal(ctx, c, memoryMessageMax-1<<10)
		case callErr != nil:
			err = callErr
		default:
			res, err = n.runMemoryTool(ctx, c.Key, call)
		}
		switch {
		case errors.Is(err, memory.ErrKeyReused):
			rep.Error, rep.Kind = err.Error(), "key_reused"
		case errors.Is(err, memory.ErrInvalid):
			rep.Error, rep.Kind = err.Error(), "invalid"
		case errors.Is(err, memory.ErrNotFound):
			rep.Error, rep.Kind = err.Error(), "not_found"
		case errors.Is(err, memory.ErrVectorStore):
			// Answered, not retried: the search needs what the vector store cannot
			// give now (or ever, for a refusal), and a retry would hold the
			// namespace's later commands, and the partition's sessions, behind it.
			rep.Error, rep.Kind = err.Error(), "vector_store"
		case errors.Is(err, eventlog.ErrFenced):
			// Its partition's owner is another node now (this one hung past the
			// group's session timeout, or has not taken its lease yet): the command
			// is neither answered nor acknowledged, so that the owner runs it.
			n.cfg.Logger.Warn("memory command left to the owner of its stream's partition: this node's write was fenced",
				"command", c.ID, "action", c.Action, "stream", c.SessionID, "err", err)
			return fmt.Errorf("%w: memory command %s on %s: %w", errNotOwner, c.Action, c.Namespace, err)
		case err != nil:
			return fmt.Errorf("memory command %s on %s: %w", c.Action, c.Namespace, err) // retried
		default:
			rep.Result = res
		}
	}
	return n.publishMemoryReply(c, rep)
}

// publishMemoryReply publishes the reply to command c; one past a bus message's
// size is replaced by an error saying so.
func (n *Node) publishMemoryReply(c messages.MemoryCommand, rep messages.MemoryReply) error {
	b, err := messages.EncodeCommand(&rep)
	if err != nil {
		return fmt.Errorf("%w: %w", errPermanent, err)
	}
	if len(b) > memoryMessageMax {
		// The bus would refuse it at every retry, and hold the namespace's later
		// commands behind it.
		rep = messages.MemoryReply{ID: c.ID, Error: fmt.Sprintf("the answer of memory %s on %s is %d bytes, more than a bus message holds (%d)", c.Action, c.Namespace, len(b), memoryMessageMax)}
		if b, err = messages.EncodeCommand(&rep); err != nil {
			return fmt.Errorf("%w: %w", errPermanent, err)
		}
	}
	out := message.NewMessage(n.cfg.IDs.NewID(), b)
	out.Metadata.Set(messages.MetaReplyNode, c.ReplyNode)
	out.Metadata.Set(messages.MetaCorrelationID, c.ID)
	out.Metadata.Set(messages.MetaType, messages.TypeMemoryReply)
	out.Metadata.Set(messages.MetaSessionID, c.SessionID)
	if err := n.pub.Publish(c.ReplyTopic, out); err != nil {
		return fmt.Errorf("memory reply %s: %w", c.ID, err) // retried: the command is idempotent by key
	}
	return nil
}

// deliverMemoryReply hands a reply read from troupe.replies to its waiting caller;
// one nobody waits for (timed out, or answered already) is dropped.
func (n *Node) deliverMemoryReply(msg *message.Message) {
	rep, err := messages.DecodeMemoryReply(msg.Payload)
	if err != nil {
		n.cfg.Logger.Warn("dropping a malformed memory reply", "message", idHead(msg.UUID), "err", err)
		return
	}
	n.memRouter.mu.Lock()
	ch := n.memRouter.pending[rep.ID]
	n.memRouter.mu.Unlock()
	if ch != nil {
		select {
		case ch <- rep:
		default:
		}
	}
}
