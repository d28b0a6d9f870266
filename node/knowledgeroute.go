package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

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
// A document whose command would not fit in a bus message (kbRoutedMax) goes in
// parts (kb_part commands of at most kbPartMax bytes of the kb_add arguments'
// JSON), one after the other, each answered before the next is sent: the owner
// keeps them (kbUploads) and runs the add when it has them all, answering the last
// part with the add's result. An owner that lacks a part (the base's partition
// moved during the upload, or the owner restarted) answers upload_incomplete, and
// the sender starts the upload again, a bounded number of times. Uploads are told
// apart by the add's key and the hash of the document, so two uploads under one
// key never mix their parts (the second add then fails as the key's reuse).

// Searches, asks and listings are not routed: every node folds what the stream
// gained before it answers (knowledge.Base.Search refreshes), from the shared log.

// The actions of a MemoryCommand on a knowledge base.
const (
	kbAddAction    = "kb_add"    // args: kbAddArgs → kbAnswer
	kbRemoveAction = "kb_remove" // args: kbRemoveArgs → kbAnswer
	kbPartAction   = "kb_part"   // args: kbPartArgs → kbAnswer (the add's, for the last part)
)

// kbRoutedMax bounds the JSON of a routed kb_add's arguments.
const kbRoutedMax = memoryMessageMax - 16<<10

// kbPartMax bounds the data of a kb_part: base64 in the command's JSON, it stays
// under kbRoutedMax.
const kbPartMax = kbRoutedMax/4*3 - 4<<10

// Bounds of the owner's unfinished uploads (kbUploads): parts of an upload (a 32
// MiB file's arguments are about 43 MiB of JSON), bytes held by all of them, and
// how long an upload is kept without a new part.
const (
	kbMaxParts       = (kbMaxBody/3*4+1<<20)/kbPartMax + 2
	kbUploadsMaxHeld = 256 << 20
	kbUploadIdle     = 2 * memoryTimeout
)

// kbAddTimeout is how long the sender of a routed add waits for the owner's
// answer: the owner converts, chunks and embeds the document first.
const kbAddTimeout = 10 * time.Minute

// kbUploadAttempts bounds how many times an upload is started again after its
// owner lost parts of it.
const kbUploadAttempts = 3

// errUploadIncomplete is the answer of an owner missing parts of an upload.
var errUploadIncomplete = errors.New("the owner of the knowledge base lacks parts of the upload")

// isKBAction reports whether a MemoryCommand's action is a knowledge base's.
func isKBAction(action string) bool {
	return action == kbAddAction || action == kbRemoveAction || action == kbPartAction
}

// kbPartArgs are the arguments of kb_part: part Index of Total of the JSON of a
// kb_add's arguments (kbAddArgs), for the upload named Upload.
type kbPartArgs struct {
	Upload string `json:"upload"`
	Index  int    `json:"index"`
	Total  int    `json:"total"`
	Data   []byte `json:"data"`
}

// kbUploads are the parts of the uploads an owner received and has not yet
// ingested, by base and upload.
type kbUploads struct {
	mu   sync.Mutex
	m    map[string]*kbUpload
	held int // bytes of every upload's parts
}

// kbUpload is one upload's parts, and when a part last came.
type kbUpload struct {
	parts   [][]byte
	have    int
	size    int
	touched time.Time
}

