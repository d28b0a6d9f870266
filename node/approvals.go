package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/jsonesc"
	"github.com/troupe-run/troupe/internal/textclip"
	"github.com/troupe-run/troupe/messages"
)

// Approvals. A named agent's tool listed in NamedAgent.Approvals is not performed
// when the model calls it: the session records approval.requested and waits
// (actors/approvals.go) for an answer, which enters the node like a cancellation:
//
//   - Go code and the CLI's terminal prompt: Node.Approve;
//   - HTTP: POST /v1/sessions/{id}/approvals/{call} {"approve": true|false, "reason"};
//   - the tasks topic: a task.approval message (messages.ApprovalAnswer, header
//     type=task.approval), from any Kafka client.
//
// Every answer passes Ingress.AdmitApproval, then goes to the session: on this node
// (approveHere), or on a sharded node through troupe.tasks to the session's owner
// (publishApproval, read back by handleApproval). GET /v1/approvals lists what waits.

// Bounds of an answer.
const (
	maxApprovalReason = 4096
	maxApprovalCall   = 512
)

// answerSources are the values of messages.ApprovalAnswer.By a client may give.
var answerSources = []string{messages.ApprovedByHTTP, messages.ApprovedByKafka, messages.ApprovedByTerminal, messages.ApprovedByAPI}

// AdmitApproval checks an answer to an approval (its session ID follows
// SessionIDRule, call is given, the reason is at most 4096 bytes of UTF-8 and has
// secrets redacted, by is http, kafka, terminal or api) and returns it as it travels.
func (in *Ingress) AdmitApproval(sessionID, call string, approve bool, reason, by string) (messages.ApprovalAnswer, error) {
	bad := func(format string, args ...any) (messages.ApprovalAnswer, error) {
		return messages.ApprovalAnswer{}, fmt.Errorf("%w: approval: "+format, append([]any{ErrBadTask}, args...)...)
	}
	switch {
	case !ValidSessionID(sessionID):
		return bad("session_id %s: must be %s", QuoteHead(sessionID), SessionIDRule)
	case call == "" || len(call) > maxApprovalCall || !utf8.ValidString(call):
		return bad("call %s: want the call_id or the key of the call (as GET /v1/approvals lists it), at most %d bytes", QuoteHead(call), maxApprovalCall)
	case checkApprovalReason(reason) != nil:
		return bad("%v", checkApprovalReason(reason))
	case !slices.Contains(answerSources, by):
		return bad("by %s: want one of %s", QuoteHead(by), strings.Join(answerSources, ", "))
	}
	return messages.ApprovalAnswer{SessionID: sessionID, Call: call, Approve: approve, Reason: in.redactor.String(reason), By: by}, nil
}

// checkApprovalReason refuses the reason of an answer that is over
// maxApprovalReason bytes or not UTF-8.
func checkApprovalReason(reason string) error {
	if len(reason) > maxApprovalReason || !utf8.ValidString(reason) {
		return fmt.Errorf("reason: want at most %d bytes of UTF-8", maxApprovalReason)
	}
	return nil
}

// DecodeApproval reads an ApprovalAnswer from the tasks topic; one that does not
// say where it came from came from Kafka. A message that is not UTF-8 is refused, as
// a task is: encoding/json would read its bad bytes as U+FFFD.
func (in *Ingress) DecodeApproval(a Arrival) (messages.ApprovalAnswer, error) {
	if !utf8.Valid(a.Payload) {
		return messages.ApprovalAnswer{}, fmt.Errorf("%w: approval: the message is not valid UTF-8 (byte %d): JSON is sent in UTF-8", ErrBadTask, messages.InvalidUTF8At(a.Payload))
	}
	if at := jsonesc.LoneSurrogateAt(a.Payload); at >= 0 && json.Valid(a.Payload) {
		// As over HTTP: encoding/json would read the escape as U+FFFD.
		return messages.ApprovalAnswer{}, fmt.Errorf("%w: approval: %s", ErrBadTask, loneSurrogateError(a.Payload, at))
	}
	c, err := messages.DecodeApprovalAnswer(a.Payload)
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrBadTask, err)
	}
	// A key twice, or miscased, is refused, as over HTTP: encoding/json takes the
	// last one, without regard to case ({"approve":false,"Approve":true} approves).
	if err := checkKeys(a.Payload, answerFields, true); err != nil {
		return messages.ApprovalAnswer{}, fmt.Errorf("%w: approval: %w", ErrBadTask, err)
	}
	if c.By == "" {
		c.By = messages.ApprovedByKafka
	}
	return in.AdmitApproval(c.SessionID, c.Call, c.Approve, c.Reason, c.By)
}

