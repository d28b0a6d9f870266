package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/pipelines/rag"
)

// A knowledge base is owned like a memory namespace. On an embedded node (or one
// that does not shard its sessions) every knowledge base is this node's. On a
// sharded cluster, a base's writes go to the owner of its stream's partition of
// troupe.tasks ("kb/<name>", partitioned as a session ID is), as a
// messages.MemoryCommand (actions kb_add and kb_remove, Namespace the base's name)
// in order with the base's other commands, and the answer comes back on
// troupe.replies: one node at a time appends to the stream, which the ClickHouse
// log needs (its seq check is not atomic across processes), and the owner's
// vector projection takes the write at once.
//
// A document whose command would not fit in a bus message (kbRoutedMax: about
// 560 KiB of document, base64 in JSON) is ingested by the node that received it,
// as on an embedded node: the knowledge base's optimistic concurrency (fold,
// append at the next seq, refold on eventlog.ErrSeqConflict) keeps the stream one
// history on a log that detects conflicts across processes (the shared SQLite log
// of nodes on one host). On ClickHouse, such a large write racing another write of
// the same base on another node can take the same seq (the log then reports the
// position corrupt until its merge keeps one row): the gap is large documents on
// ClickHouse clusters written through several nodes at once.
//
// Searches, asks and listings are not routed: every node folds what the stream
// gained before it answers (knowledge.Base.Search refreshes), from the shared log.

// The actions of a MemoryCommand on a knowledge base.
const (
	kbAddAction    = "kb_add"    // args: kbAddArgs → kbAnswer
	kbRemoveAction = "kb_remove" // args: kbRemoveArgs → kbAnswer
)

// kbRoutedMax bounds the JSON of a routed kb_add's arguments.
const kbRoutedMax = memoryMessageMax - 16<<10

// isKBAction reports whether a MemoryCommand's action is a knowledge base's.
func isKBAction(action string) bool { return action == kbAddAction || action == kbRemoveAction }

// kbAddArgs are the arguments of kb_add: a document (a file to convert, or
// Markdown when Text).
type kbAddArgs struct {
	Source string `json:"source"`
	Body   []byte `json:"body"`
	Text   bool   `json:"text,omitempty"`
}

// kbRemoveArgs are the arguments of kb_remove.
type kbRemoveArgs struct {
	Source string `json:"source"`
}

// kbAnswer is the answer of a knowledge base command: its result, or the error of
// the request (Kind says which, for the sender to rebuild it; kbKinds).
type kbAnswer struct {
	Result *knowledge.AddResult `json:"result,omitempty"`
	Error  string               `json:"error,omitempty"`
	Kind   string               `json:"kind,omitempty"`
}

// kbKinds are the request errors a knowledge base command answers, in the order
// they are tested (ErrKeyReused wraps ErrInvalid).
var kbKinds = []struct {
	kind string
	err  error
}{
	{"key_reused", knowledge.ErrKeyReused},
	{"invalid", knowledge.ErrInvalid},
	{"not_found", knowledge.ErrNotFound},
	{"empty", knowledge.ErrEmpty},
	{"too_large", knowledge.ErrTooLarge},
	{"unsupported", rag.ErrUnsupported},
	{"malformed", rag.ErrMalformed},
	{"embedder", knowledge.ErrEmbedder},
	{"conflict", knowledge.ErrConflict},
	{"no_base", errNoBase},
}

// remoteKBError is a request error answered by a knowledge base's owner: its text,
// and the sentinel of its kind.
type remoteKBError struct {
	msg  string
	kind error
}

func (e *remoteKBError) Error() string { return e.msg }
func (e *remoteKBError) Unwrap() error { return e.kind }

// kbAdd ingests a document into knowledge base name under key: on this node, or on
// the owner of the base's stream on a sharded cluster when its command fits in a
// bus message.
func (n *Node) kbAdd(ctx context.Context, name, source string, body []byte, text bool, key string) (knowledge.AddResult, error) {
	if n.knowledge == nil {
		return knowledge.AddResult{}, errors.New("node: no knowledge bases configured")
	}
	// No secrets in events: a text given as such (a JSON document, the rag tool's
	// add, whose content a model wrote) is redacted as session events are, before
	// it is hashed, chunked and stored; a file's converted text is redacted by the
	// knowledge bases themselves (knowledge.Config.Redact).
	source = n.redactor.String(source)
	if text {
		body = n.redactor.Bytes(body)
	}
	if n.memoryRouted() {
		if key == "" {
			// The command may be delivered twice: its retries must write once.
			key = "auto/" + randomKey()
		}
		args, err := json.Marshal(kbAddArgs{Source: source, Body: body, Text: text})
		if err != nil {
			return knowledge.AddResult{}, err
		}
		if len(args) <= kbRoutedMax {
			ans, err := n.kbRemote(ctx, name, kbAddAction, key, args)
			if err != nil {
				return knowledge.AddResult{}, err
			}
			if ans.Result == nil {
				return knowledge.AddResult{}, fmt.Errorf("node: knowledge base %s: the owner answered no result", name)
			}
			return *ans.Result, nil
		}
		// Too large for the bus: ingested here (see above).
	}
	b, err := n.knowledge.Base(ctx, name)
	if err != nil {
		return knowledge.AddResult{}, err
	}
	if text {
		return b.AddText(ctx, source, string(body), key)
	}
	return b.Add(ctx, source, body, key)
}

