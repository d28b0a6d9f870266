package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// TaskResult is the name of the tool that answers with the result of a task that
// run_task started: a client whose run_task call was cut off (its connection
// dropped, or the node restarted; the task goes on in the node, whose log keeps
// it) follows the task to its end, or sees how it stands, by its session's ID
// (run_task's _meta SessionIDMeta, also named by its progress and log messages).
const TaskResult = "task_result"

// StatusMeta is the _meta key of task_result's result that gives the task's
// status: "running", "completed" or "failed".
const StatusMeta = "troupe/status"

// taskStatus is a Node that tells how a session's latest task stands (*node.Node
// does, from its log); the server offers task_result with it.
type taskStatus interface {
	// Status folds a session's events into its status; ok is false for a
	// session the node never had.
	Status(ctx context.Context, id string) (node.SessionStatus, bool, error)
}

var _ taskStatus = (*node.Node)(nil)

// taskResults is implemented by a node that tells one task's result by its ID.
type taskResults interface {
	// TaskResult returns the result of task (its ID, node.Task.ID) of session
	// id; known is false while the session has no such task.
	TaskResult(ctx context.Context, id, task string) (res messages.TaskResult, known bool, err error)
}

var _ taskResults = (*node.Node)(nil)

// callStatus is the status of the task a recorded run_task call started: that
// task's own (TaskID), or, for a record kept without it, its session's latest.
func (s *Server) callStatus(ctx context.Context, c messages.MCPCallStarted) (node.SessionStatus, bool, error) {
	if tr, ok := s.n.(taskResults); ok && c.TaskID != "" {
		return tr.TaskResult(ctx, c.TaskSession, c.TaskID)
	}
	if st, ok := s.n.(taskStatus); ok {
		return st.Status(ctx, c.TaskSession)
	}
	return node.SessionStatus{}, false, errors.New("this node cannot tell a task's status")
}

// taskPoll is how often task_result reads a running task's status.
const taskPoll = 100 * time.Millisecond

// addTaskResult offers task_result when the node can tell a task's status.
func (s *Server) addTaskResult() {
	st, ok := s.n.(taskStatus)
	if !ok {
		return
	}
	s.srv.AddTool(&sdk.Tool{Name: TaskResult, Title: "The result of a Troupe task",
		Description: "Answer with the result of the latest task of a session that run_task started (session_id: run_task's _meta " +
			SessionIDMeta + ", also named by its progress messages), such as a run_task whose answer was lost when the connection " +
			"dropped or the node restarted: the task's final output once it ends (a failed task is an error with the reason). " +
			"It waits for a running task unless wait is false; its _meta " + StatusMeta + " is running, completed or failed.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"session_id":{"type":"string","description":"the task's session"},` +
			`"wait":{"type":"boolean","description":"wait for a running task to end (the default), or answer at once"}},` +
			`"required":["session_id"],"additionalProperties":false}`),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return s.taskResult(ctx, st, req)
	})
}

// taskResult is task_result's handler.
func (s *Server) taskResult(ctx context.Context, st taskStatus, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	var args struct {
		SessionID string `json:"session_id"`
		Wait      *bool  `json:"wait"`
	}
	raw := "{}"
	if req.Params != nil && len(req.Params.Arguments) > 0 {
		raw = string(req.Params.Arguments)
	}
	if err := decodeStrict(TaskResult, raw, &args, `{"session_id":"s-..."}`); err != nil {
		return errorResult(err.Error()), nil
	}
	if args.SessionID == "" {
		return errorResult(TaskResult + `: session_id is empty; give the session of a task run_task started, e.g. {"session_id":"s-..."}`), nil
	}
	wait := args.Wait == nil || *args.Wait
	s.recordCall(ctx, req, TaskResult, raw, args.SessionID)
	defer s.closeOnStop(req)()
	f, ctx := s.follow(ctx, req.Session, req.Params, TaskResult)
	res, err := s.awaitTask(ctx, func(ctx context.Context) (node.SessionStatus, bool, error) { return st.Status(ctx, args.SessionID) },
		args.SessionID, wait)
	if err != nil && ctx.Err() == nil && isClosed(s.closing) && req.Extra != nil && req.Extra.CloseSSEStream != nil {
		// The node stops: its stream closes with the retry, and the client
		// resumes it from the node that serves next, which answers (the call
		// is recorded).
		f.end(ctx, nil)
		return nil, s.awaitCut(ctx, req.Session)
	}
	outcome := err
	if err == nil && res.Status == messages.StatusFailed {
		outcome = fmt.Errorf("the task failed (reason %s): %s", res.Reason, res.Error)
	}
	f.end(ctx, outcome)
	meta := sdk.Meta{SessionIDMeta: args.SessionID}
	if res.TaskID != "" {
		meta[TaskIDMeta] = res.TaskID
	}
	if res.Status != "" {
		meta[StatusMeta] = string(res.Status)
	}
	var r *sdk.CallToolResult
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil:
		r = errorResult(fmt.Sprintf("%s: %v", TaskResult, err))
	case res.Status == messages.StatusCompleted:
		r = &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: res.Output}}}
	case res.Status == messages.StatusFailed:
		r = errorResult(fmt.Sprintf("the task failed (session %s, reason %s): %s", args.SessionID, res.Reason, res.Error))
	default:
		r = &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("the task of session %s is still running", args.SessionID)}}}
	}
	r.Meta = meta
	return r, nil
}

// awaitTask returns the status of session id's latest task: at once, or (wait)
// once the task has ended. An unknown session is an error.
func (s *Server) awaitTask(ctx context.Context, status func(context.Context) (node.SessionStatus, bool, error), id string, wait bool) (node.SessionStatus, error) {
	tick := time.NewTicker(taskPoll)
	defer tick.Stop()
	for {
		res, ok, err := status(ctx)
		switch {
		case err != nil:
			return res, err
		case !ok:
			return res, fmt.Errorf("no session %q on this node", id)
		case !wait || res.Status != messages.StatusRunning:
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, context.Cause(ctx)
		case <-s.closing:
			return res, fmt.Errorf("the node is stopping; the task goes on when it serves again: call %s again then", TaskResult)
		case <-tick.C:
		}
	}
}
