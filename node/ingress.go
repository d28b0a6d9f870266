package node

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/internal/jsonesc"
	"github.com/troupe-run/troupe/internal/textclip"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
	"github.com/troupe-run/troupe/telemetry"
)

// Ingress in one place. Every source of tasks and cancellations is a thin adapter
// that reads what its transport carries and hands it to the node's Ingress:
//
//   - Go code and the CLI (node run): Node.Submit, Node.Cancel, with a Task;
//   - HTTP: POST /v1/tasks checks the content type and the body's size (http.go) and
//     decodes the body as SourceHTTP; POST /v1/sessions/{id}/cancel calls Node.Cancel;
//   - the tasks topic: handleTask decodes a message as SourceBus (an envelope, or a
//     plain JSON task with the record's key and the message's ID), handleCancel a
//     CancelRequest with DecodeCancel;
//   - MCP's run_task: its arguments (input, session_id, task_id, agent, budgets)
//     make a Task, which Node.RunTask admits as Node.Submit does (a recorded call
//     of a named task learns its session and ID from Admit first);
//   - A2A (node/a2a.go): a message's text, admitted as SourceHTTP with an envelope
//     ID derived from the A2A messageId, so that a message sent again is one task.
//
// Answers to approvals enter the same way (approvals.go): Node.Approve, POST
// /v1/sessions/{id}/approvals/{call}, a task.approval message (handleApproval), each
// checked by AdmitApproval.
//
// The Ingress applies every rule (Task.Validate's bounds, the session ID rule and
// the task ID rule, the refusal of a credential-shaped session or task ID, of a
// task_id with an Idempotency-Key, the redaction of secrets from the input
// and the reason), records the agent's core memory blocks with a task when the agent
// has a memory tool (messages.TaskSubmitted.Memory, replacing what a client sent),
// and builds what travels on: a task.submitted envelope, or a
// messages.CancelRequest. It gives each task its ID: a task_id's, derived from it
// and the session (namedTaskID), else the Go caller's, the bus message's, the
// Idempotency-Key's (idempotentIDs), or a new one. Node.submit, and
// Node.cancelHere (or publishCancel, to a sharded session's owner), are then the
// one way each reaches its session.

// Source is where a task or a cancellation entered the node.
type Source string

// The sources.
const (
	// SourceAPI is Go code calling Node.Submit or Node.Cancel (node run among them).
	SourceAPI Source = "api"
	// SourceHTTP is the node's HTTP API: a strict JSON task body (DecodeTask).
	SourceHTTP Source = "http"
	// SourceBus is a message of messages.TopicTasks: a task.submitted envelope, or the
	// plain JSON task any Kafka client can publish.
	SourceBus Source = "bus"
)

// Arrival is what an ingress adapter read.
type Arrival struct {
	Source  Source
	Payload []byte
	// MessageID is the bus message's ID (SourceBus). The task.submitted envelope
	// keeps it, so that a redelivered message is recognised.
	MessageID string
	// Key is the bus message's session key (its messages.MetaSessionID metadata), the
	// session of a plain task that names none.
	Key string
	// IdempotencyKey is the client's key for this request (HTTP's Idempotency-Key
	// header): the task's message ID, and its session when the body names none, are
	// derived from it and the payload (idempotentIDs), so that the request sent again
	// is the same task of the same session, recorded and run once.
	IdempotencyKey string
	// SentAt is when the bus message was written to its topic (RecordTimer), zero
	// when unknown: a task's deadline_ms counts from it when it is earlier than now.
	SentAt time.Time
}

// MaxIdempotencyKey is the longest Idempotency-Key a task request may carry, in bytes.
const MaxIdempotencyKey = 200

// idempotentIDs derives a task's message ID and the session it runs in when its
// request names none from the client's idempotency key and the request's payload:
// the same key and the same bytes are the same task; another payload under a key
// used before is another task (the key does not hide a request that differs). Both
// are UUIDs (version 8, from SHA-256), the shape of the IDs the node makes.
func idempotentIDs(key string, payload []byte) (msgID, session string) {
	return hashUUID("task", []byte(key), payload), hashUUID("session", []byte(key), payload)
}

// namedTaskID is the message ID of the task named taskID (Task.TaskID) in session:
// the same name in the same session is the same task, recorded once; in another
// session, another (event IDs are unique in the whole log).
func namedTaskID(session, taskID string) string {
	return hashUUID("task_id", []byte(session), []byte(taskID))
}

// NamedTaskID is the ID of the task.submitted event of the task named taskID
// (Task.TaskID) in session, the one the ingress gives it: a session's task of
// that name is the one recorded under this ID (a copy of a named task into
// another session, such as replay fork's, takes it, so that the name sent
// again to that session is the copy, not a second task).
func NamedTaskID(session, taskID string) string { return namedTaskID(session, taskID) }