// ErrUnknownSession answers an approval for a session the log does not have.
var ErrUnknownSession = errors.New("node: no such session")

// Approve answers the approval a session's call waits for (call is its call_id or
// its key): approved, the call is performed; rejected, the model reads reason as the
// tool's error. by says where the answer came from (messages.ApprovedByHTTP, …). It
// returns once the answer is recorded, or, on a sharded node, once it is published
// to the session's owner. The same answer twice is recorded once. Errors: ErrBadTask
// for a malformed answer, ErrUnknownSession, actors.ErrApprovalNotPending when the
// call waits for no approval (or was answered otherwise), an
// *actors.ReusedCallIDError among them when call is a call ID that a call waiting
// and an earlier call of the session have (also when the earlier call took this
// very answer: it may be meant for the call waiting, which it does not answer).
func (n *Node) Approve(ctx context.Context, sessionID, call string, approve bool, reason, by string) error {
	_, err := n.approve(ctx, sessionID, call, approve, reason, by)
	return err
}

// takenAnswer is what a session says of an answer it took already (a
// duplicate): the key of the call it was taken for.
type takenAnswer struct {
	key string
}

// note says what the answer c was taken for, for its client.
func (t takenAnswer) note(c messages.ApprovalAnswer) string {
	verdict := "rejection"
	if c.Approve {
		verdict = "approval"
	}
	return fmt.Sprintf("this %s was taken already, for call %s: it is recorded once, and nothing more was done", verdict, t.key)
}

// takenOf is what st says of the answer c when it took it already: ok is false
// when it did not (the answer is pending, or refused).
func takenOf(st *actors.SessionState, c messages.ApprovalAnswer) (t takenAnswer, ok bool) {
	taken, duplicate, err := st.CheckAnswer(c.Call, c.Approve)
	if err != nil || !duplicate {
		return takenAnswer{}, false
	}
	return takenAnswer{key: taken.Key}, true
}

// approve is Approve; taken is set when the session took the answer already
// (nothing is recorded again).
func (n *Node) approve(ctx context.Context, sessionID, call string, approve bool, reason, by string) (taken *takenAnswer, err error) {
	c, err := n.ingress.AdmitApproval(sessionID, call, approve, reason, by)
	if err != nil {
		return nil, err
	}
	var pending actors.PendingApproval
	var duplicate bool
	_, err = n.folds.with(ctx, n.log, sessionID, func(st *actors.SessionState) (err error) {
		pending, duplicate, err = st.CheckAnswer(c.Call, c.Approve)
		return err
	})
	if err != nil {
		return nil, err
	}
	if duplicate {
		return &takenAnswer{key: pending.Key}, nil // recorded already
	}
	// The answer names the call by its key, unique in the session: models reuse
	// call IDs from task to task, and an answer by call ID read again (the bus
	// delivers at least once) once the session moved on would answer its next
	// task's call, which nobody looked at.
	c.Call = pending.Key
	if n.sharded() {
		return nil, n.publishApproval(ctx, c)
	}
	_, err = n.approveHere(c)
	return nil, err
}

// approveHere hands an answer to the session on this node, for Approve and for an
// answer read from the tasks topic (handleApproval); duplicate reports that the
// session had taken that answer already, and recorded nothing.
func (n *Node) approveHere(c messages.ApprovalAnswer) (duplicate bool, err error) {
	res, err := n.system.Root.RequestFuture(n.host, &actors.ResolveApproval{SessionID: c.SessionID, Call: c.Call, Approve: c.Approve,
		Reason: c.Reason, By: c.By}, n.cfg.SubmitTimeout).Result()
	if err != nil {
		return false, err
	}
	if err, ok := res.(error); ok {
		return false, err
	}
	acc, ok := res.(*actors.TaskAccepted)
	return ok && acc.Duplicate, nil
}