// part records part a of base's upload and returns the whole arguments once every
// part is in (the upload stays until done is called, so that a failed add, tried
// again when its last part comes again, still has them). It fails with
// errUploadIncomplete when a part other than the first comes for an upload it does
// not have, and with knowledge.ErrTooLarge over the bounds.
func (u *kbUploads) part(base string, a kbPartArgs, now time.Time) (whole []byte, done func(), err error) {
	if a.Total < 1 || a.Total > kbMaxParts || a.Index < 0 || a.Index >= a.Total || a.Upload == "" || len(a.Data) > kbPartMax {
		return nil, nil, fmt.Errorf("%w: part %d of %d of upload %q (%d bytes)", knowledge.ErrInvalid, a.Index, a.Total, a.Upload, len(a.Data))
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.forget(now)
	k := base + "\x00" + a.Upload
	up := u.m[k]
	if up == nil {
		if a.Index != 0 {
			return nil, nil, fmt.Errorf("%w: part %d of %d of upload %s came without the parts before it", errUploadIncomplete, a.Index+1, a.Total, a.Upload)
		}
		if u.m == nil {
			u.m = map[string]*kbUpload{}
		}
		up = &kbUpload{parts: make([][]byte, a.Total)}
		u.m[k] = up
	}
	if len(up.parts) != a.Total {
		return nil, nil, fmt.Errorf("%w: upload %s has %d parts, a part says %d", knowledge.ErrInvalid, a.Upload, len(up.parts), a.Total)
	}
	up.touched = now
	if up.parts[a.Index] == nil { // a part delivered again is the same part
		if u.held+len(a.Data) > kbUploadsMaxHeld {
			return nil, nil, fmt.Errorf("%w: the owner of knowledge base %s holds %d MiB of unfinished uploads", knowledge.ErrTooLarge, base, u.held>>20)
		}
		up.parts[a.Index] = append([]byte{}, a.Data...)
		up.have++
		up.size += len(a.Data)
		u.held += len(a.Data)
	}
	if up.have < a.Total {
		return nil, nil, nil
	}
	whole = make([]byte, 0, up.size)
	for _, p := range up.parts {
		whole = append(whole, p...)
	}
	return whole, func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.m[k] == up {
			u.held -= up.size
			delete(u.m, k)
		}
	}, nil
}

// expire forgets the uploads that got no part for kbUploadIdle, as a part does
// before it is kept: the node calls it while idle (Node.expireIdle), so that the
// parts of an upload its sender gave up on (a client gone mid-upload, a failed
// add not sent again) are not held until the next upload comes.
func (u *kbUploads) expire(now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.forget(now)
}

// forget drops the uploads idle for kbUploadIdle. The caller holds u.mu.
func (u *kbUploads) forget(now time.Time) {
	for k, up := range u.m {
		if now.Sub(up.touched) > kbUploadIdle {
			u.held -= up.size
			delete(u.m, k)
		}
	}
}

// kbAddArgs are the arguments of kb_add: a document (a file to convert, or
// Markdown when Text) stored as Source. File is the uploaded file's own name when a
// source field renamed it: its extension says how the file is read
// (knowledge.Base.AddFile). An owner built before File was sent ignores it.
type kbAddArgs struct {
	Source string `json:"source"`
	Body   []byte `json:"body"`
	Text   bool   `json:"text,omitempty"`
	File   string `json:"file,omitempty"`
}