// hashUUID is a UUID (version 8, from SHA-256) of kind and parts.
func hashUUID(kind string, parts ...[]byte) string {
	d := sha256.New()
	d.Write([]byte(kind))
	for _, p := range parts {
		d.Write([]byte{0})
		d.Write(p)
	}
	var b [sha256.Size]byte
	d.Sum(b[:0])
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	x := hex.EncodeToString(b[:16])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// arrivalOf is the Arrival of a message of the tasks topic.
func arrivalOf(msg *message.Message) Arrival {
	return Arrival{Source: SourceBus, Payload: msg.Payload, MessageID: msg.UUID, Key: msg.Metadata.Get(messages.MetaSessionID)}
}

// Ingress holds the rules every task and cancellation passes, whatever its source,
// and turns what passes into what travels to the session. Every error it returns
// for a task or a cancellation that breaks a rule wraps ErrBadTask.
type Ingress struct {
	redactor *redact.Redactor
	clock    actors.Clock
	ids      actors.IDs
	// memory, when set, returns the agent's core blocks, rendered, for a task
	// (messages.TaskSubmitted.Memory; Node.coreMemory).
	memory func(agent string) string
	// agents are the names of the agents a task may name besides "default"
	// (Config.Agents).
	agents []string
	// unpriced, when set, is called with its agent's name for a task with a cost
	// budget on a node whose gateway has no price table, or no price for a model of
	// some agent (Config.unpricedModels).
	unpriced func(agent string)
	// topicPrefix is the bus's prefix of topic names (Bus.TopicPrefix), which a
	// reply_topic takes too.
	topicPrefix string
}

// checkTask is what every way in checks of a task before anything else: its
// fields (Task.Validate), its reply_topic behind the bus's prefix, its agent.
func (in *Ingress) checkTask(t Task) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if err := in.checkReplyTopicRoom(t.ReplyTopic); err != nil {
		return err
	}
	return in.checkAgent(t.Agent)
}

// checkReplyTopicRoom reports a reply_topic that Kafka's longest topic name
// holds only without the bus's prefix (Task.Validate checks it without).
func (in *Ingress) checkReplyTopicRoom(topic string) error {
	if topic == "" || len(in.topicPrefix)+len(topic) <= maxTopicName {
		return nil
	}
	return fmt.Errorf("%w: reply_topic is %d characters long, and with the topic prefix %q before it %d; Kafka allows at most %d",
		ErrBadTask, len(topic), in.topicPrefix, len(in.topicPrefix)+len(topic), maxTopicName)
}

func newIngress(redactor *redact.Redactor, clock actors.Clock, ids actors.IDs) *Ingress {
	return &Ingress{redactor: redactor, clock: clock, ids: ids}
}

// Ingress returns the node's ingress, for adapters of other sources (MCP, A2A).
func (n *Node) Ingress() *Ingress { return n.ingress }

// Decode reads a task from what a source carries and returns the task.submitted
// envelope for its session. SourceBus takes a task.submitted envelope as it is (after
// the same checks; its deadline is absolute already) or a plain JSON task, whose
// session is its session_id, else the Arrival's key, else one named after the
// message ID; every other source takes a strict JSON task body (DecodeTask).
func (in *Ingress) Decode(a Arrival) (messages.Envelope, error) {
	env, _, _, err := in.decode(a)
	return env, err
}

// decode is Decode; task is the envelope's payload, decoded (what
// actors.SubmitTask.Task takes, so that the session does not decode it again), and
// named is the task's task_id (Task.TaskID), "" when it names none. A named task of
// the bus takes as its CausationID the ID of the record that carried it (its
// _watermill_message_uuid header, or messages.RecordID; an envelope's own
// CausationID stays, such as the one a node forwarding the record wrote): the
// record read again (after a rebalance, a restart, a forward) has that ID, a
// record sending the task again has another (answerResent).
func (in *Ingress) decode(a Arrival) (env messages.Envelope, task *messages.TaskSubmitted, named string, err error) {
	if a.Source == SourceBus && len(a.Payload) == 0 {
		// A record without a value (null: a tombstone) or with an empty one; JSON's
		// "unexpected end of JSON input" would not say which part was wrong.
		return messages.Envelope{}, nil, "", fmt.Errorf("%w: the record has no value (empty, or null: a tombstone): a task is a JSON object such as {\"input\":\"…\"}", ErrBadTask)
	}
	a.Payload = messages.TrimByteOrderMark(a.Payload)
	if !utf8.Valid(a.Payload) {
		// encoding/json would read each bad byte as U+FFFD: the task would run on
		// text other than the one sent (Latin-1 from a producer, say).
		return messages.Envelope{}, nil, "", fmt.Errorf("%w: the message is not valid UTF-8 (byte %d): JSON is sent in UTF-8", ErrBadTask, messages.InvalidUTF8At(a.Payload))
	}
	valid := messages.ValidJSON(a.Payload)
	if valid {
		if at := jsonesc.LoneSurrogateAt(a.Payload); at >= 0 {
			// As a byte that is not UTF-8: encoding/json reads the escape as U+FFFD.
			// Also of an envelope a client wrote: one a node forwards or stores is
			// written by encoding/json, which writes no surrogate escape.
			return messages.Envelope{}, nil, "", fmt.Errorf("%w: %s", ErrBadTask, loneSurrogateError(a.Payload, at))
		}
	}
	if a.Source == SourceBus && valid && isEnvelope(a.Payload) {
		env, task, named, err = in.admitEnvelope(a.Payload)
		if err == nil && named != "" && env.CausationID == "" {
			env.CausationID = a.MessageID
		}
		return env, task, named, err
	}
	t, err := decodeTask(a.Payload, valid)
	if err != nil {
		return messages.Envelope{}, nil, "", err
	}
	env, task, err = in.admitTask(t, a, nil)
	if err == nil && a.Source == SourceBus && t.TaskID != "" {
		env.CausationID = a.MessageID
	}
	return env, task, t.TaskID, err
}