// publishApproval sends an answer to the session's owner over troupe.tasks.
func (n *Node) publishApproval(ctx context.Context, c messages.ApprovalAnswer) error {
	b, err := messages.EncodeCommand(&c)
	if err != nil {
		return err
	}
	msg := message.NewMessage(n.cfg.IDs.NewID(), b)
	msg.Metadata.Set(messages.MetaSessionID, c.SessionID)
	msg.Metadata.Set(messages.MetaType, messages.TypeApprovalAnswer)
	msg.SetContext(ctx)
	if err := n.pub.Publish(messages.TopicTasks, msg); err != nil {
		return fmt.Errorf("node: publish approval: %w", err)
	}
	return nil
}

// handleApproval runs an ApprovalAnswer read from troupe.tasks on the session's
// owner. An answer the session refuses (the call waits for no approval, was
// answered otherwise, or is named by a call ID another call of the session had:
// over HTTP, a 409) is answered on troupe.results (refuseApproval) and dropped
// with a warning. The same answer read again is recorded once, and not refused:
// its client is told it was taken (answerTaken).
func (n *Node) handleApproval(msg *message.Message) error {
	c, err := n.ingress.DecodeApproval(arrivalOf(msg))
	if err != nil {
		// Its client is told why, as a 400 tells one over HTTP, before the
		// record is poisoned (refuseMalformedApproval), or the record is
		// handled again.
		if forwarded, err := n.refuseMalformedApproval(msg, err); forwarded || err != nil {
			return err // retried, or judged on its session's owner
		}
		return fmt.Errorf("%w: approval message %s: %w", errPermanent, idHead(msg.UUID), err)
	}
	if forwarded, err := n.forward(msg, nil, c.SessionID, commandOf(&c)); forwarded || err != nil {
		return err
	}
	// A session the log does not have is said so, as over HTTP (404), and no
	// session actor starts for a made-up ID.
	if known, err := n.streamKnown(msg.Context(), c.SessionID); err != nil {
		return fmt.Errorf("approval for session %s: %w", c.SessionID, err) // retried
	} else if !known {
		n.cfg.Logger.Warn("dropping an answer to an approval of a session the log does not have", "message", idHead(msg.UUID), "session", c.SessionID, "call", c.Call)
		return n.refuseApproval(msg, c, fmt.Errorf("%w %q", ErrUnknownSession, c.SessionID))
	}
	duplicate, err := n.approveHere(c)
	switch {
	case err == nil && duplicate:
		// Read again (a redelivery, a client's retry) once the session took
		// it: its client is told it was taken, not refused. (By a call ID
		// that a later call waiting has too, it is refused: it may be meant
		// for that call, which it does not answer.)
		return n.answerTaken(msg, c)
	case errors.Is(err, actors.ErrApprovalNotPending):
		n.cfg.Logger.Warn("dropping an answer to an approval that is not pending", "message", idHead(msg.UUID), "session", c.SessionID, "call", c.Call, "err", err)
		return n.refuseApproval(msg, c, err)
	case errors.Is(err, actors.ErrNotOwner):
		return fmt.Errorf("approval %s: %w", msg.UUID, err) // its next owner reads it again
	case err != nil:
		return fmt.Errorf("approval for session %s: %w", c.SessionID, err) // retried
	}
	return nil
}

// refuseApproval publishes on troupe.results why the session refused the answer
// c read from the record msg (refusal, wrapping actors.ErrApprovalNotPending), so
// that the Kafka client that sent it learns it, as a 409 tells a client over
// HTTP: a messages.ApprovalRefused keyed by the session, marked
// type=approval.refused. Its message ID is the same whenever the record is read
// again (refusedApprovalID), so a consumer deduping by message ID keeps one.
// Nothing is recorded in the session. An error (the broker down) is returned,
// and the record handled again.
func (n *Node) refuseApproval(msg *message.Message, c messages.ApprovalAnswer, refusal error) error {
	if n.outbox != nil && !n.outbox.HasReaders(messages.TopicResults) {
		return nil
	}
	r := messages.ApprovalRefused{SessionID: c.SessionID, Call: c.Call, Approve: c.Approve, Status: messages.StatusRefused,
		Error: textclip.Head(n.ingress.redactor.String(refusal.Error()), maxRejectionError)}
	if reused, ok := errors.AsType[*actors.ReusedCallIDError](refusal); ok {
		r.Key, r.Waiting, r.Duplicate = reused.Earlier, reused.Waiting, reused.Taken
	}
	return n.publishApprovalReply(msg, refusedApprovalID(c.SessionID, msg.UUID), c.SessionID, messages.TypeApprovalRefused, r, "its refusal")
}

