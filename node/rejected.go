package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// rejectTask publishes the failed result (messages.ReasonRejected) of a task of
// the tasks topic that the ingress refused as bad (refusal wraps ErrBadTask), on
// troupe.results and on its reply_topic when that topic passed the rules, so that
// a client waiting for it learns at once why, as a 400 tells a client over HTTP.
// The refusal is decode's, or one made before it, for the record's headers
// (refuseUndecoded). The record then goes to troupe.poison as before; nothing is
// recorded in the session's log. It publishes nothing when this process poisoned
// the record already (read again: its result went out with it); nor, logging
// why, when the record did not parse far enough to say where its client waits
// or its headers leave that in doubt (Ingress.rejection), or when a task of the
// session answers to the same task_id (a named task sent again with a body the
// rules refuse, a record whose ID header is a recorded task's): a failed result
// of that name would be taken for that task's, which runs.
//
// The result is the same whenever the record is read again (after a crash, or
// a failed publish to troupe.poison): the same message ID (rejectedID: one per
// session and task_id) and the same content, so that a consumer deduping by
// message ID, or by session and task_id, keeps one. It is
// published to troupe.results before the record is poisoned: an error (the
// broker down, the log unreadable) is returned, and the record handled again.
// The copy on the reply topic goes through the outbox's lane of that topic, as
// a result's copy does (a reply topic the broker refuses holds nothing else).
func (n *Node) rejectTask(msg *message.Message, a Arrival, refusal error) error {
	if key, ok := n.recordCoordinates(msg); ok && n.poisoned != nil && n.poisoned.has(key) {
		return nil
	}
	r, why := n.ingress.rejection(a, refusal, recordHeadersOf(msg))
	if why != nil {
		n.cfg.Logger.Warn("task refused as bad: no result published, its record does not say where its client waits", "message", idHead(msg.UUID),
			"why", why.Error())
		return nil
	}
	if r.session {
		taken, whole, err := n.recordedTask(msg.Context(), r.result.SessionID, r.ids)
		if errors.Is(err, messages.ErrCorrupt) {
			// Read again, it fails again: retried, the record would hold its
			// partition for good, where it was poisoned before any result.
			n.cfg.Logger.Warn("task refused as bad: no result published, its session's log cannot be read", "message", idHead(msg.UUID),
				"session", r.result.SessionID, "task_id", r.result.TaskID, "err", err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("task message %s: read session %s for a task of task_id %s: %w", idHead(msg.UUID), r.result.SessionID, QuoteHead(r.result.TaskID), err)
		}
		if !whole {
			n.cfg.Logger.Warn("task refused as bad: no result published, its session is too long to look for a task of its task_id", "message", idHead(msg.UUID),
				"session", r.result.SessionID, "task_id", r.result.TaskID, "events_read", maxRejectionPages*idTakenPage)
			return nil
		}
		if taken {
			n.cfg.Logger.Warn("task refused as bad: no result published, a task of its session has its task_id", "message", idHead(msg.UUID),
				"session", r.result.SessionID, "task_id", r.result.TaskID)
			return nil
		}
	}
	b, err := json.Marshal(r.result)
	if err != nil {
		return nil
	}
	out := message.NewMessage(rejectedID(r.result.SessionID, r.result.TaskID), b)
	out.Metadata.Set(messages.MetaSessionID, r.result.SessionID)
	out.Metadata.Set(messages.MetaType, messages.TypeTaskRejected)
	if r.reply != "" && n.outbox != nil && n.outbox.HasReaders(r.reply) {
		if err := n.outbox.Publish(r.reply, out.Copy()); err != nil {
			n.cfg.Logger.Warn("publish a refused task's result to its reply topic", "session", r.result.SessionID, "topic", r.reply, "err", err)
		}
	}
	if n.outbox == nil || n.outbox.HasReaders(messages.TopicResults) {
		if err := n.pub.Publish(messages.TopicResults, out); err != nil {
			return fmt.Errorf("task message %s: publish its refusal on %s: %w", idHead(msg.UUID), messages.TopicResults, err)
		}
	}
	return nil
}

// forwardRefused forwards a record of the tasks topic that was refused as bad
// (refusal) to its session's partition when it was read on another one
// (forward), and reports whether it did: its rejected result is published
// unless a task of its session has its task_id (rejectTask), which the
// session's owner alone tells in order. Read on another partition (a producer's
// partitioner other than Troupe's, kcat's by default), a task of that task_id
// just before it on that partition is forwarded, and recorded by the owner
// later: judged at once where it was read, the log had no task of that task_id
// yet, and the record got a rejected result naming that task, which a client
// took for its failure while it ran (a cancellation sent without its type
// header; the same task sent again with a body the rules refuse). Forwarded, it
// is judged after that task. A record whose result would name no session (one
// that does not parse far enough to say where its client waits) is not
// forwarded: nothing of a session decides it. Nor is one whose copy would be
// over effectMessageMax: forward has no smaller form of a refused record, and a
// copy the bus refuses would be retried for ever; it is judged where it was
// read.
func (n *Node) forwardRefused(msg *message.Message, a Arrival, refusal error) (bool, error) {
	r, why := n.ingress.rejection(a, refusal, recordHeadersOf(msg))
	if why != nil || !r.session {
		return false, nil
	}
	if messageSize(msg)+len(messages.MetaSessionID)+len(r.result.SessionID) > effectMessageMax {
		return false, nil
	}
	return n.forward(msg, nil, r.result.SessionID, nil)
}

// rejectedID is the message ID of the rejected result of the task named taskID
// (its task_id, else its record's ID) in session: the ID a task of that name
// has there (namedTaskID) and "/rejected", as a result's is its task's event ID
// and "/result". Two sessions refusing one task_id publish two IDs, which a
// consumer deduping by message ID keeps apart (with "<task_id>/rejected" it kept
// the first only), and the same record read again the same one. It is 45
// bytes whatever the length of the task's name, well under MaxTaskMessageID
// (a name of up to maxRejectionID bytes made an ID of that length).
func rejectedID(session, taskID string) string {
	return namedTaskID(session, taskID) + "/rejected"
}

// refuseUndecoded is handleTask's answer to a record of the tasks topic it
// refuses before decoding it, for its headers: a type this node does not know,
// type headers that disagree, a header given different values or a session_id
// header other than its key. poison is the error that sends the record to the
// poison topic (it wraps errPermanent); refusal (wrapping ErrBadTask) is what its
// rejected result says (rejectTask), published first when its body says where
// its client waits, as for a task decode refused: without it, a client that put
// a typo in its type header waited for its result for ever. A record whose body
// is a reference to a stored task (messages.MetaStored, which only a node
// writes) gets none: its task is not read. Nor does one whose body is no task's
// (notATaskBody): what its headers got wrong may be the type of a cancellation
// or an approval, whose body says a session too, and a failed result of a task
// in that session would be taken, by a client waiting for the session's result,
// for the result of the task that runs there.
func (n *Node) refuseUndecoded(msg *message.Message, poison, refusal error) error {
	if msg.Metadata.Get(messages.MetaStored) != "" {
		n.cfg.Logger.Warn("task refused as bad: no result published, its record does not say where its client waits", "message", idHead(msg.UUID),
			"why", "its value is a reference to a stored task (header "+messages.MetaStored+"), not read before its headers are sound")
		return poison
	}
	if why := notATaskBody(msg); why != "" {
		if isApprovalRecord(msg) {
			// An approval whose type header is wrong: its client reads the
			// session's replies to approvals.
			if forwarded, err := n.refuseMalformedApproval(msg, refusal); forwarded || err != nil {
				return err // retried, or judged on its session's owner
			}
			return poison
		}
		n.cfg.Logger.Warn("record refused before decoding: no result published, it may be no task", "message", idHead(msg.UUID), "why", why)
		return poison
	}
	// Judged on its session's owner, as a task refused for its body is
	// (forwardRefused): a task sent again with a typo in its type header, right
	// behind the task on another partition, is not answered in its name. The
	// headers it is refused for go with the copy (a header given different
	// values as messages.MetaRepeatedHeaders, which the copy carries as a
	// header), and its owner refuses it again.
	a := arrivalOf(msg)
	if forwarded, err := n.forwardRefused(msg, a, refusal); forwarded || err != nil {
		return err
	}
	if err := n.rejectTask(msg, a, refusal); err != nil {
		return err // retried
	}
	return poison
}

// notATaskBody says why the body of a record refused before decoding is not
// clearly a task's, "" when it is (a JSON object with a member of a task's other
// than session_id and task_id, which commands share with tasks: "input", even
// null, "agent", "reply_topic", "max_steps"...; or an envelope,
// which Ingress.rejection answers only when it is a task.submitted one) or when
// it does not parse far enough to tell (no value, not JSON, not an object:
// Ingress.rejection then says why it gets no result). The body decides, not the
// type headers: a task's body with a type header gone wrong is answered, as its
// sender waits for its result; but when the body is no task's, the why names a
// type header that is a command's type in another case, or nearly (commandTypeNear).
func notATaskBody(msg *message.Message) string {
	p := msg.Payload
	if len(p) == 0 || !utf8.Valid(p) || !messages.ValidJSON(p) || isEnvelope(p) {
		return ""
	}
	task := false
	names := taskFields()
	object := scanMembers(p, func(raw, _ []byte) {
		key := string(raw)
		if !plainASCII(raw) && json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &key) != nil {
			return
		}
		// A task's own member: none of a command's (a cancellation's, an
		// approval's, a memory command's) is one, but session_id and task_id,
		// which they share with a task. input null is a task's all the same: a
		// client's empty input left out as null.
		task = task || names[key] && key != "session_id" && key != "task_id"
	})
	if !object || task {
		return ""
	}
	why := `its value has no member of a task's but session_id and task_id (no "input"), so it may be no task: it may be a cancellation or an approval whose type header was not read as its type, and a failed result of a task of its session would be taken for the result of the task running there`
	var types []string
	for k := range msg.Metadata {
		if strings.EqualFold(k, messages.MetaType) {
			types = append(types, k)
		}
	}
	slices.Sort(types)
	for _, k := range types {
		if near := commandTypeNear(msg.Metadata[k]); near != "" {
			why += fmt.Sprintf("; its header %s=%s is near %q", QuoteHead(k), QuoteHead(msg.Metadata[k]), near)
		}
	}
	return why
}