// Admit checks a task given as a value (Go code, the CLI) and returns its
// task.submitted envelope, with a new message ID, and a new session when it names none.
func (in *Ingress) Admit(t Task) (messages.Envelope, error) {
	env, _, err := in.admitValue(t)
	return env, err
}

// admitValue is Admit, and also returns the payload the envelope encodes.
func (in *Ingress) admitValue(t Task) (messages.Envelope, *messages.TaskSubmitted, error) {
	return in.admitTask(t, Arrival{Source: SourceAPI, MessageID: t.ID}, nil)
}

// uniqueIDs reports whether the IDs the ingress makes are never made twice
// (actors.UniqueIDs): a task's envelope with such an ID is in no log yet.
func (in *Ingress) uniqueIDs() bool {
	u, ok := in.ids.(actors.UniqueIDs)
	return ok && u.Unique()
}

// mintsID reports whether Decode gives the task of a the ID of a new one of unique
// IDs (uniqueIDs), rather than the ID the source gave it (a bus message's, which a
// redelivery repeats).
func (in *Ingress) mintsID(a Arrival) bool {
	return a.MessageID == "" && a.IdempotencyKey == "" && a.Source != SourceBus && in.uniqueIDs()
}

// child is what a sub-agent's task carries besides a Task (delegate.go): its
// parent, and its absolute deadline.
type child struct {
	parent     messages.ParentRef
	deadlineUS int64
}

// admitChild checks a sub-agent's task as Admit does and returns its envelope with
// the message ID id (derived from the delegate call, so that a call performed again
// submits the same task, which its session records once), the parent and the
// deadline of c.
func (in *Ingress) admitChild(t Task, id string, c child) (messages.Envelope, error) {
	return in.admit(t, Arrival{Source: SourceAPI, MessageID: id}, &c)
}

// checkAgent refuses a task that names an agent this node does not run.
func (in *Ingress) checkAgent(name string) error {
	if name == "" || name == "default" || slices.Contains(in.agents, name) {
		return nil
	}
	known := strings.Join(append([]string{"default"}, in.agents...), ", ")
	return fmt.Errorf("%w: unknown agent %s: this node runs %s", ErrBadTask, QuoteHead(name), known)
}

// isEnvelope tells a task.submitted envelope (it has a type and a payload) from a
// plain JSON task. payload must be valid JSON (messages.ValidJSON). It says what decoding
// payload into struct{Type *string; Payload *json.RawMessage} would (keys matched
// without regard to case, the last one winning; a type that is not a string or
// null fails the decoding), reading only the object's keys.
func isEnvelope(payload []byte) bool {
	var typ, body, bad bool
	ok := scanMembers(payload, func(raw, value []byte) {
		key := string(raw) // compared only: a short key is not copied to the heap
		if !plainASCII(raw) {
			var unquoted string
			if json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &unquoted) != nil {
				bad = true
				return
			}
			key = unquoted
		}
		switch {
		case strings.EqualFold(key, "type"):
			switch {
			case string(value) == "null":
				typ = false
			case value[0] == '"':
				typ = true
			default:
				bad = true
			}
		case strings.EqualFold(key, "payload"):
			body = string(value) != "null"
		}
	})
	return ok && !bad && typ && body
}

// admit applies every rule to a task and builds its envelope: the one place a task
// from any source is checked. Secrets in the input are redacted here: they never
// reach the bus, let alone the log. c, when set, makes it a sub-agent's task.
func (in *Ingress) admit(t Task, a Arrival, c *child) (messages.Envelope, error) {
	env, _, err := in.admitTask(t, a, c)
	return env, err
}