// refuseMalformedApproval publishes on troupe.results why the answer read from
// the record msg is refused before it reaches its session (refusal, wrapping
// ErrBadTask: a member missing, of the wrong type or given twice, a session ID
// the rules refuse, …), as refuseApproval does for an answer the session refused:
// an ApprovalRefused naming the session and the call the answer named, as far as
// its body names them (approvalNamed), so that its Kafka client, which reads
// troupe.results for its session, learns it rather than waiting for ever while
// the record goes to the poison topic. The session is the body's session_id,
// else the record's key (unless its headers leave it in doubt: recordHeadersOf,
// or its body names two sessions); when neither is a session ID this node would
// accept (ValidSessionID, no secret), no reply is published, and the log says
// why.
//
// A record read from a partition other than its session's is forwarded there
// instead (forwarded true: the caller acks it), as a task refused is
// (forwardRefused), and refused by the session's owner, after the records of
// the session before it: refused where it was read, its refusal overtook an
// answer of the same call written before it and forwarded (a kcat producer
// places keys by CRC32), which the session had not taken yet, and the client
// read that call's answer refused. The copy keeps the record's ID, and so the
// refusal its ID (refusedApprovalID).
func (n *Node) refuseMalformedApproval(msg *message.Message, refusal error) (forwarded bool, err error) {
	session, call, approve, doubt := approvalNamed(msg.Payload)
	if session == "" && !doubt && !recordHeadersOf(msg).session {
		session = msg.Metadata.Get(messages.MetaSessionID)
	}
	if !ValidSessionID(session) || n.ingress.redactor.String(session) != session {
		n.cfg.Logger.Warn("approval refused as bad: no reply published, it names no session it could be keyed by", "message", idHead(msg.UUID), "err", refusal)
		return false, nil
	}
	// A copy over effectMessageMax is judged here: forward has no smaller form
	// of it, and the bus would refuse it for ever (forwardRefused).
	if messageSize(msg)+len(messages.MetaSessionID)+len(session) <= effectMessageMax {
		if forwarded, err := n.forward(msg, nil, session, nil); forwarded || err != nil {
			return forwarded, err
		}
	}
	call = textclip.Head(n.ingress.redactor.String(call), maxApprovalCall)
	return false, n.refuseApproval(msg, messages.ApprovalAnswer{SessionID: session, Call: call, Approve: approve}, refusal)
}

// approvalNamed reads what body, a malformed answer to an approval, names by
// the members of an answer's exact names (encoding/json would take "SESSION_ID"
// for session_id, and the last value of a member given twice): its session_id
// and call (strings) and approve (a boolean), each "" or false when it is
// missing, of another type, or given two values. doubt reports a session_id
// given two values: the body names two sessions, and its record's key names
// none (its client may wait in either). A body that is not JSON names nothing.
func approvalNamed(body []byte) (session, call string, approve, doubt bool) {
	if !json.Valid(body) {
		return "", "", false, false
	}
	values := map[string][]byte{}
	twice := map[string]bool{}
	scanMembers(body, func(raw, value []byte) {
		key := string(raw)
		if !plainASCII(raw) && json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &key) != nil {
			return
		}
		switch key {
		case "session_id", "call", "approve":
			if was, ok := values[key]; ok && !bytes.Equal(was, value) {
				twice[key] = true
			}
			values[key] = value
		}
	})
	str := func(key string) string {
		var v string
		if twice[key] || json.Unmarshal(values[key], &v) != nil {
			return ""
		}
		return v
	}
	if !twice["approve"] {
		_ = json.Unmarshal(values["approve"], &approve)
	}
	return str("session_id"), str("call"), approve, twice["session_id"]
}

