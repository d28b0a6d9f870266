package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/messages"
)

// run_task calls that outlive their stream. A run_task's response is a stream of
// server-sent events whose IDs the client keeps (the stream starts with a priming
// event that has one), and a client whose stream is cut before the answer (a
// proxy dropped the connection, the node restarted) sends GET with the last ID it
// saw (Last-Event-ID) to get the rest: the Python, TypeScript and Go SDKs all do,
// twice, waiting the retry the server names (ServerOptions.ReconnectDelay) before
// each attempt. While the process lives, the SDK's event store (in memory) gives
// the rest. A call is also recorded in its session's stream of the log
// (messages.MCPCallStarted: its JSON-RPC ID, its stream, the hash of its
// arguments, and the session of its task, chosen before the task starts), so that
// after a restart, or on another node, a GET that resumes its stream waits for the
// task and answers with its result, and a call sent again in the same session with
// the same ID and arguments answers with the result of the task the first one
// started instead of running it again. When the node stops (CloseStreams), the
// streams of running calls are closed with the retry, so that their clients come
// back to the node that serves next rather than get an error. The calls of
// task_result are recorded alike (its resumed stream answers once the task it
// waits for ends), and so are those of the other tools, whose resumed stream
// answers a JSON-RPC error (codeCallCut): the node cannot know whether a tool cut
// off by a crash did its work. A call of another tool that a stopping node cuts
// off answers that error at once.

// callHeader carries, from Handler to run_task's handler, the token of the call
// (pendingCall) a request holds; a client's own is removed.
const callHeader = "Troupe-Mcp-Call"

// pendingCall is what Handler learns of a tools/call before the SDK runs it: its
// JSON-RPC ID, and the ID of the stream the SDK opens for its answer.
type pendingCall struct {
	rpcID string

	mu     sync.Mutex
	stream string
}

func (c *pendingCall) streamID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stream
}

type pendingKey struct{}

// holdCall notes a POST that is a tools/call (one JSON-RPC request, not a
// batch) as a pendingCall, in r's context and under callHeader, and returns the
// request to pass on and the function that forgets the call once it is served.
func (s *Server) holdCall(r *http.Request) (*http.Request, func()) {
	r.Header.Del(callHeader)
	if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") == "" {
		return r, func() {}
	}
	// Read as the SDK reads it (jsonrpc.DecodeMessage: case-sensitive keys, the
	// first of a repeated one), so that a call the SDK serves is held, under the
	// ID it answers with.
	body := peekBody(r)
	if !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		return r, func() {}
	}
	msg, err := jsonrpc.DecodeMessage(body)
	req, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok || req.Method != "tools/call" || !req.IsCall() {
		return r, func() {}
	}
	id, ok := rpcIDText(req.ID)
	if !ok {
		return r, func() {}
	}
	token := rand.Text()
	c := &pendingCall{rpcID: id}
	s.pending.Store(token, c)
	r = r.WithContext(context.WithValue(r.Context(), pendingKey{}, c))
	r.Header.Set(callHeader, token)
	return r, func() { s.pending.Delete(token) }
}

// rpcIDText is the JSON text of a request's ID as the SDK read it: an integer or
// a string (with no HTML escapes, as clients write it).
func rpcIDText(id jsonrpc.ID) (string, bool) {
	switch v := id.Raw().(type) {
	case int64:
		return strconv.FormatInt(v, 10), true
	case string:
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if enc.Encode(v) != nil {
			return "", false
		}
		return strings.TrimSuffix(b.String(), "\n"), true
	}
	return "", false
}

// takeCall returns the pendingCall of a tools/call request, if Handler held one.
func (s *Server) takeCall(req *sdk.CallToolRequest) *pendingCall {
	if req.Extra == nil || req.Extra.Header == nil {
		return nil
	}
	token := req.Extra.Header.Get(callHeader)
	if token == "" {
		return nil
	}
	c, ok := s.pending.LoadAndDelete(token)
	if !ok {
		return nil
	}
	return c.(*pendingCall)
}

// newTaskSession names the session of a new task that run_task starts.
func newTaskSession() string { return "mcp-" + strings.ToLower(rand.Text()) }

// newTaskID is the ID of the task of a new run_task call (node.Task.ID).
func newTaskID() string { return "mcp-task-" + strings.ToLower(rand.Text()) }