// admitTask is admit, and also returns the payload the envelope encodes, which
// spares the session decoding it (actors.SubmitTask.Task).
func (in *Ingress) admitTask(t Task, a Arrival, c *child) (messages.Envelope, *messages.TaskSubmitted, error) {
	if err := in.checkTask(t); err != nil {
		return messages.Envelope{}, nil, err
	}
	if t.MaxCostUSD > 0 && c == nil && in.unpriced != nil {
		in.unpriced(t.Agent)
	}
	if t.TaskID != "" {
		if a.IdempotencyKey != "" {
			return messages.Envelope{}, nil, fmt.Errorf("%w: a task with a task_id (%q) and an Idempotency-Key: give one, both name the task (the same task_id sent again to a session is the same task)", ErrBadTask, t.TaskID)
		}
		if err := in.checkTaskIDShape(t.TaskID); err != nil {
			return messages.Envelope{}, nil, err
		}
	}
	var keyedID string
	if a.IdempotencyKey != "" && a.MessageID == "" {
		if len(a.IdempotencyKey) > MaxIdempotencyKey {
			return messages.Envelope{}, nil, fmt.Errorf("%w: the Idempotency-Key is %d bytes long; the limit is %d", ErrBadTask, len(a.IdempotencyKey), MaxIdempotencyKey)
		}
		var session string
		keyedID, session = idempotentIDs(a.IdempotencyKey, a.Payload)
		if t.SessionID == "" {
			t.SessionID = session
		}
	}
	if t.SessionID == "" {
		switch {
		case a.Source == SourceBus && a.Key != "":
			if !ValidSessionID(a.Key) {
				return messages.Envelope{}, nil, fmt.Errorf("%w: session %s (the record's key, or its session_id header): not a valid session ID", ErrBadTask, QuoteHead(a.Key))
			}
			t.SessionID = a.Key
		case t.TaskID != "":
			// Named after the task, so that the task sent again is the same.
			t.SessionID = in.taskSession(t.TaskID)
		case a.Source != SourceBus:
			t.SessionID = in.ids.NewID()
		default:
			t.SessionID = in.messageSession(a.MessageID)
		}
	}
	if err := in.checkSessionShape(t.SessionID); err != nil {
		return messages.Envelope{}, nil, err
	}
	id := cmp.Or(a.MessageID, keyedID)
	if t.TaskID != "" {
		id = namedTaskID(t.SessionID, t.TaskID)
	} else if err := checkTaskMessageID(id); err != nil {
		return messages.Envelope{}, nil, err
	}
	if id == "" {
		id = in.ids.NewID()
	}
	p := &messages.TaskSubmitted{Input: in.redactor.String(t.Input), Agent: t.Agent, MaxSteps: t.MaxSteps, MaxTokens: t.MaxTokens, MaxCostUSD: t.MaxCostUSD, ReplyTopic: t.ReplyTopic,
		TaskID: t.TaskID, Depth: t.Depth}
	if in.memory != nil {
		p.Memory = in.memory(t.Agent)
	}
	now := in.clock.Now()
	if t.DeadlineMS > 0 {
		// From its submission: a task that waited on the bus has had that time.
		from := now
		if !a.SentAt.IsZero() && a.SentAt.Before(now) {
			from = a.SentAt
		}
		p.DeadlineUS = from.Add(time.Duration(t.DeadlineMS) * time.Millisecond).UnixMicro()
	}
	if c != nil {
		parent := c.parent
		p.Parent, p.DeadlineUS, p.Depth = &parent, c.deadlineUS, 0
	}
	env, err := messages.NewEnvelope(p)
	if err != nil {
		return env, nil, err
	}
	env.ID, env.SessionID, env.TS, env.Actor = id, t.SessionID, now.UnixMicro(), "ingress"
	return env, p, nil
}

// checkTaskMessageID refuses a task ID given by its message (a record's
// _watermill_message_uuid header, an envelope's id) that has the form of the IDs of
// the events a session records after its task, "<session>/<seq>" (an effect key,
// messages.EffectKey): recorded as the task's, the ID would be taken when that
// session reached that seq, and its event there would be refused at every attempt,
// leaving the session stuck, its task answered never (its own session's, a later
// seq of the task; another session's, one that session reaches later). Before, such
// a task ran until that event, after its calls were made.
//
// It also refuses an ID that is not UTF-8: the log kept its bytes, while the task's
// result, its events on the bus and GET /v1/sessions/{id}, all JSON, named it with
// U+FFFD in their place, an ID that a client matching results, or cancelling the
// task by it, could not find; and one longer than MaxTaskMessageID.
func checkTaskMessageID(id string) error {
	if len(id) > MaxTaskMessageID {
		return fmt.Errorf("%w: the task's ID (its record's _watermill_message_uuid header) is %d bytes long; an ID names the task's event in the log, its result and its status, and may be at most %d bytes: give the task a task_id, or a shorter ID (%s)",
			ErrBadTask, len(id), MaxTaskMessageID, QuoteHead(id))
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: the task's ID (its record's _watermill_message_uuid header) is not valid UTF-8 (byte %d): give the task a task_id, or an ID in UTF-8",
			ErrBadTask, messages.InvalidUTF8At([]byte(id)))
	}
	key, err := messages.ParseEffectKey(id)
	if err != nil {
		return nil
	}
	return fmt.Errorf("%w: the task's ID %s (its record's _watermill_message_uuid header) has the form <session>/<seq> of the IDs of the events a session records: session %s's event at seq %d would find its ID taken; give the task a task_id, or another ID",
		ErrBadTask, QuoteHead(id), QuoteHead(key.SessionID), key.Seq)
}