// publishApprovalReply publishes v, the node's reply to the approval answer read
// from the record msg (an ApprovalRefused, an ApprovalTaken), on troupe.results
// under message ID id, keyed by session and marked typ; what names it in an
// error. A reply that does not marshal is dropped (it cannot happen: both are
// plain structs).
func (n *Node) publishApprovalReply(msg *message.Message, id, session, typ string, v any, what string) error {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	out := message.NewMessage(id, b)
	out.Metadata.Set(messages.MetaSessionID, session)
	out.Metadata.Set(messages.MetaType, typ)
	if err := n.pub.Publish(messages.TopicResults, out); err != nil {
		return fmt.Errorf("approval message %s: publish %s on %s: %w", idHead(msg.UUID), what, messages.TopicResults, err)
	}
	return nil
}

// answerTaken publishes on troupe.results that the session had taken the answer
// c read from the record msg already (messages.ApprovalTaken, keyed by the
// session, marked type=approval.taken): the call it was taken for. Its message ID is the same
// whenever the record is read again (takenApprovalID). An error (the broker
// down, the log unreadable) is returned, and the record handled again: the
// answer is a duplicate again.
func (n *Node) answerTaken(msg *message.Message, c messages.ApprovalAnswer) error {
	if n.outbox != nil && !n.outbox.HasReaders(messages.TopicResults) {
		return nil
	}
	var (
		t  takenAnswer
		ok bool
	)
	if _, err := n.folds.with(msg.Context(), n.log, c.SessionID, func(st *actors.SessionState) error {
		t, ok = takenOf(st, c)
		return nil
	}); err != nil {
		return fmt.Errorf("approval message %s: read session %s: %w", idHead(msg.UUID), c.SessionID, err)
	}
	if !ok {
		// It was taken when the session judged it; a later event (none
		// undoes an answer) cannot change that: the call is named as the
		// answer named it.
		t = takenAnswer{key: c.Call}
	}
	return n.publishApprovalReply(msg, takenApprovalID(c.SessionID, msg.UUID), c.SessionID, messages.TypeApprovalTaken,
		messages.ApprovalTaken{SessionID: c.SessionID, Call: c.Call, Key: t.key, Approve: c.Approve, Status: messages.StatusTaken, Note: t.note(c)},
		"that it was taken")
}

// takenApprovalID is the message ID of answerTaken's record for the answer of
// session read from the record whose message ID is answer, as refusedApprovalID.
func takenApprovalID(session, answer string) string {
	return hashUUID("approval_taken", []byte(session), []byte(answer)) + "/taken"
}

// refusedApprovalID is the message ID of the refusal of the answer to an approval
// of session read from the record whose message ID is answer: a UUID of both and
// "/refused", 44 bytes whatever the record's ID, as a refused task's is
// (rejectedID).
func refusedApprovalID(session, answer string) string {
	return hashUUID("approval_refused", []byte(session), []byte(answer)) + "/refused"
}

