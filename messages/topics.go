package messages

import (
	"slices"
	"strconv"
	"strings"
)

// Bus topics. Every message on them is keyed by session ID.
const (
	// TopicTasks carries TaskSubmitted envelopes into the cluster.
	TopicTasks = "troupe.tasks"
	// TopicEvents carries every event of every session once it is sequenced.
	TopicEvents = "troupe.events"
	// TopicResults carries one TaskResult per finished task, and an
	// ApprovalRefused (MetaType TypeApprovalRefused) per refused ApprovalAnswer
	// of TopicTasks, an ApprovalTaken (MetaType TypeApprovalTaken) per one read
	// again once its session took it.
	TopicResults = "troupe.results"
)

// Session and task statuses, as the HTTP API and the results topic report them.
const (
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
)

// TaskResult is the body published on TopicResults (and a task's reply topic) and
// returned by GET /v1/sessions/{id}.
type TaskResult struct {
	SessionID string `json:"session_id"`
	// TaskID names the task the result is of: the task_id its client gave it
	// (TaskSubmitted.TaskID), else the ID of its task.submitted event, the
	// correlation ID of its task.* events (what POST /v1/tasks answers as task_id;
	// for a plain record of the tasks topic, RecordID's
	// "kafka:<topic>/<partition>/<offset>@<timestamp>").
	// A result published again (a node that takes a partition over publishes the
	// latest task's again) has the same TaskID: consumers dedupe by it. In GET
	// /v1/sessions/{id}, the task the status is of: the running one, else the latest.
	TaskID string `json:"task_id,omitempty"`
	Status string `json:"status"`
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
	// Reason is why a failed task stopped (TaskFailed.Reason: ReasonMaxSteps,
	// ReasonTokenBudget, ReasonLoop, ReasonDeadline, ReasonCancelled, ...), or
	// ReasonRejected for a task of the tasks topic the node refused as bad (never
	// recorded: its session has no TaskFailed of it); empty unless Status is
	// StatusFailed.
	Reason string `json:"reason,omitempty"`
	// Note is what the agent's paradigm said of a completed task's answer
	// (messages.TaskCompleted.Note): a critique that never passed, a lesson stored.
	Note string `json:"note,omitempty"`
	// Truncated says that Output (and Error) were cut to fit one bus message
	// (BusMessageMax); the whole answer is in the session's task.completed event
	// (GET /v1/sessions/{id}).
	Truncated bool `json:"truncated,omitempty"`
}

// Metadata keys set on every bus message, so routers and partitioners need not decode.
const (
	MetaSessionID = "session_id"
	MetaType      = "type"
	// MetaStored is set on the bus message of an event or task too large for one
	// (BusMessageMax): its envelope's payload is {}, and the header names the
	// stream of the log that holds it whole: for an event, its session (the event
	// at its seq); for a task, the stream whose one BusStored event holds the
	// task's envelope (BusStream(BusStoredTask, ID)).
	MetaStored = "stored"
	// MetaRepeatedHeaders is set by a bus whose transport lets a message give one
	// header name more than once (Kafka: kcat -H type=a -H type=b) on a message
	// that gave a header a node decides by (DecidingHeader, or the message's ID)
	// different values, which its metadata cannot hold: it lists each occurrence
	// of those headers, in order, as "name"="value" (quoted, each value cut to its
	// first 64 bytes), comma-separated. The metadata entry of such a header holds
	// its last value, as does that of any other header given more than once. A
	// keyed record whose MetaSessionID header names another value than its key
	// (Kafka keys a record by its session) is listed too: key="…" first, then that
	// header's occurrences.
	MetaRepeatedHeaders = "_troupe_repeated_headers"
)

// decidingHeaders are the metadata entries a node reads to decide what a bus
// message is and where it goes.
var decidingHeaders = [...]string{MetaType, MetaSessionID, MetaStored, MetaReplyNode, MetaCorrelationID}

// DecidingHeader reports whether name, in any case, is a metadata entry (a bus
// message's header) a node decides by: what the message is (MetaType, read in any
// case), whose it is (MetaSessionID), where it is held (MetaStored), whom it answers
// (MetaReplyNode, MetaCorrelationID). A message that gives one of these different
// values cannot be acted on (MetaRepeatedHeaders); any other header (a producer's
// own, a tracing header such as b3 or traceparent that two tools or a proxy each
// set) changes nothing the node decides, and a message repeating it is read as
// usual.
func DecidingHeader(name string) bool {
	for _, h := range decidingHeaders {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// RepeatedHeaderNames reads a MetaRepeatedHeaders list: the names of the headers
// it lists, each once, in the order they first appear, and whether it lists the
// record's key (key="…", which the MetaSessionID header contradicts). ok is false
// when list is not of that form (names and key are then unknown).
func RepeatedHeaderNames(list string) (names []string, key, ok bool) {
	s := list
	for s != "" {
		if rest, isKey := strings.CutPrefix(s, "key="); isKey {
			s, key = rest, true
		} else {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, false, false
			}
			name, _ := strconv.Unquote(q)
			if s, ok = strings.CutPrefix(s[len(q):], "="); !ok {
				return nil, false, false
			}
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		// The value, quoted by QuoteHead: "…", or its head and "… (N bytes)".
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			return nil, false, false
		}
		s = s[len(q):]
		if rest, cut := strings.CutPrefix(s, "… ("); cut {
			i := strings.Index(rest, " bytes)")
			if i < 0 {
				return nil, false, false
			}
			s = rest[i+len(" bytes)"):]
		}
		if s != "" {
			if s, ok = strings.CutPrefix(s, ", "); !ok || s == "" {
				return nil, false, false
			}
		}
	}
	return names, key, list != ""
}

// BusMessageMax bounds the encoded message that goes on the bus as it is, under the
// 1 MiB a Kafka message holds by default (the broker's message.max.bytes, the
// producer's BatchBytes), with room for the record's headers. What is larger travels
// otherwise: an effect request or reply as a reference naming the log stream that holds
// it (BusStored), an event or a task as a reference (MetaStored), a task result with its
// output cut (TaskResult.Truncated).
const BusMessageMax = 768 << 10
