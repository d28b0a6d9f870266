package messages

import (
	"encoding/json"
	"fmt"
)

// The events of human-in-the-loop approvals. A tool an agent declares
// "approval: required" is not performed when the model calls it: the session records
// the ToolCallRequested as usual, then an ApprovalRequested for it, and waits (durably:
// a refold after a restart or a hand-over waits still) until an ApprovalResolved is
// folded. Approved, the call is performed as any other; rejected or expired, the
// session records the call's ToolCallCompleted with an error the model reads as the
// tool's result.

// Who resolved an approval (ApprovalResolved.By).
const (
	ApprovedByHTTP     = "http"
	ApprovedByKafka    = "kafka"
	ApprovedByTerminal = "terminal"
	// ApprovedByAPI: Go code called Node.Approve (node run rejecting a call it has
	// no terminal to ask about among them).
	ApprovedByAPI = "api"
	// ApprovedByTimeout: nobody answered before ApprovalRequested.ExpiresUS; the
	// session decided the rejection itself.
	ApprovedByTimeout = "timeout"
)

// ApprovalRequested records that a tool call waits for a human's approval before it
// is performed. Key is the idempotency key of the call (its ToolCallRequested.Key).
type ApprovalRequested struct {
	Key       string `json:"key"`
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	// ExpiresUS is when the session rejects the call unanswered, in Unix
	// microseconds; 0 means it waits for ever.
	ExpiresUS int64 `json:"expires_us,omitempty"`
}

// ApprovalResolved records the answer to an ApprovalRequested with the same Key:
// approved, the call is performed; rejected, the model reads Reason as the tool's
// error. By says where the answer came from (ApprovedByHTTP, …, ApprovedByTimeout).
type ApprovalResolved struct {
	Key     string `json:"key"`
	Approve bool   `json:"approve"`
	Reason  string `json:"reason,omitempty"`
	By      string `json:"by"`
}

// MessageType implements Payload.
func (*ApprovalRequested) MessageType() Type { return TypeApprovalRequested }

// MessageType implements Payload.
func (*ApprovalResolved) MessageType() Type { return TypeApprovalResolved }

// TypeApprovalAnswer marks (in MetaType) an ApprovalAnswer on TopicTasks.
const TypeApprovalAnswer = "task.approval"

// ApprovalAnswer answers a pending approval of a session. It travels on TopicTasks
// (MetaType TypeApprovalAnswer), keyed by the session, so it reaches the session's
// owner; any Kafka client can publish one. Call names the call: its call_id (the
// model's ID of the tool call, as GET /v1/approvals lists it) or its key. Approve
// must be given: an answer without it is refused rather than read as a rejection.
type ApprovalAnswer struct {
	V         int    `json:"v"`
	SessionID string `json:"session_id"`
	Call      string `json:"call"`
	Approve   bool   `json:"approve"`
	Reason    string `json:"reason,omitempty"`
	// By says where the answer came from; the node that reads it from the tasks
	// topic sets "kafka" when it is empty.
	By string `json:"by,omitempty"`
}

func (r *ApprovalAnswer) stamp() { r.V = CommandVersion }

// DecodeApprovalAnswer decodes and validates an ApprovalAnswer: session_id, call and
// approve are required.
func DecodeApprovalAnswer(b []byte) (ApprovalAnswer, error) {
	var probe struct {
		Approve *bool `json:"approve"`
	}
	var a ApprovalAnswer
	if err := decodeCommand(b, &a, &a.V); err != nil {
		return a, err
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return a, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	switch {
	case a.SessionID == "" || a.Call == "":
		return a, fmt.Errorf("%w: approval answer without session_id or call", ErrCorrupt)
	case probe.Approve == nil:
		return a, fmt.Errorf("%w: approval answer for session %s call %s without \"approve\" (true or false)", ErrCorrupt, a.SessionID, a.Call)
	}
	return a, nil
}

// TypeApprovalRefused marks (in MetaType) an ApprovalRefused on TopicResults.
const TypeApprovalRefused = "approval.refused"

// StatusRefused is an ApprovalRefused's status: the answer changed nothing.
const StatusRefused = "refused"

// ApprovalRefused tells a client of the tasks topic that the session's owner
// refused its ApprovalAnswer (the call waits for no approval, was answered
// otherwise, or was named by a call ID another call of the session had), as an
// answer over HTTP is told with a 409. It travels on TopicResults (MetaType
// TypeApprovalRefused), keyed by the session; it is no task's result (it has no
// task_id), and nothing of it is recorded in the session.
type ApprovalRefused struct {
	SessionID string `json:"session_id"`
	// Call is the call as the answer named it (its call_id or its key).
	Call    string `json:"call"`
	Approve bool   `json:"approve"`
	// Status is StatusRefused.
	Status string `json:"status"`
	// Error says why, as the 409 over HTTP says it.
	Error string `json:"error"`
	// Key and Waiting are set when Call is a call ID that an earlier call of
	// the session (Key) and a call waiting (Waiting) have: the answer answered
	// neither, and Waiting is to be answered by its key. Duplicate reports that
	// the earlier call took this very answer (it stands for that call, as an
	// answer sent again), as the 409 over HTTP says them.
	Key       string `json:"key,omitempty"`
	Waiting   string `json:"waiting,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// TypeApprovalTaken marks (in MetaType) an ApprovalTaken on TopicResults.
const TypeApprovalTaken = "approval.taken"

// StatusTaken is an ApprovalTaken's status: the answer was recorded already.
const StatusTaken = "taken"

// ApprovalTaken tells a client of the tasks topic that the session's owner read
// its ApprovalAnswer again once the session had taken it (a redelivery, or a
// client's retry of an answer that landed), as HTTP answers such a retry 202
// with "duplicate": true: it changed nothing, and is no error. (By a call ID
// that a call waiting has too, it is refused instead: ApprovalRefused.) It travels on
// TopicResults (MetaType TypeApprovalTaken), keyed by the session, as an
// ApprovalRefused does; it is no task's result, and nothing of it is recorded.
type ApprovalTaken struct {
	SessionID string `json:"session_id"`
	// Call is the call as the answer named it (its call_id or its key).
	Call string `json:"call"`
	// Key is the key of the call the answer was taken for.
	Key     string `json:"key,omitempty"`
	Approve bool   `json:"approve"`
	// Status is StatusTaken.
	Status string `json:"status"`
	// Note says what the answer was taken for.
	Note string `json:"note,omitempty"`
}
