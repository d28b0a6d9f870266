package node

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// Calls from outside any session: a tool called directly (an MCP client of the node,
// package mcp) and a task run to its end (MCP's run_task). They go through the same
// paths as the sessions' own: tool calls through the node's LocalEffects, tasks
// through Submit.

// ToolSpecs returns the tools of the node's default agent now, sorted by name: its
// registry's and its tool catalog's (Config.ToolCatalog). The caller must not modify
// the result.
func (n *Node) ToolSpecs() []messages.ToolSpec {
	return n.agent.ToolSpecs()
}

// DisclosureTools returns the names of the default agent's tools that are its
// disclosure strategy's own (load_tools; search_tools and call_tool), none under
// the "all" strategy: they load tools into a session's model requests, which
// means nothing to a caller outside any session (an MCP client of the node), to
// whom ToolSpecs offers every tool.
func (n *Node) DisclosureTools() []string {
	if n.agent.Disclosure == nil {
		return nil
	}
	var out []string
	for _, s := range n.agent.Tools {
		switch s.Name {
		case actors.ToolLoadTools, actors.ToolSearchTools, actors.ToolCallTool:
			out = append(out, s.Name)
		}
	}
	return out
}

// maxDirectKey bounds the idempotency key of a direct call (CallTool), in bytes.
const maxDirectKey = 512