// MaxTaskMessageID is the longest ID, in bytes, a task of the tasks topic may
// have (its record's _watermill_message_uuid header, or its envelope's ID):
// the ID is its task.submitted event's in the log, and goes into its result,
// its status and every answer that names it. A UUID is 36 bytes; an ID longer
// than this one was taken whole, up to the broker's record size, and copied
// into each of those.
const MaxTaskMessageID = 512

// admitEnvelope checks a task.submitted envelope a client published whole by the
// rules a plain task passes (its deadline is absolute already, and its session ID is
// the envelope's), and redacts its input. A task with a task_id gets the ID a plain
// task of that name gets in its session (namedTaskID). It returns the envelope, its
// payload decoded, and the task_id.
func (in *Ingress) admitEnvelope(payload []byte) (messages.Envelope, *messages.TaskSubmitted, string, error) {
	env, err := messages.Unmarshal(payload)
	if err != nil {
		return env, nil, "", err
	}
	if env.Type != messages.TypeTaskSubmitted {
		return messages.Envelope{}, nil, "", fmt.Errorf("%w: a %s envelope on %s; a task is a %s envelope or a plain JSON task",
			ErrBadTask, env.Type, messages.TopicTasks, messages.TypeTaskSubmitted)
	}
	p, err := env.Decode()
	if err != nil {
		return messages.Envelope{}, nil, "", err
	}
	ts := p.(*messages.TaskSubmitted)
	t := Task{Input: ts.Input, SessionID: env.SessionID, Agent: ts.Agent, MaxSteps: ts.MaxSteps, MaxTokens: ts.MaxTokens, MaxCostUSD: ts.MaxCostUSD, ReplyTopic: ts.ReplyTopic,
		TaskID: ts.TaskID, Depth: ts.Depth}
	if err := in.checkTask(t); err != nil {
		return messages.Envelope{}, nil, "", err
	}
	if err := in.checkSessionShape(env.SessionID); err != nil {
		return messages.Envelope{}, nil, "", err
	}
	if err := checkParent(env, ts.Parent, ts.Depth); err != nil {
		return messages.Envelope{}, nil, "", err
	}
	if t.TaskID != "" {
		if err := in.checkTaskIDShape(t.TaskID); err != nil {
			return messages.Envelope{}, nil, "", err
		}
		// A named task's ID is its name's in its session, whoever built the envelope.
		env.ID = namedTaskID(env.SessionID, t.TaskID)
	} else if err := checkTaskMessageID(env.ID); err != nil {
		return messages.Envelope{}, nil, "", err
	}
	// The core blocks are the node's to give (a client's are replaced): they go in
	// the system prompt.
	memory := ""
	if in.memory != nil {
		memory = in.memory(t.Agent)
	}
	// The trace context the payload carries (a forwarding node's, a tracing
	// client's) is kept as far as W3C Trace Context reads it: a malformed
	// traceparent is left out, and the task runs under the message's metadata as a
	// plain task does (tracing.stamp); a malformed tracestate is left out, not kept
	// in the log with every copy of the task.
	parent, state := telemetry.ValidTraceContext(ts.TraceParent, ts.TraceState)
	if redacted := in.redactor.String(ts.Input); redacted != ts.Input || memory != ts.Memory || parent != ts.TraceParent || state != ts.TraceState {
		ts.Input, ts.Memory, ts.TraceParent, ts.TraceState = redacted, memory, parent, state
		b, err := json.Marshal(ts)
		if err != nil {
			return messages.Envelope{}, nil, "", fmt.Errorf("messages: encode %s: %w", env.Type, err)
		}
		env.Payload = b
	}
	return env, ts, ts.TaskID, nil
}

