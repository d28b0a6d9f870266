package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// answerResent publishes again the result of a named task (messages.TaskSubmitted.TaskID)
// of the tasks topic sent again after it ended: the same task, recorded and run
// once (recorded is its task.submitted event), whose client sent it again
// because it lost the result (it read troupe.results from its end, say) and
// waits for one. POST /v1/tasks answers the same task sent again with the task;
// here its result goes again to troupe.results and to its reply topic, once for
// each record that sends it again, under an ID of that record: a client resending
// in a loop gets a result for each record and no more. The record that carried
// the task, read again after a rebalance or a restart (or forwarded again),
// publishes nothing again: its result was published as the task ended, and a
// clean handover publishes nothing again. It is told by its ID, which the task
// recorded as its CausationID (Ingress.decode) and which a record read again
// keeps, whatever the clocks of its producer, its broker and the nodes say. A
// task recorded without one (from HTTP or the API, or by a version before it
// kept it) is told by time instead: a record written (sentAt, RecordTimer)
// after the task was recorded sends it again; one written before, or of no
// known time (timestamp -1 or 0), publishes nothing again. That holds as far as
// the producer's (or broker's) clock agrees with the nodes'. A task that still
// runs or waits its turn publishes its result as it ends, as it would have.
func (n *Node) answerResent(msg *message.Message, env, recorded messages.Envelope, sentAt time.Time) error {
	if recorded.CausationID != "" {
		if recorded.CausationID == env.CausationID {
			return nil // the record that carried it
		}
	} else if sentAt.IsZero() || sentAt.UnixMicro() <= recorded.TS {
		return nil
	}
	var (
		res   messages.TaskResult
		reply string
	)
	_, err := n.folds.with(msg.Context(), n.log, env.SessionID, func(st *actors.SessionState) error {
		r, ok := st.TaskResult(env.ID)
		if !ok || r.Status != messages.StatusCompleted && r.Status != messages.StatusFailed {
			return nil
		}
		res = r
		res.SessionID = env.SessionID
		reply = st.ReplyTopic(env.ID)
		return nil
	})
	if errors.Is(err, ErrUnknownSession) || err == nil && res.Status == "" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("task %s for session %s: read the session for the result of the task sent again: %w", env.ID, env.SessionID, err) // retried
	}
	b, err := actors.EncodeResult(res)
	if err != nil {
		return nil
	}
	out := message.NewMessage(hashUUID("resent-result", []byte(msg.UUID), []byte(env.ID)), b)
	out.Metadata.Set(messages.MetaSessionID, env.SessionID)
	if reply != "" && n.outbox != nil && n.outbox.HasReaders(reply) {
		if err := n.outbox.Publish(reply, out.Copy()); err != nil {
			n.cfg.Logger.Warn("publish the result of a task sent again to its reply topic", "session", env.SessionID, "topic", reply, "err", err)
		}
	}
	if n.outbox == nil || n.outbox.HasReaders(messages.TopicResults) {
		if err := n.pub.Publish(messages.TopicResults, out); err != nil {
			return fmt.Errorf("task %s for session %s: publish the result of the task sent again on %s: %w", env.ID, env.SessionID, messages.TopicResults, err) // retried
		}
	}
	return nil
}
