package mcp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// taskFollower is a Node that hands run_task the events of its task as they
// happen (*node.Node does); the server makes them progress and log notifications.
type taskFollower interface {
	RunTaskEach(ctx context.Context, t node.Task, each func(messages.Envelope)) (messages.TaskResult, error)
}

var _ taskFollower = (*node.Node)(nil)

// LoggerName is the logger of the server's log notifications.
const LoggerName = "troupe"

// follower tells the client of one tools/call how it goes: log notifications (at
// the level the client set with logging/setLevel; none before it sets one) and,
// when the request carries a progressToken, progress notifications whose progress
// grows by one at each: the start, each task event (a model step, a tool call),
// each ProgressInterval it runs on, and the end, which also gives the total.
//
// Every request also gets a ping each ProgressInterval it runs on (before, only
// those without a progressToken did), related to the call (over Streamable HTTP it travels on the call's
// response stream): a client reading that stream with a read timeout (the Python
// SDK's default is 300 s) would otherwise see nothing on it until the answer, and
// give up on a long run_task.
//
// The heartbeat also finds out when the call's session has closed (its client
// went silent for the session timeout, or the node closes it): the SDK's
// Close then waits for the calls under way to return, but does not cancel them,
// so a call whose task runs on (one waiting for an approval, with no timeout)
// held its goroutines, its session and the SDK's record of it for as long as
// the task ran, for every client that went away. The call's context (ctx, from
// follow) is cancelled then, with errSessionClosed.
type follower struct {
	ss    *sdk.ServerSession
	token any
	what  string
	start time.Time
	stop  chan struct{}
	ended sync.WaitGroup
	// pinging is cancelled at the end: a ping still waiting for its answer ends.
	pinging context.Context
	endPing context.CancelFunc
	// closed cancels the call's context once its session has closed.
	closed context.CancelCauseFunc
	// forget takes the call off its session's calls under way (Server.calls).
	forget func()

	mu       sync.Mutex
	progress float64
}

// errSessionClosed is the cause of a call's context cancelled because its
// session closed: the call ends, its task (run_task's) goes on.
var errSessionClosed = fmt.Errorf("mcp: the call's session has closed: %w", node.ErrCallerGone)

// errSessionDeleted is the cause of a call's context cancelled because its client
// ended its session (DELETE): the client is done with its calls, as if it had
// cancelled each, so a run_task's task is cancelled (not a named one: its caller
// comes back for it by its name; node.RunTask). The Go SDK's client, whose call's
// context ends, retires the call and sends its notifications/cancelled from
// another goroutine: a program that then closes its session (as the SDK's examples
// do, deferred) closes the connection first, and the notification never left.
var errSessionDeleted = errors.New("mcp: the client ended the call's session (DELETE)")

// follow starts to follow a call of what (e.g. "tool calculator"); call end with
// its outcome when it returns. The call runs under the context it returns: ctx,
// cancelled with errSessionClosed once the session has closed.
func (s *Server) follow(ctx context.Context, ss *sdk.ServerSession, params *sdk.CallToolParamsRaw, what string) (*follower, context.Context) {
	f := &follower{ss: ss, what: what, start: time.Now(), stop: make(chan struct{}), forget: func() {}}
	ctx, f.closed = context.WithCancelCause(ctx)
	if ss != nil && ss.ID() != "" {
		f.forget = s.addCall(ss.ID(), f)
	}
	f.pinging, f.endPing = context.WithCancel(ctx)
	if params != nil {
		f.token = params.GetProgressToken()
	}
	f.tell(ctx, "debug", what+": started", false)
	f.ended.Add(1)
	go func() {
		defer f.ended.Done()
		tick := time.NewTicker(s.opts.ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				f.tell(ctx, "debug", fmt.Sprintf("%s: running for %s", what, time.Since(f.start).Round(time.Millisecond)), false)
				if f.ss == nil {
					continue
				}
				// The answer does not matter (a client that does not answer
				// still got the bytes); waiting for it bounds the pings in
				// flight to one. A request with a progressToken is pinged too,
				// for the one answer that does: a session that has closed.
				pctx, cancel := context.WithTimeout(f.pinging, s.opts.ProgressInterval)
				err := f.ss.Ping(pctx, nil)
				cancel()
				if errors.Is(err, sdk.ErrConnectionClosed) {
					f.closed(errSessionClosed)
					return
				}
			}
		}
	}()
	return f, ctx
}