// checkParent refuses a task.submitted envelope whose parent (its task is a
// sub-agent's) is not one a delegate call makes (Node.delegate): a depth from 1 to
// MaxDelegationDepth, and the child session and task of the parent's call
// (ChildSessionID, childTaskID). The depth of a sub-agent's delegate call is its
// task's parent's plus one: an envelope published whole with a depth of its own
// below 1 would lift the bound on nesting for the whole tree under it. A task
// with a parent has no depth of its own (depth, messages.TaskSubmitted.Depth):
// its parent's is its depth.
func checkParent(env messages.Envelope, p *messages.ParentRef, depth int) error {
	if p == nil {
		return nil
	}
	key, err := messages.ParseEffectKey(p.Key)
	switch {
	case depth != 0:
		return fmt.Errorf("%w: depth %d on a sub-agent's task: its depth is its parent's (%d)", ErrBadTask, depth, p.Depth)
	case p.Depth < 1 || p.Depth > MaxDelegationDepth:
		return fmt.Errorf("%w: parent: depth %d: a sub-agent's task is 1 to %d deep", ErrBadTask, p.Depth, MaxDelegationDepth)
	case err != nil || key.SessionID != p.SessionID:
		return fmt.Errorf("%w: parent: key %s is no delegate call of session %s", ErrBadTask, QuoteHead(p.Key), QuoteHead(p.SessionID))
	case env.SessionID != ChildSessionID(key) || env.ID != childTaskID(key):
		return fmt.Errorf("%w: parent: a sub-agent's task of call %s is task %s of session %s, not %s of %s", ErrBadTask,
			QuoteHead(p.Key), QuoteHead(childTaskID(key)), ChildSessionID(key), QuoteHead(env.ID), env.SessionID)
	}
	return nil
}

// checkSessionShape refuses a session ID the redactor would change (one shaped like a
// credential, or holding a secret's value): the session's effect keys carry its ID,
// and a redacted key would never match its answer.
func (in *Ingress) checkSessionShape(id string) error {
	if red := in.redactor.String(id); red != id {
		return fmt.Errorf("%w: session_id %q has the shape of a credential or holds a secret, which would be redacted from its events; choose another", ErrBadTask, red)
	}
	return nil
}

// checkTaskIDShape refuses a task_id the redactor would change, as checkSessionShape
// a session ID: the task's result would not say the name it was sent with.
func (in *Ingress) checkTaskIDShape(id string) error {
	if red := in.redactor.String(id); red != id {
		return fmt.Errorf("%w: task_id %q has the shape of a credential or holds a secret, which would be redacted; choose another", ErrBadTask, red)
	}
	return nil
}

// taskSession names the session of a task that names none and has no key after its
// task_id (Task.TaskID), so that the task sent again is the same task of the same
// session: "task." and the task_id, or, where that is over 128 characters or has the
// shape of a secret, "task." and a hash of it.
func (in *Ingress) taskSession(taskID string) string {
	id := "task." + taskID
	if ValidSessionID(id) && in.redactor.String(id) == id {
		return id
	}
	sum := sha256.Sum256([]byte("task_id\x00" + taskID))
	return "task." + hex.EncodeToString(sum[:16])
}

// messageSession names the session of a task that names none, no task_id and has no
// key after its message's ID, so that a redelivery, or the copy a node forwards to the session's
// partition, is the same session: "task." and the ID ("kafka:<topic>/<partition>/<offset>@<timestamp>"
// for a record without a Troupe UUID header, kafka.RecordID) with '/' and ':' (and
// a record ID's '@') as '-'. Where that is not a valid session ID (too long) or has
// the shape of a secret (it would be redacted in the session's events, and its
// effect keys with it), the name is a hash of the ID.
func (in *Ingress) messageSession(msgID string) string {
	r := sessionNameReplacer
	if _, _, ok := messages.SplitRecordID(msgID); ok {
		r = recordSessionNameReplacer
	}
	id := "task." + r.Replace(msgID)
	if sessionIDPattern.MatchString(id) && in.redactor.String(id) == id {
		return id
	}
	sum := sha256.Sum256([]byte(msgID))
	return "task." + hex.EncodeToString(sum[:16])
}

var (
	sessionNameReplacer       = strings.NewReplacer("/", "-", ":", "-")
	recordSessionNameReplacer = strings.NewReplacer("/", "-", ":", "-", "@", "-")
)

// maxCancelReason bounds a cancellation's reason, as maxApprovalReason an approval's:
// it is recorded in the task's end and sent to every watcher.
const maxCancelReason = 4096

// AdmitCancel checks a cancellation (its session ID follows SessionIDRule; its reason
// is at most 4096 bytes of UTF-8, and has secrets redacted: it is published to the
// session's owner, and recorded) and returns it as it travels.
func (in *Ingress) AdmitCancel(sessionID, reason string) (messages.CancelRequest, error) {
	switch {
	case !ValidSessionID(sessionID):
		return messages.CancelRequest{}, fmt.Errorf("%w: cancel: session_id %s: must be %s", ErrBadTask, QuoteHead(sessionID), SessionIDRule)
	case len(reason) > maxCancelReason:
		return messages.CancelRequest{}, fmt.Errorf("%w: cancel: reason: %d bytes, want at most %d", ErrBadTask, len(reason), maxCancelReason)
	case !utf8.ValidString(reason):
		return messages.CancelRequest{}, fmt.Errorf("%w: cancel: reason: not valid UTF-8 (byte %d)", ErrBadTask, messages.InvalidUTF8At([]byte(reason)))
	}
	return messages.CancelRequest{SessionID: sessionID, Reason: in.redactor.String(reason)}, nil
}