// add ingests a into b under key.
func (a kbAddArgs) add(ctx context.Context, b *knowledge.Base, key string) (knowledge.AddResult, error) {
	if a.Text {
		return b.AddText(ctx, a.Source, string(a.Body), key)
	}
	return b.AddFile(ctx, a.Source, a.File, a.Body, key)
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
// they are tested (ErrKeyReused wraps ErrInvalid, ErrDimension ErrEmbedder).
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
	{"dimension", knowledge.ErrDimension},
	{"embedder", knowledge.ErrEmbedder},
	{"conflict", knowledge.ErrConflict},
	{"no_base", errNoBase},
	{"upload_incomplete", errUploadIncomplete},
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
func (n *Node) kbAdd(ctx context.Context, name string, doc kbAddArgs, key string) (knowledge.AddResult, error) {
	if n.knowledge == nil {
		return knowledge.AddResult{}, errors.New("node: no knowledge bases configured")
	}
	// No secrets in events: a text given as such (a JSON document, the rag tool's
	// add, whose content a model wrote) is redacted as session events are, before
	// it is hashed, chunked and stored; a file's converted text is redacted by the
	// knowledge bases themselves (knowledge.Config.Redact).
	doc.Source, doc.File = n.redactor.String(doc.Source), n.redactor.String(doc.File)
	if doc.Text {
		doc.Body = n.redactor.Bytes(doc.Body)
	}
	if n.memoryRouted() {
		if key == "" {
			// The command may be delivered twice: its retries must write once.
			key = knowledge.AutoKeyPrefix + randomKey()
		}
		args, err := json.Marshal(doc)
		if err != nil {
			return knowledge.AddResult{}, err
		}
		var ans kbAnswer
		if len(args) <= kbRoutedMax {
			ans, err = n.kbRemote(ctx, name, kbAddAction, key, args, kbAddTimeout)
		} else {
			ans, err = n.kbUpload(ctx, name, key, args)
		}
		if err != nil {
			return knowledge.AddResult{}, err
		}
		if ans.Result == nil {
			return knowledge.AddResult{}, fmt.Errorf("node: knowledge base %s: the owner answered no result", name)
		}
		return *ans.Result, nil
	}
	b, err := n.knowledge.Base(ctx, name)
	if err != nil {
		return knowledge.AddResult{}, err
	}
	return doc.add(ctx, b, key)
}

// kbRemove removes a document from knowledge base name under key: here, or on the
// base's owner on a sharded cluster.
func (n *Node) kbRemove(ctx context.Context, name, source, key string) error {
	if n.knowledge == nil {
		return errors.New("node: no knowledge bases configured")
	}
	if n.memoryRouted() {
		if key == "" {
			key = knowledge.AutoKeyPrefix + randomKey()
		}
		args, err := json.Marshal(kbRemoveArgs{Source: source})
		if err != nil {
			return err
		}
		_, err = n.kbRemote(ctx, name, kbRemoveAction, key, args, memoryTimeout)
		return err
	}
	b, err := n.knowledge.Base(ctx, name)
	if err != nil {
		return err
	}
	return b.Remove(ctx, source, key)
}

// kbUpload sends the arguments of a kb_add too large for one bus message to the
// owner of knowledge base name in parts, and returns the add's answer.
func (n *Node) kbUpload(ctx context.Context, name, key string, args []byte) (kbAnswer, error) {
	sum := sha256.Sum256(args)
	upload := key + "#" + hex.EncodeToString(sum[:12])
	total := (len(args) + kbPartMax - 1) / kbPartMax
	var err error
	for attempt := 1; attempt <= kbUploadAttempts; attempt++ {
		var ans kbAnswer
		for i := 0; i < total; i++ {
			part, perr := json.Marshal(kbPartArgs{Upload: upload, Index: i, Total: total, Data: args[i*kbPartMax : min(len(args), (i+1)*kbPartMax)]})
			if perr != nil {
				return kbAnswer{}, perr
			}
			wait := memoryTimeout
			if i == total-1 {
				wait = kbAddTimeout
			}
			if ans, err = n.kbRemote(ctx, name, kbPartAction, key, part, wait); err != nil {
				break
			}
		}
		if !errors.Is(err, errUploadIncomplete) {
			return ans, err
		}
		n.cfg.Logger.Warn("the owner of a knowledge base lost parts of an upload; sending it again", "kb", name, "attempt", attempt, "err", err)
	}
	return kbAnswer{}, fmt.Errorf("node: knowledge base %s: the upload failed %d times: %w", name, kbUploadAttempts, err)
}

// kbRemote sends a command to the owner of knowledge base name, waits at most
// timeout, and returns its answer, its request error rebuilt (remoteKBError).
func (n *Node) kbRemote(ctx context.Context, name, action, key string, args json.RawMessage, timeout time.Duration) (kbAnswer, error) {
	c := messages.MemoryCommand{ID: n.cfg.IDs.NewID(), SessionID: knowledge.Stream(name), Namespace: name, Action: action,
		Key: key, Args: args, ReplyTopic: messages.TopicReplies, ReplyNode: n.cfg.NodeID}
	res, err := n.memoryRemoteWithin(ctx, c, timeout)
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
	case kbPartAction:
		var a kbPartArgs
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return json.Marshal(kbAnswer{Error: fmt.Sprintf("%v: %v", knowledge.ErrInvalid, err), Kind: "invalid"})
		}
		whole, done, perr := n.kbUploads.part(c.Namespace, a, time.Now())
		if perr != nil || whole == nil {
			err = perr
			break // a part acknowledged, or refused
		}
		add := c
		add.Action, add.Args = kbAddAction, whole
		res, err := n.kbLocal(ctx, add)
		if err == nil {
			done()
		}
		return res, err
	case kbAddAction:
		var a kbAddArgs
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return json.Marshal(kbAnswer{Error: fmt.Sprintf("%v: %v", knowledge.ErrInvalid, err), Kind: "invalid"})
		}
		var b *knowledge.Base
		if b, err = n.knowledge.Base(ctx, c.Namespace); err == nil {
			var res knowledge.AddResult
			res, err = a.add(ctx, b, c.Key)
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