// isApprovalRecord reports whether the body of a record of the tasks topic is an
// approval's (messages.ApprovalAnswer) rather than a task's: a JSON object with
// no member of a task's but session_id and task_id (notATaskBody), and a "call"
// member, which no other command has. One refused (for its type header, or read
// as a task for want of one) is answered as an approval refused
// (refuseMalformedApproval), naming its session and call: a task's rejected
// result would name the record's ID, which its client does not know.
func isApprovalRecord(msg *message.Message) bool {
	if notATaskBody(msg) == "" {
		return false
	}
	call := false
	scanMembers(msg.Payload, func(raw, _ []byte) {
		call = call || string(raw) == "call"
	})
	return call
}

// noInputRefusal is the refusal of a record read as a task (its type header typ
// is "" or task.submitted) whose body has no member of a task's but session_id
// and task_id (notATaskBody): it names what is missing, and how a cancellation
// or an approval, which such a body may be, is sent instead.
func noInputRefusal(typ string) error {
	how := "it has no type header"
	if typ != "" {
		how = "its type header is " + typ
	}
	return fmt.Errorf(`%w: no "input": the record was read as a task (%s), and its value has no member of a task's but session_id and task_id; a task needs "input", e.g. {"input":"…"}; a cancellation is sent with the header type=%s, an approval with type=%s`,
		ErrBadTask, how, messages.TypeCancelRequested, messages.TypeApprovalAnswer)
}