// kbRemove removes a document from knowledge base name under key: here, or on the
// base's owner on a sharded cluster.
func (n *Node) kbRemove(ctx context.Context, name, source, key string) error {
	if n.knowledge == nil {
		return errors.New("node: no knowledge bases configured")
	}
	if n.memoryRouted() {
		if key == "" {
			key = "auto/" + randomKey()
		}
		args, err := json.Marshal(kbRemoveArgs{Source: source})
		if err != nil {
			return err
		}
		_, err = n.kbRemote(ctx, name, kbRemoveAction, key, args)
		return err
	}
	b, err := n.knowledge.Base(ctx, name)
	if err != nil {
		return err
	}
	return b.Remove(ctx, source, key)
}

// kbRemote sends a command to the owner of knowledge base name and returns its
// answer, its request error rebuilt (remoteKBError).
func (n *Node) kbRemote(ctx context.Context, name, action, key string, args json.RawMessage) (kbAnswer, error) {
	c := messages.MemoryCommand{ID: n.cfg.IDs.NewID(), SessionID: knowledge.Stream(name), Namespace: name, Action: action,
		Key: key, Args: args, ReplyTopic: messages.TopicReplies, ReplyNode: n.cfg.NodeID}
	res, err := n.memoryRemote(ctx, c)
	if err != nil {
		return kbAnswer{}, fmt.Errorf("knowledge base %s: %w", name, err)
	}
	var ans kbAnswer
	if err := json.Unmarshal(res, &ans); err != nil {
		return kbAnswer{}, fmt.Errorf("node: the answer of %s on knowledge base %s: %w", action, name, err)
	}
	if ans.Error != "" {
		for _, k := range kbKinds {
			if k.kind == ans.Kind {
				return kbAnswer{}, &remoteKBError{msg: ans.Error, kind: k.err}
			}
		}
		return kbAnswer{}, errors.New(ans.Error)
	}
	return ans, nil
}

// kbLocal runs a knowledge base command on this node, the base's owner. A request
// error is answered (kbAnswer.Error and Kind); a failure of the node (the log, the
// vector store) is returned, for the command to be delivered again: it is
// idempotent by its key.
func (n *Node) kbLocal(ctx context.Context, c messages.MemoryCommand) (json.RawMessage, error) {
	var ans kbAnswer
	if n.knowledge == nil {
		ans.Error = "the node that owns knowledge base " + c.Namespace + " has no knowledge bases configured"
		return json.Marshal(ans)
	}
	var err error
	switch c.Action {
	case kbAddAction:
		var a kbAddArgs
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return json.Marshal(kbAnswer{Error: fmt.Sprintf("%v: %v", knowledge.ErrInvalid, err), Kind: "invalid"})
		}
		var b *knowledge.Base
		if b, err = n.knowledge.Base(ctx, c.Namespace); err == nil {
			var res knowledge.AddResult
			if a.Text {
				res, err = b.AddText(ctx, a.Source, string(a.Body), c.Key)
			} else {
				res, err = b.Add(ctx, a.Source, a.Body, c.Key)
			}
			ans.Result = &res
		}
	case kbRemoveAction:
		var a kbRemoveArgs
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return json.Marshal(kbAnswer{Error: fmt.Sprintf("%v: %v", knowledge.ErrInvalid, err), Kind: "invalid"})
		}
		var b *knowledge.Base
		if b, err = n.knowledge.Base(ctx, c.Namespace); err == nil {
			err = b.Remove(ctx, a.Source, c.Key)
		}
	}
	if err != nil {
		ans.Result = nil
		for _, k := range kbKinds {
			if errors.Is(err, k.err) {
				ans.Error, ans.Kind = err.Error(), k.kind
				break
			}
		}
		if ans.Error == "" {
			return nil, err // retried
		}
	}
	return json.Marshal(ans)
}