// PendingApproval is a tool call waiting for a human's approval, as GET
// /v1/approvals lists it.
type PendingApproval struct {
	SessionID string `json:"session_id"`
	// Call is the model's ID of the call (the {call} of the answer's URL); Key the
	// call's idempotency key, which names it too.
	Call        string     `json:"call"`
	Key         string     `json:"key"`
	Tool        string     `json:"tool"`
	Arguments   string     `json:"arguments"`
	RequestedAt time.Time  `json:"requested_at"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
}

// PendingApprovals lists the calls waiting for approval in the running sessions of
// the node's event log (in a cluster whose nodes share one log, every node lists
// the cluster's), oldest first.
func (n *Node) PendingApprovals(ctx context.Context) ([]PendingApproval, error) {
	infos, err := n.log.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true})
	if err != nil {
		return nil, err
	}
	out := []PendingApproval{}
	for _, s := range infos {
		if !eventlog.IsSession(s.ID) {
			continue
		}
		_, err := n.folds.withKept(ctx, n.log, s.ID, func(st *actors.SessionState) error {
			out = append(out, pendingApprovals(s.ID, st)...)
			return nil
		})
		if errors.Is(err, ErrUnknownSession) {
			continue
		}
		if err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(out, func(a, b PendingApproval) int { return a.RequestedAt.Compare(b.RequestedAt) })
	return out, nil
}

// pendingApprovals returns the calls of a session's running task that wait for
// approval.
func pendingApprovals(sessionID string, st *actors.SessionState) []PendingApproval {
	var out []PendingApproval
	for _, p := range st.PendingApprovals() {
		a := PendingApproval{SessionID: sessionID, Call: p.CallID, Key: p.Key, Tool: p.Tool, Arguments: p.Arguments,
			RequestedAt: time.UnixMicro(p.RequestedUS).UTC()}
		if p.ExpiresUS > 0 {
			exp := time.UnixMicro(p.ExpiresUS).UTC()
			a.ExpiresAt = &exp
		}
		out = append(out, a)
	}
	return out
}

func (n *Node) listApprovals(w http.ResponseWriter, r *http.Request) {
	list, err := n.PendingApprovals(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// approvalMaxBody bounds the body of POST /v1/sessions/{id}/approvals/{call}.
const approvalMaxBody = 64 << 10

// approvalBody is the body of POST /v1/sessions/{id}/approvals/{call}.
type approvalBody struct {
	Approve *bool  `json:"approve"`
	Reason  string `json:"reason"`
}

// readSmallBody reads the body of a request whose JSON object is small (an
// approval, a cancellation), at most bound bytes; what names the object's shape in
// the 413. It answers the request itself (413, 408, 400) and returns false when
// the body could not be read whole.
func readSmallBody(w http.ResponseWriter, r *http.Request, bound int64, what string) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, bound))
	if err == nil {
		return body, true
	}
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes: %s", bound, what)
	case errors.As(err, &netErr) && netErr.Timeout():
		writeError(w, http.StatusRequestTimeout, "the request body was not sent in time")
	default:
		writeError(w, http.StatusBadRequest, "reading the request body: %v", err)
	}
	return nil, false
}

// decodeSmallBody decodes body into v as strictly as an approval is read: UTF-8,
// no lone surrogate escape, no unknown, duplicate or miscased member (of names).
// (encoding/json takes the last of two members, matched without regard to case,
// so {"approve": false, "Approve": true} would approve the call.) want says the
// shape expected, after each 400. It answers the request itself
// and returns false when the body is refused.
func decodeSmallBody(w http.ResponseWriter, body []byte, v any, names []string, want string) bool {
	body = messages.TrimByteOrderMark(body)
	if !utf8.Valid(body) {
		// encoding/json would read each bad byte as U+FFFD: the text recorded
		// would be another than the one sent (as a task's, or a Kafka answer's).
		writeError(w, http.StatusBadRequest, "the body is not valid UTF-8 (byte %d): JSON is sent in UTF-8", messages.InvalidUTF8At(body))
		return false
	}
	if at := jsonesc.LoneSurrogateAt(body); at >= 0 && json.Valid(body) {
		writeError(w, http.StatusBadRequest, "%s; %s", loneSurrogateError(body, at), want)
		return false
	}
	if err := decodeStrict(body, v); err != nil {
		writeError(w, http.StatusBadRequest, "%v; %s", err, want)
		return false
	}
	if err := checkKeys(body, names, false); err != nil {
		writeError(w, http.StatusBadRequest, "%v; %s", err, want)
		return false
	}
	return true
}

func (n *Node) postApproval(w http.ResponseWriter, r *http.Request) {
	id, call := r.PathValue("id"), r.PathValue("call")
	if !eventlog.IsSession(id) {
		notASession(w, id)
		return
	}
	if err := checkJSONContentType(r.Header.Get("Content-Type")); err != nil {
		writeError(w, http.StatusUnsupportedMediaType, "%v", err)
		return
	}
	// A Content-Length over the bound is refused before the body is read, as a
	// task's is: a client that sends it slowly learns at once, not at the read
	// timeout.
	if r.ContentLength > approvalMaxBody {
		writeError(w, http.StatusRequestEntityTooLarge, "request body of %d bytes is larger than %d: an approval is {\"approve\", \"reason\"}", r.ContentLength, approvalMaxBody)
		return
	}
	body, ok := readSmallBody(w, r, approvalMaxBody, `an approval is {"approve", "reason"}`)
	if !ok {
		return
	}
	var b approvalBody
	if !decodeSmallBody(w, body, &b, []string{"approve", "reason"}, `want {"approve": true|false, "reason": "…"}`) {
		return
	}
	if b.Approve == nil {
		writeError(w, http.StatusBadRequest, "the body has no \"approve\": want {\"approve\": true|false, \"reason\": \"…\"}")
		return
	}
	taken, err := n.approve(r.Context(), id, call, *b.Approve, b.Reason, messages.ApprovedByHTTP)
	answerLate(w) // as postTask's
	switch {
	case err == nil && taken != nil:
		// The same answer again (a retry of an answer that landed): the
		// first answer's status, so that a client checking it reads the same,
		// and that it changed nothing.
		writeJSON(w, http.StatusAccepted, approvalAnswered{SessionID: id, Call: call, Status: verdictOf(*b.Approve), Duplicate: true, Key: taken.key,
			Note: taken.note(messages.ApprovalAnswer{Approve: *b.Approve})})
	case errors.Is(err, ErrBadTask):
		writeError(w, http.StatusBadRequest, "%v", err)
	case errors.Is(err, ErrUnknownSession):
		writeError(w, http.StatusNotFound, "no session %s", QuoteHead(id))
	case errors.As(err, new(*actors.ReusedCallIDError)):
		// Nothing was done, whichever call the answer was meant for: a 409
		// naming both, and whether the earlier took this very answer.
		reused, _ := errors.AsType[*actors.ReusedCallIDError](err)
		writeJSON(w, http.StatusConflict, approvalConflict{Error: err.Error(), Key: reused.Earlier, Waiting: reused.Waiting, Duplicate: reused.Taken})
	case errors.Is(err, actors.ErrApprovalNotPending):
		writeError(w, http.StatusConflict, "%v", err)
	case errors.Is(err, actors.ErrSessionFailed):
		writeError(w, http.StatusInternalServerError, "%v", err)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "%v", err)
	default:
		writeJSON(w, http.StatusAccepted, approvalAnswered{SessionID: id, Call: call, Status: verdictOf(*b.Approve)})
	}
}

// approvalAnswered is the 202 of an answer to an approval. Duplicate, Key and
// Note are set when the session had taken the same answer already (Key the
// call it was taken for): Status is then the same as the first answer's.
type approvalAnswered struct {
	SessionID string `json:"session_id"`
	Call      string `json:"call"`
	Status    string `json:"status"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Key       string `json:"key,omitempty"`
	Note      string `json:"note,omitempty"`
}

