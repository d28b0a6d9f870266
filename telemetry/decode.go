package telemetry

import (
	"encoding/json"

	"github.com/troupe-run/troupe/messages"
)

// The spans read a few fields of each event they follow. Decoding a whole payload
// (messages.Envelope.Decode) copies what they never read: a task's input and
// output, a request's tool names and context report, an answer's text and tool
// calls, a tool's arguments and result. spanPayload decodes the fields the spans
// read, into the payload's own type, and leaves the rest unset; the JSON names are
// those of the messages types (TestSpanPayloadReadsWhatDecodeReads).

// answered is what the spans read of a model.responded: the payload's fields but
// the message, of which they need only whether it asks for tools.
type answered struct {
	messages.ModelResponded
	asksTools bool
}

// spanPayload decodes the fields of e's payload the spans read: a
// *messages.TaskSubmitted, *messages.ModelRequested, *answered,
// *messages.ToolCallRequested, *messages.ToolCallCompleted,
// *messages.ApprovalRequested, *messages.ApprovalResolved, *messages.TaskCompleted
// or *messages.TaskFailed; ok is false for any other type, or a payload that does
// not decode.
func spanPayload(e *messages.Envelope) (p any, ok bool) {
	var err error
	switch e.Type {
	case messages.TypeTaskSubmitted:
		var v struct {
			Agent       string              `json:"agent"`
			Model       string              `json:"model"`
			Parent      *messages.ParentRef `json:"parent"`
			TraceParent string              `json:"traceparent"`
			TraceState  string              `json:"tracestate"`
		}
		err = json.Unmarshal(e.Payload, &v)
		p = &messages.TaskSubmitted{Agent: v.Agent, Model: v.Model, Parent: v.Parent, TraceParent: v.TraceParent, TraceState: v.TraceState}
	case messages.TypeModelRequested:
		var v struct {
			Key     string `json:"key"`
			Model   string `json:"model"`
			Step    int    `json:"step"`
			Purpose string `json:"purpose"`
		}
		err = json.Unmarshal(e.Payload, &v)
		p = &messages.ModelRequested{Key: v.Key, Model: v.Model, Step: v.Step, Purpose: v.Purpose}
	case messages.TypeModelResponded:
		var v struct {
			Key     string         `json:"key"`
			Model   string         `json:"model"`
			Usage   messages.Usage `json:"usage"`
			Error   string         `json:"error"`
			Cached  bool           `json:"cached"`
			Message struct {
				ToolCalls []struct{} `json:"tool_calls"` // counted, not copied
			} `json:"message"`
		}
		err = json.Unmarshal(e.Payload, &v)
		p = &answered{ModelResponded: messages.ModelResponded{Key: v.Key, Model: v.Model, Usage: v.Usage, Error: v.Error, Cached: v.Cached},
			asksTools: len(v.Message.ToolCalls) > 0}
	case messages.TypeToolCallRequested:
		var v struct {
			Key     string `json:"key"`
			CallID  string `json:"call_id"`
			Tool    string `json:"tool"`
			Step    int    `json:"step"`
			Purpose string `json:"purpose"`
		}
		err = json.Unmarshal(e.Payload, &v)
		p = &messages.ToolCallRequested{Key: v.Key, CallID: v.CallID, Tool: v.Tool, Step: v.Step, Purpose: v.Purpose}
	case messages.TypeToolCallCompleted:
		var v struct {
			Key   string `json:"key"`
			Error string `json:"error"`
		}
		err = json.Unmarshal(e.Payload, &v)
		p = &messages.ToolCallCompleted{Key: v.Key, Error: v.Error}
	case messages.TypeApprovalRequested:
		var v struct {
			Key string `json:"key"`
		}
		err = json.Unmarshal(e.Payload, &v)
		p = &messages.ApprovalRequested{Key: v.Key}
	case messages.TypeApprovalResolved:
		var v struct {
			Key     string `json:"key"`
			Approve bool   `json:"approve"`
			By      string `json:"by"`
		}
		err = json.Unmarshal(e.Payload, &v)
		p = &messages.ApprovalResolved{Key: v.Key, Approve: v.Approve, By: v.By}
	case messages.TypeTaskCompleted:
		var v struct {
			Steps int            `json:"steps"`
			Usage messages.Usage `json:"usage"`
		}
		err = json.Unmarshal(e.Payload, &v)
		p = &messages.TaskCompleted{Steps: v.Steps, Usage: v.Usage}
	case messages.TypeTaskFailed:
		var v struct {
			Reason string         `json:"reason"`
			Error  string         `json:"error"`
			Steps  int            `json:"steps"`
			Usage  messages.Usage `json:"usage"`
		}
		err = json.Unmarshal(e.Payload, &v)
		p = &messages.TaskFailed{Reason: v.Reason, Error: v.Error, Steps: v.Steps, Usage: v.Usage}
	default:
		return nil, false
	}
	return p, err == nil
}
