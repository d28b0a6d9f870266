package messages

// Bus topics. Every message on them is keyed by session ID.
const (
	// TopicTasks carries TaskSubmitted envelopes into the cluster.
	TopicTasks = "troupe.tasks"
	// TopicEvents carries every event of every session once it is sequenced.
	TopicEvents = "troupe.events"
	// TopicResults carries one TaskResult per finished task.
	TopicResults = "troupe.results"
)

// Session and task statuses, as the HTTP API and the results topic report them.
const (
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
)

// TaskResult is the body published on TopicResults and returned by GET /v1/sessions/{id}.
type TaskResult struct {
	SessionID string `json:"session_id"`
	Status    string `json:"status"`
	Output    string `json:"output,omitempty"`
	Error     string `json:"error,omitempty"`
	// Reason is why a failed task stopped (TaskFailed.Reason: ReasonMaxSteps,
	// ReasonTokenBudget, ReasonLoop, ReasonDeadline, ReasonCancelled, ...); empty
	// unless Status is StatusFailed.
	Reason string `json:"reason,omitempty"`
	// Note is what the agent's paradigm said of a completed task's answer
	// (messages.TaskCompleted.Note): a critique that never passed, a lesson stored.
	Note string `json:"note,omitempty"`
}

// Metadata keys set on every bus message, so routers and partitioners need not decode.
const (
	MetaSessionID = "session_id"
	MetaType      = "type"
)