// resumeCall serves a GET that resumes (Last-Event-ID) the stream of a run_task
// call in session id that this process does not hold (it started on another, or
// before a restart): it answers with the result of the call's task once it ends,
// as the event after the client's last, and reports false when the stream is no
// such call's (the SDK answers it then).
func (s *Server) resumeCall(w http.ResponseWriter, r *http.Request, id string) bool {
	last := r.Header.Get("Last-Event-ID")
	streamID, idx, ok := parseEventID(last)
	if r.Method != http.MethodGet || !ok || s.events.has(r.Context(), id, streamID, idx) {
		return false
	}
	if _, ok := s.n.(taskStatus); !ok {
		return false
	}
	state, err := s.book.state(r.Context(), id)
	if err != nil {
		s.opts.Logger.Warn("mcp server: session state not read", "session", id, "err", err)
		return false
	}
	call, ok := state.call("", streamID)
	if !ok || streamID == "" {
		return false
	}
	s.opts.Logger.Info("mcp server: a cut call's stream resumed", "session", id, "stream", streamID, "task_session", call.TaskSession)
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	write := func(b string) bool {
		if _, err := io.WriteString(w, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(": resumed\n\n") {
		return true
	}
	ctx := r.Context()
	keep := time.NewTicker(s.opts.ProgressInterval)
	defer keep.Stop()
	poll := time.NewTicker(taskPoll)
	defer poll.Stop()
	// A task not in the log yet may be on its way (StartGrace).
	giveUp := time.Now().Add(s.opts.StartGrace)
	next := idx + 1 // the index of the stream's next event
	progress := s.resumedProgress(ctx, call)
	tellProgress := func() bool {
		if call.ProgressToken == "" || call.TaskSession == "" {
			return write(": the task runs\n\n")
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress", "params": map[string]any{
			"progressToken": json.RawMessage(call.ProgressToken), "progress": progress,
			"message": fmt.Sprintf("the task runs (session %s; the call's stream resumed)", call.TaskSession)}})
		progress++
		next++
		return write("id: " + streamID + "_" + strconv.Itoa(next-1) + "\ndata: " + string(b) + "\n\n")
	}
	if call.ProgressToken != "" && !tellProgress() {
		return true
	}
	for {
		if call.TaskSession == "" {
			// A call of another tool: its outcome died with the process that
			// ran it.
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(call.RequestID),
				"error": map[string]any{"code": codeCallCut, "message": callCutMessage}})
			write("id: " + streamID + "_" + strconv.Itoa(next) + "\ndata: " + string(b) + "\n\n")
			return true
		}
		res, known, err := s.callStatus(ctx, call.MCPCallStarted)
		var result *sdk.CallToolResult
		switch {
		case err != nil && ctx.Err() != nil:
			return true
		case err != nil:
			result = errorResult(fmt.Sprintf("%s: the task of session %s: %v", RunTask, call.TaskSession, err))
		case !known && !time.Now().Before(giveUp):
			result = errorResult(fmt.Sprintf("%s: the task of this call (session %s) never started (not in the log %s after the stream resumed); send the call again",
				RunTask, call.TaskSession, s.opts.StartGrace))
		case !known:
			// Not yet: polled again.
		case res.Status != messages.StatusRunning:
			result = taskAnswer(res)
		}
		if result != nil {
			b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(call.RequestID), "result": result})
			if err != nil {
				b, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(call.RequestID),
					"error": map[string]any{"code": -32603, "message": "the result could not be encoded: " + err.Error()}})
			}
			write("id: " + streamID + "_" + strconv.Itoa(next) + "\ndata: " + string(b) + "\n\n")
			return true
		}
		select {
		case <-ctx.Done():
			return true
		case <-s.closing:
			// The client resumes again, from the node that serves next: the
			// stream ends with an event ID (the last it has), or the Go SDK
			// takes it for the call's end.
			write("id: " + streamID + "_" + strconv.Itoa(next-1) + "\nretry: " + strconv.FormatInt(s.opts.ReconnectDelay.Milliseconds(), 10) + "\n\n")
			return true
		case <-keep.C:
			if !tellProgress() {
				return true
			}
		case <-poll.C:
		}
	}
}