// DecodeCancel reads a CancelRequest from the tasks topic. A message that is not
// UTF-8 is refused, as a task is: encoding/json would read its bad bytes as U+FFFD.
func (in *Ingress) DecodeCancel(a Arrival) (messages.CancelRequest, error) {
	if !utf8.Valid(a.Payload) {
		return messages.CancelRequest{}, fmt.Errorf("%w: cancel: the message is not valid UTF-8 (byte %d): JSON is sent in UTF-8", ErrBadTask, messages.InvalidUTF8At(a.Payload))
	}
	c, err := messages.DecodeCancelRequest(a.Payload)
	if err != nil {
		return c, err
	}
	if len(c.TaskID) > maxCancelTaskID {
		return messages.CancelRequest{}, fmt.Errorf("%w: cancel: task_id: %d bytes, want at most %d", ErrBadTask, len(c.TaskID), maxCancelTaskID)
	}
	admitted, err := in.AdmitCancel(c.SessionID, c.Reason)
	admitted.TaskID = c.TaskID
	return admitted, err
}

// maxCancelTaskID bounds a cancellation's task_id: a task's name (at most 128
// bytes) or the ID of its task.submitted event (a message's ID).
const maxCancelTaskID = 512

// idHead is a bus message's ID for an error or a log line: whole when it is
// short and UTF-8, as IDs are; else its head, quoted, and its length (QuoteHead),
// so that a record whose ID header is huge gets a reason, and a log line, of a
// few hundred bytes.
func idHead(id string) string {
	if len(id) <= 128 && utf8.ValidString(id) {
		return id
	}
	return QuoteHead(id)
}

// rejection is the failed result a task of the tasks topic gets when the ingress
// refuses it as bad (ErrBadTask): the client that produced it waits on its
// reply_topic, or on troupe.results, for a result naming its task_id.
type rejection struct {
	result messages.TaskResult
	// reply is the task's reply_topic when it passed its own checks, else "": a
	// topic the rules refuse (the node's own, an illegal name) is never written.
	reply string
	// ids are the IDs of the task.submitted events of the tasks of the session
	// whose results carry the result's task_id: a task recorded under one of them
	// holds that task_id, and the rejection is not published (it would be taken
	// for that task's result).
	ids []string
	// session reports whether result.SessionID is a valid session ID: the one the
	// task would have run in, whose log may hold a task of that task_id.
	session bool
}

// maxRejectionID bounds the session and task IDs a rejection echoes, in bytes:
// a task whose ID is longer (a record's header) is not named back.
const maxRejectionID = 4096

// maxRejectionError bounds a rejection's error, in bytes, as the poison topic's
// reason is (maxPoisonReason).
const maxRejectionError = 4096

// recordHeaders is what a record's headers tell a rejection besides its
// Arrival (recordHeadersOf).
type recordHeaders struct {
	// session reports that they leave the record's session in doubt: its key and
	// its session_id header name different sessions, or that header is given
	// different values (messages.MetaRepeatedHeaders). Arrival.Key, the header's
	// last value, then names no session: only the body's session_id does.
	session bool
	// id reports that they give its ID header different values: Arrival.MessageID,
	// the last, then names no task: only the body's task_id (or envelope) does.
	id bool
	// quoted are the names and values of its headers, sorted: a refusal of it
	// may quote them by their head (the type header's).
	quoted []string
}

// recordHeadersOf reads the headers of a message of the tasks topic.
func recordHeadersOf(msg *message.Message) recordHeaders {
	var h recordHeaders
	if list := msg.Metadata.Get(messages.MetaRepeatedHeaders); list != "" {
		names, key, ok := messages.RepeatedHeaderNames(list)
		h.session, h.id = key || !ok, !ok
		for _, name := range names {
			h.session = h.session || strings.EqualFold(name, messages.MetaSessionID)
			h.id = h.id || name == kafka.HeaderUUID
		}
	}
	for k, v := range msg.Metadata {
		h.quoted = append(h.quoted, k, v)
	}
	slices.Sort(h.quoted)
	return h
}