// event tells of one event of a run_task's task.
func (f *follower) event(ctx context.Context, e messages.Envelope) {
	var text string
	switch e.Type {
	case messages.TypeModelRequested:
		text = "the model is asked for the next step"
	case messages.TypeModelResponded:
		text = "the model answered"
		if p, err := e.Decode(); err == nil {
			if r, ok := p.(*messages.ModelResponded); ok && r.Error != "" {
				text = "the model failed"
			}
		}
	case messages.TypeToolCallRequested, messages.TypeToolCallCompleted:
		tool := "?"
		if p, err := e.Decode(); err == nil {
			switch r := p.(type) {
			case *messages.ToolCallRequested:
				tool = r.Tool
			case *messages.ToolCallCompleted:
				tool = r.Tool
				if r.Error != "" {
					text = "tool " + tool + " failed"
				}
			}
		}
		if text == "" && e.Type == messages.TypeToolCallRequested {
			text = "calling tool " + tool
		} else if text == "" {
			text = "tool " + tool + " answered"
		}
	default:
		text = string(e.Type)
	}
	f.tell(ctx, "info", fmt.Sprintf("%s: %s (session %s, event %d)", f.what, text, e.SessionID, e.Seq), false)
}

// endCalls cancels the calls under way of session id, whose client ended it
// (errSessionDeleted).
func (s *Server) endCalls(id string) {
	s.callsMu.Lock()
	defer s.callsMu.Unlock()
	for f := range s.calls[id] {
		f.closed(errSessionDeleted)
	}
}

// addCall counts f as a call under way of session id, which endCalls cancels and
// which keeps the session from being closed for the cap (busy), until the returned
// func forgets it.
func (s *Server) addCall(id string, f *follower) (forget func()) {
	s.callsMu.Lock()
	if s.calls[id] == nil {
		s.calls[id] = map[*follower]bool{}
	}
	s.calls[id][f] = true
	s.callsMu.Unlock()
	return func() {
		s.callsMu.Lock()
		defer s.callsMu.Unlock()
		if delete(s.calls[id], f); len(s.calls[id]) == 0 {
			delete(s.calls, id)
		}
	}
}

// awaitCut holds a call whose answer is withheld because the node stops (the node
// that serves next answers its resumed stream) until its stream is cut (ctx ends
// with the connection) or its client deletes the session (endCalls), and returns
// why. Until then it is a call under way of the session. Waiting for ctx alone, a
// DELETE of the session hung, and with it the HTTP server's shutdown: the SDK's
// close of a session waits for the calls in it, and no context of theirs ends.
func (s *Server) awaitCut(ctx context.Context, ss *sdk.ServerSession) error {
	f := &follower{}
	ctx, f.closed = context.WithCancelCause(ctx)
	defer f.closed(nil)
	if ss != nil && ss.ID() != "" {
		defer s.addCall(ss.ID(), f)()
	}
	<-ctx.Done()
	return context.Cause(ctx)
}

// end tells the call's outcome and stops the heartbeat.
func (f *follower) end(ctx context.Context, err error) {
	f.forget()
	close(f.stop)
	f.endPing()
	f.ended.Wait()
	took := time.Since(f.start).Round(time.Millisecond)
	if err != nil {
		f.tell(ctx, "warning", fmt.Sprintf("%s: failed after %s: %v", f.what, took, err), true)
		return
	}
	f.tell(ctx, "debug", fmt.Sprintf("%s: done in %s", f.what, took), true)
}

// tell sends one log notification at level and, with a token, one progress
// notification (with the total when last). Failures to send are dropped: the
// client may be gone, and the call's answer tells that anyway.
func (f *follower) tell(ctx context.Context, level sdk.LoggingLevel, text string, last bool) {
	if f.ss == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.ss.Log(ctx, &sdk.LoggingMessageParams{Level: level, Logger: LoggerName, Data: text})
	if f.token == nil {
		return
	}
	p := &sdk.ProgressNotificationParams{ProgressToken: f.token, Progress: f.progress, Message: text}
	if last {
		p.Total = f.progress
	}
	_ = f.ss.NotifyProgress(ctx, p)
	f.progress++
}
