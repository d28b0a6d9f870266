package node

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// ReasonIDTaken is the Reason of the failed result sent to the reply_topic of a
// task the node refused because its ID (a record's _watermill_message_uuid
// header, which names its task) is the ID of another task or event: of an
// earlier task of its session whose content differs, or of another session's
// event.
const ReasonIDTaken = "id_taken"

// idTakenPage is how many events checkRedelivery reads at a time while it looks
// for the event a task's ID names.
const idTakenPage = 512

// checkRedelivery is called for a task of the tasks topic that its session found
// recorded already (actors.TaskAccepted.Duplicate): its ID names an event of the
// session. It returns nil when that event is this task's task.submitted, the
// task as it was sent (a redelivery: nothing more is done), or when the log
// holds no such event any more (compacted: nothing to compare). Otherwise the
// record's ID was reused for another task (a producer reusing its request IDs):
// taken for a redelivery, the task would be dropped with no word to anyone. It
// returns an errPermanent naming the ID, the event that has it and what
// differs (the record goes to troupe.poison with that reason, counted in
// troupe_bus_poisoned_total), and the task's reply_topic, if any, is sent a
// failed result saying so.
func (n *Node) checkRedelivery(ctx context.Context, env messages.Envelope) error {
	this, err := env.Decode()
	if err != nil {
		return nil // the session decoded it; not reached
	}
	task, ok := this.(*messages.TaskSubmitted)
	if !ok {
		return nil
	}
	recorded, found, err := n.recordedEvent(ctx, env.SessionID, env.ID)
	if err != nil {
		return fmt.Errorf("task %s for session %s: read the session for the task recorded under its ID: %w", env.ID, env.SessionID, err) // retried
	}
	if !found {
		return nil
	}
	var differs []string
	if recorded.Type != messages.TypeTaskSubmitted {
		differs = append(differs, "the ID is of a "+string(recorded.Type)+" event, not a task's")
	} else if p, err := recorded.Decode(); err == nil {
		differs = taskDifferences(p.(*messages.TaskSubmitted), task)
	}
	if len(differs) == 0 {
		return nil
	}
	reason := fmt.Sprintf("task %s for session %s: its ID (a record's _watermill_message_uuid header names its task) is that of the session's event at seq %d, and the task differs from what was recorded under it (%s): a record read again repeats its task, another task takes another ID (or none: the node then derives one from the record)",
		env.ID, env.SessionID, recorded.Seq, strings.Join(differs, "; "))
	n.replyRefused(env, task, reason)
	return fmt.Errorf("%w: %s", errPermanent, reason)
}

// recordedEvent finds the event of session whose ID is id, reading the session a
// page at a time until it is found.
func (n *Node) recordedEvent(ctx context.Context, session, id string) (messages.Envelope, bool, error) {
	from := uint64(1)
	for {
		page, err := eventlog.ReadPage(ctx, n.log, session, from, idTakenPage)
		if err != nil {
			return messages.Envelope{}, false, err
		}
		for _, e := range page {
			if e.ID == id {
				return e, true, nil
			}
		}
		if len(page) < idTakenPage {
			return messages.Envelope{}, false, nil
		}
		from = page[len(page)-1].Seq + 1
	}
}

// taskDifferences lists what of the task a client sent differs between a
// recorded task and one sent under its ID. What the node stamps (the deadline,
// counted from when the record was read when the record has no timestamp; the
// agent's memory blocks, which change; the trace; the rules and configuration
// the session sets) is not compared: a redelivery may differ there.
func taskDifferences(recorded, sent *messages.TaskSubmitted) []string {
	var out []string
	if recorded.Input != sent.Input {
		out = append(out, fmt.Sprintf("input %s, recorded %s", QuoteHead(sent.Input), QuoteHead(recorded.Input)))
	}
	field := func(name string, sent, recorded any) {
		if !reflect.DeepEqual(sent, recorded) {
			s, _ := json.Marshal(sent)
			r, _ := json.Marshal(recorded)
			out = append(out, fmt.Sprintf("%s %s, recorded %s", name, QuoteHead(string(s)), QuoteHead(string(r))))
		}
	}
	field("agent", sent.Agent, recorded.Agent)
	field("model", sent.Model, recorded.Model)
	field("max_steps", sent.MaxSteps, recorded.MaxSteps)
	field("max_tokens", sent.MaxTokens, recorded.MaxTokens)
	field("max_cost_usd", sent.MaxCostUSD, recorded.MaxCostUSD)
	field("reply_topic", sent.ReplyTopic, recorded.ReplyTopic)
	field("task_id", sent.TaskID, recorded.TaskID)
	field("parent", sent.Parent, recorded.Parent)
	return out
}

// replyRefused sends the reply topic of a task refused before it was recorded,
// if it names one, a failed result that says why (ReasonIDTaken), through the
// outbox: a client that waits on its reply topic hears of the refusal.
func (n *Node) replyRefused(env messages.Envelope, task *messages.TaskSubmitted, reason string) {
	if task.ReplyTopic == "" || n.outbox == nil {
		return
	}
	name := task.TaskID
	if name == "" {
		name = env.ID
	}
	b, err := json.Marshal(messages.TaskResult{SessionID: env.SessionID, TaskID: name, Status: messages.StatusFailed, Error: reason, Reason: ReasonIDTaken})
	if err != nil {
		return
	}
	msg := message.NewMessage(env.ID+"/refused", b)
	msg.Metadata.Set(messages.MetaSessionID, env.SessionID)
	if err := n.outbox.Publish(task.ReplyTopic, msg); err != nil {
		n.cfg.Logger.Warn("the refusal of a task was not sent to its reply topic", "task", env.ID, "session", env.SessionID, "topic", task.ReplyTopic, "err", err)
	}
}