// approvalConflict is the 409 of an answer by a call ID that an earlier call of
// the session (Key) and a call waiting (Waiting) have: it answered neither.
// Duplicate reports that the earlier call took this very answer.
type approvalConflict struct {
	Error     string `json:"error"`
	Key       string `json:"key"`
	Waiting   string `json:"waiting"`
	Duplicate bool   `json:"duplicate"`
}

// verdictOf is an answer's status: "approved" or "rejected".
func verdictOf(approve bool) string {
	if approve {
		return "approved"
	}
	return "rejected"
}

// answerFields are the JSON names of messages.ApprovalAnswer's fields.
var answerFields = []string{"v", "session_id", "call", "approve", "reason", "by"}

// checkKeys refuses a JSON object (valid JSON) with a key given twice, or a key
// that is one of names but for its case; with unknown, a key that is none of
// names is let through (a command of a later version may have more).
func checkKeys(body []byte, names []string, unknown bool) error {
	var seen []string
	var err error
	scanMembers(body, func(raw, _ []byte) {
		if err != nil {
			return
		}
		key := string(raw)
		if !plainASCII(raw) {
			if uerr := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &key); uerr != nil {
				err = fmt.Errorf("malformed JSON: %v", uerr)
				return
			}
		}
		switch {
		case slices.Contains(seen, key):
			err = fmt.Errorf("duplicate key %s", QuoteHead(key))
		case !slices.Contains(names, key) && (!unknown || slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, key) })):
			err = fmt.Errorf("unknown field %s (field names are case-sensitive)", QuoteHead(key))
		}
		seen = append(seen, key)
	})
	return err
}

// decodeStrict decodes one JSON object into v: no unknown field, nothing after it.
func decodeStrict(body []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON: %v", err)
	}
	if d.More() {
		return errors.New("malformed JSON: data after the object")
	}
	return nil
}