// rejection reads, from a task of the tasks topic that was refused with refusal
// (wrapping ErrBadTask: by decode, or before it for its headers), what a result
// of it needs: its session and task IDs as the client matches them, and its
// reply_topic. It returns an error saying why there is none when the record did
// not parse far enough to say them (malformed JSON, keys the rules refuse, a
// session_id, task_id or reply_topic of another JSON type, an envelope that does
// not decode), when they are left in doubt (h: a session or an ID that only its
// headers, which disagree, would give), when the task is a sub-agent's (its
// parent waits on the delegate call, not on a topic), or when its task ID cannot
// be named back (not UTF-8, over maxRejectionID, or changed by the redactor: a
// secret in it).
func (in *Ingress) rejection(a Arrival, refusal error, h recordHeaders) (rejection, error) {
	switch {
	case a.Source != SourceBus:
		return rejection{}, errors.New("not a record of the tasks topic")
	case len(a.Payload) == 0:
		return rejection{}, errors.New("the record has no value")
	case !utf8.Valid(a.Payload):
		return rejection{}, errors.New("its value is not UTF-8")
	case !messages.ValidJSON(a.Payload):
		return rejection{}, errors.New("its value is not JSON")
	}
	var (
		t  Task
		id = a.MessageID
	)
	if h.id {
		id = ""
	}
	if isEnvelope(a.Payload) {
		env, err := messages.Unmarshal(a.Payload)
		if err != nil {
			return rejection{}, errors.New("its envelope does not decode")
		}
		if env.Type != messages.TypeTaskSubmitted {
			return rejection{}, fmt.Errorf("its envelope is no %s", messages.TypeTaskSubmitted)
		}
		p, err := env.Decode()
		if err != nil {
			return rejection{}, errors.New("its envelope's payload does not decode")
		}
		ts := p.(*messages.TaskSubmitted)
		if ts.Parent != nil {
			return rejection{}, errors.New("a sub-agent's task: its parent waits on its delegate call")
		}
		t = Task{SessionID: env.SessionID, TaskID: ts.TaskID, ReplyTopic: ts.ReplyTopic, Agent: ts.Agent}
		id = env.ID
		if t.SessionID == "" {
			return rejection{}, errors.New("its envelope names no session_id")
		}
	} else {
		_, taskID, err := taskKeys(a.Payload)
		if err != nil {
			return rejection{}, errors.New("its value is no task's JSON object (a key the rules refuse, or given twice)")
		}
		if taskID != nil && taskID[0] != '"' {
			return rejection{}, errors.New("its task_id is no string")
		}
		if err := json.Unmarshal(a.Payload, &t); err != nil {
			var te *json.UnmarshalTypeError
			if !errors.As(err, &te) {
				return rejection{}, errors.New("its value does not decode as a task")
			}
			if te.Field == "session_id" || te.Field == "task_id" || te.Field == "reply_topic" {
				return rejection{}, fmt.Errorf("its %s is no string", te.Field)
			}
			// Another field of another type: json.Unmarshal filled the rest.
		}
	}
	// A refusal quotes what it names by its head (QuoteHead: 64 bytes): a secret
	// across that cut leaves its head, which the redactor no longer knows for one.
	// Each value it may quote so is put back redacted before the whole is.
	text := refusal.Error()
	for _, v := range append([]string{t.Agent, t.TaskID, t.SessionID, a.Key, a.MessageID, id}, h.quoted...) {
		if red := in.redactor.String(v); red != v {
			text = strings.ReplaceAll(text, QuoteHead(v), QuoteHead(red))
		}
	}
	r := rejection{result: messages.TaskResult{Status: messages.StatusFailed, Reason: messages.ReasonRejected,
		Error: textclip.Head(in.redactor.String(text), maxRejectionError)}}
	name := cmp.Or(t.TaskID, id)
	switch {
	case name == "" && h.id:
		return rejection{}, errors.New("it names no task_id, and its record gives its ID header more than one value")
	case name == "":
		return rejection{}, errors.New("it names no task_id, and its record no ID")
	case len(name) > maxRejectionID:
		return rejection{}, fmt.Errorf("its task's name (task_id, else its ID) is %d bytes long, over %d", len(name), maxRejectionID)
	case !utf8.ValidString(name):
		return rejection{}, errors.New("its task's name (task_id, else its ID) is not UTF-8")
	case in.redactor.String(name) != name:
		return rejection{}, errors.New("its task's name (task_id, else its ID) holds a secret")
	}
	r.result.TaskID = name
	session := t.SessionID
	switch {
	case session != "":
	case h.session:
		return rejection{}, errors.New("it names no session_id, and its record's key and session_id header name different sessions")
	case a.Key != "":
		session = a.Key
	case t.TaskID != "":
		session = in.taskSession(t.TaskID)
	default:
		session = in.messageSession(a.MessageID)
	}
	r.session = ValidSessionID(session) && in.redactor.String(session) == session
	if !r.session {
		// The session the client named is what was refused: echoed as it can be.
		session = textclip.Head(in.redactor.String(session), maxRejectionID)
	}
	r.result.SessionID = session
	// A task of the session answers to name when it was recorded under it (a
	// message's ID) or is named so (task_id).
	r.ids = []string{name, namedTaskID(session, name)}
	if t.ReplyTopic != "" && checkReplyTopic(t.ReplyTopic) == nil && in.checkReplyTopicRoom(t.ReplyTopic) == nil {
		r.reply = t.ReplyTopic
	}
	return r, nil
}

// loneSurrogateError says where loneSurrogateAt found a lone surrogate in b.
func loneSurrogateError(b []byte, at int) string {
	return fmt.Sprintf("the JSON has %s at byte %d, a lone UTF-16 surrogate that is no character (it would be read as U+FFFD): escape a character outside the BMP as a pair, or send it as UTF-8", b[at:at+6], at)
}