// directCallDigest is the session of the effect key of a direct call by caller
// with idempotency key key: a digest of the caller, the key, the tool and its
// arguments (compacted, when JSON), so that the same key with another tool or
// other arguments is another call, not an answer from memory of the first one
// (as POST /v1/tasks takes another body under a key used before for another
// task), and so is the same key from another caller, whose names for its calls
// are its own. Any string is a key: the caller's own name for its call, or a
// session's effect key (session/seq) that a node calling another's tools passes
// on.
func directCallDigest(caller, key, name, arguments string) string {
	var args bytes.Buffer
	if json.Compact(&args, []byte(arguments)) != nil {
		args.Reset()
		args.WriteString(arguments)
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(caller), []byte(key), []byte(name), args.Bytes()} {
		h.Write(binary.AppendUvarint(nil, uint64(len(part))))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ErrToolFailed wraps the error a tool answered a direct call with (CallTool).
var ErrToolFailed = errors.New("tool call failed")

// CallTool calls one tool of the default agent outside any session, through the
// node's effects (actors.LocalEffects): the tool's timeout, concurrency bound and
// panic recovery apply, and ctx ending cancels the call (the tool's context ends).
// The call's idempotency key is made of key (any string up to 512 bytes), the tool
// and its arguments, under the session "direct:<their digest>" so that it meets no
// session's own key: the same call again with key, while the node remembers the
// answer, is answered without calling the tool again; another call with key is
// another call. An empty key is a new one, "direct-<id>/1". A tool's own error comes back
// wrapping ErrToolFailed, with the tool's text; an unknown tool is an error wrapping
// actors.ErrNoSuchTool. Calls are not recorded: no session owns them. The answer,
// and the error, have the node's secrets redacted (Config.Secrets, Redactor).
//
// The tool sees the call's key, and its name outside the node (tools.Call.Outward,
// what a remote tool, an MCP server's or an A2A agent's, dedupes by), "troupe-"
// and a digest of the key, as a session's effect's: the same when the call is
// made again with key, another for another key. CallTool is CallToolFor with no
// caller: a key is the caller's to keep unique (CallToolFor names the caller).
func (n *Node) CallTool(ctx context.Context, key, name, arguments string) (string, error) {
	return n.CallToolFor(ctx, "", key, name, arguments)
}

// CallToolFor is CallTool for caller, a name of whoever makes the call that no
// other caller has (the token an MCP request is signed in with, else the
// client's session): its key names a call among caller's only, so that two
// callers that name calls alike ("1", "retry-safe") make two calls, neither
// answered from memory of the other's, under two names outside the node, as
// two sessions' effects of one seq are.
func (n *Node) CallToolFor(ctx context.Context, caller, key, name, arguments string) (string, error) {
	known := false
	for _, s := range n.ToolSpecs() {
		if s.Name == name {
			known = true
			break
		}
	}
	if !known {
		return "", fmt.Errorf("%w: %q", actors.ErrNoSuchTool, name)
	}
	ek := messages.EffectKey{SessionID: "direct-" + n.cfg.IDs.NewID(), Seq: 1}
	if key != "" {
		if len(key) > maxDirectKey {
			return "", fmt.Errorf("node: idempotency key %.32q…: %d bytes long, at most %d", key, len(key), maxDirectKey)
		}
		ek = messages.EffectKey{SessionID: "direct:" + directCallDigest(caller, key, name, arguments), Seq: 1}
	}
	// Its name outside the node: a digest of its key (of the caller's key and
	// the caller's name, or of a new ID), in a session's effects' form, rather
	// than the key itself, which names no task and no log.
	req := messages.EffectRequest{V: 1, SessionID: ek.SessionID, Key: ek, Outward: ek.Outward("", 0),
		Tool: &messages.ToolCallRequested{Key: ek.String(), CallID: ek.SessionID, Tool: name, Arguments: arguments}}
	replied := make(chan messages.EffectReply, 1)
	n.local.Perform(req, func(rep messages.EffectReply) { replied <- rep })
	select {
	case rep := <-replied:
		// The answer leaves the node (an MCP client's tools/call): its secrets are
		// redacted, as a session's tool result is in its events.
		if rep.Error != "" {
			return "", fmt.Errorf("%w: %s", ErrToolFailed, n.redactor.String(rep.Error))
		}
		return n.redactor.String(rep.Output), nil
	case <-ctx.Done():
		n.local.Cancel(ek)
		return "", context.Cause(ctx)
	case <-n.stopping:
		return "", errors.New("node: the node is stopping")
	}
}

// RunTask submits a task (Submit) and waits for its end: the task's result, with
// Status completed or failed. ctx ending cancels the task, by its ID, whether it
// runs or waits its turn (not another caller's running in the session), and
// returns ctx's error, except for a named task (Task.TaskID), which goes on: its
// caller, cut off (a timeout, a dropped connection), comes back for it by its name.
// A ctx that ends while the task is handed to its session is followed once the
// session recorded the task (within SubmitTimeout): RunTask returns then.
// A named task submitted again is the one the session has (recorded once): RunTask
// waits for it while it runs, and answers its result at once when it ended. It
// follows the session's live events (Watch), and reads the log when it fell behind
// them.
func (n *Node) RunTask(ctx context.Context, t Task) (messages.TaskResult, error) {
	return n.RunTaskEach(ctx, t, nil)
}

// ErrCallerGone, as the cause of a RunTask or RunTaskEach context (context.Cause),
// says that its caller went away for good without asking to stop the task (an MCP
// client whose session closed): the call returns, and the task goes on, as a
// named task does, or any task after a restart of the node.
var ErrCallerGone = errors.New("node: the caller of the task is gone")

// RunTaskEach is RunTask that also hands each live event of the task to each (when
// not nil), in order, from RunTaskEach's goroutine: a caller's view of the task's
// progress (a model step, a tool call). Events it fell behind on are not handed.
func (n *Node) RunTaskEach(ctx context.Context, t Task, each func(messages.Envelope)) (messages.TaskResult, error) {
	env, err := n.ingress.Admit(t)
	if err != nil {
		return messages.TaskResult{}, err
	}
	live, stop := n.Watch(env.SessionID)
	defer stop()
	task := env.ID
	if ctx.Err() != nil {
		return messages.TaskResult{}, context.Cause(ctx) // gone before the task was handed on
	}
	// The task is handed to its session whatever becomes of ctx meanwhile (submit
	// is bounded by SubmitTimeout): handed on, it may be recorded and run after
	// ctx ended, and RunTaskEach, returning then, left it running with nothing to
	// cancel it. Once it is recorded, ctx's end cancels it below.
	id, err := n.submit(context.WithoutCancel(ctx), env)
	if err != nil {
		return messages.TaskResult{}, err
	}
	res := messages.TaskResult{SessionID: id, TaskID: cmp.Or(t.TaskID, task)}
	if t.TaskID != "" {
		// The session may have had the task before (it records it once): one
		// that ended sends no more events.
		if r, err := n.taskResult(ctx, id, task); err != nil || r.Status == messages.StatusCompleted || r.Status == messages.StatusFailed {
			return r, err
		}
	}
	// The node stopping leaves the task to resume (on the node started again, or
	// on the sessions' next owners): a caller whose context ends as the node stops
	// (its listeners shut, its MCP sessions close) does not cancel it. The select
	// below picks at random among ends ready together: stopping is asked first.
	stopped := func() (messages.TaskResult, error) {
		return res, errors.New("node: the node is stopping; the task resumes when the node serves again")
	}
	cancel := func() (messages.TaskResult, error) {
		if n.closing() {
			return stopped()
		}
		if t.TaskID != "" || errors.Is(context.Cause(ctx), ErrCallerGone) {
			return res, context.Cause(ctx) // a named task is not its caller's alone
		}
		cctx, done := context.WithTimeout(context.Background(), n.cfg.SubmitTimeout)
		defer done()
		// This task by its ID: not another caller's running in the session
		// while this one waits its turn behind it.
		if err := n.cancelSubmitted(cctx, id, task, "the caller of run_task went away"); err != nil {
			n.cfg.Logger.Warn("cancel a task whose caller went away", "session", id, "err", err)
		}
		return res, context.Cause(ctx)
	}
	for live != nil {
		select {
		case <-ctx.Done():
			return cancel()
		case <-n.stopping:
			return stopped()
		case e, ok := <-live:
			if !ok {
				live = nil // fell behind: read the log
				break
			}
			if e.CorrelationID != task {
				continue
			}
			if each != nil {
				each(e)
			}
			switch e.Type {
			case messages.TypeTaskCompleted, messages.TypeTaskFailed:
				return n.taskResult(ctx, id, task)
			}
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := n.taskResult(ctx, id, task)
		if err != nil || r.Status != messages.StatusRunning && r.Status != "" { // "": not read yet
			return r, err
		}
		select {
		case <-ctx.Done():
			return cancel()
		case <-n.stopping:
			return stopped()
		case <-tick.C:
		}
	}
}

// TaskResult returns the result of task (its message ID: Task.ID) of session
// sessionID, its status running while it runs; known is false while the session
// has no such task.
func (n *Node) TaskResult(ctx context.Context, sessionID, task string) (res messages.TaskResult, known bool, err error) {
	res, err = n.taskResult(ctx, sessionID, task)
	return res, res.Status != "", err
}

// taskResult folds a session's log into the status of one of its tasks: empty
// while the session has no such task.
func (n *Node) taskResult(ctx context.Context, sessionID, task string) (messages.TaskResult, error) {
	res := messages.TaskResult{SessionID: sessionID}
	_, err := n.folds.with(ctx, n.log, sessionID, func(st *actors.SessionState) error {
		if r, ok := st.TaskResult(task); ok {
			res = r
			res.SessionID = sessionID
		}
		return nil
	})
	if errors.Is(err, ErrUnknownSession) {
		return res, nil // no such task yet
	}
	return res, err
}

// Redact returns s with the node's secrets (Config.Secrets, and those its
// Redactor learned) replaced by [REDACTED], as in its events: for what leaves the
// node outside a session (an MCP client's resources/read and prompts/get).
func (n *Node) Redact(s string) string { return n.redactor.String(s) }