// commandTypeNear returns the type of a command of the tasks topic (a
// cancellation, an approval, a memory command, a delta watch) that typ is in
// another case, or up to two edits away (a letter changed, added or dropped; two
// swapped are two): "Task.Cancel", "task.cancle", "task.cancell"; "" when it is
// none. The
// types are far enough apart (and from task.submitted) that no typ is near two.
func commandTypeNear(typ string) string {
	typ = strings.ToLower(typ)
	for _, t := range []string{messages.TypeCancelRequested, messages.TypeApprovalAnswer, messages.TypeMemoryCommand, messages.TypeDeltaWatch} {
		if editDistance(typ, t, 2) <= 2 {
			return t
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b (a swap of two letters
// counts two), or limit+1 when it is over limit.
func editDistance(a, b string, limit int) int {
	if len(a) > len(b)+limit || len(b) > len(a)+limit {
		return limit + 1
	}
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit+1)
}

// maxRejectionPages bounds the pages (of idTakenPage events) of its session's log
// that rejectTask reads for a task of a refused task's task_id: without it, each
// refused record naming a long session read the whole session, and a stream of
// them read it again for each. Past it no result is published (the record is
// poisoned, as before any was): a task of that task_id may be recorded.
const maxRejectionPages = 8

// recordedTask reports whether session's log holds a task.submitted event whose
// ID is one of ids, reading at most maxRejectionPages pages of it; whole is false
// when it read that many without reaching the session's end (taken is then
// false, unknown).
func (n *Node) recordedTask(ctx context.Context, session string, ids []string) (taken, whole bool, err error) {
	from := uint64(1)
	for range maxRejectionPages {
		page, err := eventlog.ReadPage(ctx, n.log, session, from, idTakenPage)
		if err != nil {
			return false, false, err
		}
		for _, e := range page {
			if e.Type == messages.TypeTaskSubmitted && slices.Contains(ids, e.ID) {
				return true, true, nil
			}
		}
		if len(page) < idTakenPage {
			return false, true, nil
		}
		from = page[len(page)-1].Seq + 1
	}
	return false, false, nil
}
