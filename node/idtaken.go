package node

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// idTakenPage is how many events checkRedelivery reads at a time while it looks
// for the event a task's ID names.
const idTakenPage = 512

// checkRedelivery is called for a task of the tasks topic that its session found
// recorded already (actors.TaskAccepted.Duplicate): its ID names an event of the
// session. It returns nil when that event is this task's task.submitted, the
// task as it was sent (a redelivery: nothing more is done), when the log holds
// no such event any more (compacted: nothing to compare), or when the task
// names itself (task_id) and the recorded task has that task_id: the same task
// sent again, whose first body runs (as over HTTP). Otherwise the record's ID
// was reused for another task (a producer reusing its request IDs): taken for a
// redelivery, the task would be dropped with no word to anyone. It returns an
// errPermanent naming the ID, the event that has it and what differs (the
// record goes to troupe.poison with that reason, counted in
// troupe_bus_poisoned_total). Nothing is sent to the task's reply_topic: a
// result there would carry the task_id of the task that holds the ID, which
// runs, and a client matching results by task_id would take it for that
// task's. named is the recorded task.submitted event of a named task sent again
// (the third case above); zero otherwise.
func (n *Node) checkRedelivery(ctx context.Context, env messages.Envelope) (named messages.Envelope, err error) {
	this, err := env.Decode()
	if err != nil {
		return named, nil // the session decoded it; not reached
	}
	task, ok := this.(*messages.TaskSubmitted)
	if !ok {
		return named, nil
	}
	recorded, found, err := n.recordedEvent(ctx, env.SessionID, env.ID)
	if err != nil {
		return named, fmt.Errorf("task %s for session %s: read the session for the task recorded under its ID: %w", env.ID, env.SessionID, err) // retried
	}
	if !found {
		return named, nil
	}
	var differs []string
	if recorded.Type != messages.TypeTaskSubmitted {
		differs = append(differs, "the ID is of a "+string(recorded.Type)+" event, not a task's")
	} else if p, err := recorded.Decode(); err == nil {
		rec := p.(*messages.TaskSubmitted)
		if task.TaskID != "" && rec.TaskID == task.TaskID {
			if d := taskDifferences(rec, task); len(d) > 0 {
				n.cfg.Logger.Warn("a named task sent again with another body: the same task, its first body runs", "task", env.ID, "session", env.SessionID, "task_id", task.TaskID, "differs", strings.Join(d, "; "))
			}
			return recorded, nil
		}
		differs = taskDifferences(rec, task)
	}
	if len(differs) == 0 {
		return named, nil
	}
	reason := fmt.Sprintf("task %s for session %s: its ID (a record's _watermill_message_uuid header names its task) is that of the session's event at seq %d, and the task differs from what was recorded under it (%s): a record read again repeats its task, another task takes another ID (or none: the node then derives one from the record)",
		env.ID, env.SessionID, recorded.Seq, strings.Join(differs, "; "))
	return named, fmt.Errorf("%w: %s", errPermanent, reason)
}

// recordedEvent finds the event of session whose ID is id: by its ID where the
// log finds events so (eventlog.EventFinding: SQLite's index of IDs), else
// reading the session idTakenPage events at a time until it is found.
func (n *Node) recordedEvent(ctx context.Context, session, id string) (messages.Envelope, bool, error) {
	return eventlog.FindEvent(ctx, n.log, session, id, idTakenPage)
}

// taskDifferences lists what of the task a client sent differs between a
// recorded task and one sent under its ID. What the node stamps (the deadline,
// counted from when the record was read when the record has no timestamp; the
// agent's memory blocks, which change; the trace; the rules and configuration
// the session sets, and a depth it raises) is not compared: a redelivery may
// differ there.
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
	if sent.Depth > recorded.Depth {
		// The session stamps its own depth on a shallower task (actors.SessionState.Depth):
		// only one recorded shallower than it was sent is another task.
		field("depth", sent.Depth, recorded.Depth)
	}
	return out
}