// resumedProgress is the progress of the first notification on the resumed
// stream of call: above any its earlier streams sent, as the spec asks of a
// request's progress (it MUST increase). A follower sends one at the start, one
// per event of the task, one per ProgressInterval and (not yet) one at the end,
// counting from 0; a resumed stream one at its start and one per interval. So
// 2 + the task's session's events + the intervals since the call was recorded
// (not rounded: a stream resumed again starts above the last one's) is above
// them all.
func (s *Server) resumedProgress(ctx context.Context, call callRecord) float64 {
	if call.ProgressToken == "" {
		return 0
	}
	events := 0
	if sl, ok := s.n.(sessionLog); ok {
		if es, err := sl.Log().Read(ctx, call.TaskSession, 1); err == nil {
			events = len(es)
		}
	}
	elapsed := time.Since(time.UnixMicro(call.ts))
	return 2 + float64(events) + max(elapsed.Seconds(), 0)/s.opts.ProgressInterval.Seconds()
}

// progressToken is the JSON text of a call's progressToken; "" for none.
func progressToken(p *sdk.CallToolParamsRaw) string {
	if p == nil || p.GetProgressToken() == nil {
		return ""
	}
	b, err := json.Marshal(p.GetProgressToken())
	if err != nil {
		return ""
	}
	return string(b)
}

// codeCallCut is the JSON-RPC error code (a server error, of the range
// JSON-RPC 2.0 leaves to implementations) of a tools/call cut off by a stop or
// restart of the node before it answered: callCutMessage.
const codeCallCut = -32000

const callCutMessage = "the call was cut off before it answered: the node that ran it stopped or restarted, " +
	"and whether the tool did its work is not known; call the tool again (" + RunTask + " and " + TaskResult +
	" calls outlive a restart; other tools' calls do not)"

// recordCall records a tools/call of tool (not run_task, which records its own)
// in its session's stream, so that a client that resumes its stream after a
// restart gets an answer: task_result's (taskSession, the session it waits on)
// once the task ends, another tool's a JSON-RPC error (codeCallCut). A call not
// recorded (the log failed) is served anyway, and logged.
func (s *Server) recordCall(ctx context.Context, req *sdk.CallToolRequest, tool, raw, taskSession string) {
	c := s.takeCall(req)
	if c == nil || req.Session == nil || req.Session.ID() == "" {
		return
	}
	rec := &messages.MCPCallStarted{RequestID: c.rpcID, Stream: c.streamID(), ArgsHash: argsHash(tool + "\x00" + raw), TaskSession: taskSession,
		ProgressToken: progressToken(req.Params)}
	if rec.Stream == "" {
		return // a JSON answer, which no one resumes
	}
	if err := s.book.record(ctx, req.Session.ID(), func(*sessionState) (messages.Payload, error) { return rec, nil }); err != nil {
		s.opts.Logger.Warn("mcp server: tool call not recorded; a restart cuts it off without an answer", "session", req.Session.ID(), "tool", tool, "err", err)
	}
}

// taskAnswer is run_task's answer for a task that ended (res.Status completed or
// failed).
func taskAnswer(res messages.TaskResult) *sdk.CallToolResult {
	meta := taskMeta(res)
	if res.Status != messages.StatusCompleted {
		r := errorResult(fmt.Sprintf("the task failed (session %s, reason %s): %s", res.SessionID, res.Reason, res.Error))
		r.Meta = meta
		return r
	}
	return &sdk.CallToolResult{Meta: meta, Content: []sdk.Content{&sdk.TextContent{Text: res.Output}}}
}

// parseEventID parses an SSE event ID of the SDK's, <stream>_<index>.
func parseEventID(id string) (stream string, idx int, ok bool) {
	stream, n, found := strings.Cut(id, "_")
	if !found || strings.Contains(n, "_") {
		return "", 0, false
	}
	idx, err := strconv.Atoi(n)
	if err != nil || idx < 0 {
		return "", 0, false
	}
	return stream, idx, true
}

// taskMeta is the _meta of run_task's answer for res: its session
// (SessionIDMeta) and its task (TaskIDMeta), those it names.
func taskMeta(res messages.TaskResult) sdk.Meta {
	meta := sdk.Meta{}
	if res.SessionID != "" {
		meta[SessionIDMeta] = res.SessionID
	}
	if res.TaskID != "" {
		meta[TaskIDMeta] = res.TaskID
	}
	return meta
}
