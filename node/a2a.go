package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// A2A. With Config.A2A set, the node serves its agents over the Agent2Agent
// protocol (A2A 0.3 and 1.0's method names and shapes, JSON-RPC binding; package a2a):
//
//	GET  /.well-known/agent-card.json          the node's card: its agents are skills,
//	                                           its url the default agent's endpoint (also
//	                                           at A2A 0.2's /.well-known/agent.json)
//	POST /a2a                                  JSON-RPC: message/send, message/stream,
//	                                           tasks/get, tasks/cancel, tasks/resubscribe,
//	                                           tasks/pushNotificationConfig/{set,get,list,delete}
//	GET  /a2a/{agent}/.well-known/agent-card.json, POST /a2a/{agent}
//	                                           each named agent's (with an agents file;
//	                                           its card also at .../agent.json)
//
// An A2A contextId is a Troupe session ID (a message without one gets one derived
// from its messageId), an A2A task one Troupe task of the session, submitted with
// an envelope ID derived from the context and the messageId (a2a.EnvelopeID): a message/send sent
// again is recorded once. A pending approval is the task's input-required state; a
// message sent to the task answers it ("approve" or "reject"). The model's tokens
// stream (WatchDeltas) into the task's answer artifact. A task's ID names its
// session and submission (a2a.TaskIDFor), so a2a.TaskStore answers for it from the
// session's events after a restart, and tasks/resubscribe follows it from them on
// any node (a2a.Dedupe.OnResubscribeToTask). Its push-notification configs are events of
// their own stream in the log (a2a.PushStore: a2a/push/<taskID>), without their
// secrets.

// A2AConfig configures the A2A server (a2a.ServerConfig's fields).
type A2AConfig struct {
	// PublicURL is the base URL of the cards ("https://host"); empty: each
	// request's Host.
	PublicURL string `json:"public_url"`
	// PushAllow lists the private hosts and prefixes a push-notification webhook
	// may target (as tools.http_fetch.allow).
	PushAllow []string `json:"push_allow"`
}

// validate checks the public URL and the push allow list (nil: nothing to check).
func (c *A2AConfig) validate() error {
	if c == nil {
		return nil
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("node: a2a.public_url %q: want an http or https URL such as https://agents.example.com", c.PublicURL)
		}
	}
	if _, err := tools.NewAddressPolicy(c.PushAllow); err != nil {
		return fmt.Errorf("node: a2a.push_allow: %w", err)
	}
	return nil
}

// a2aRoutes are the A2A routes of the node's route table (routes.go), when the
// node serves A2A: its server is built once, on the first call.
func (n *Node) a2aRoutes() []Route {
	if n.cfg.A2A == nil {
		return nil
	}
	n.a2aOnce.Do(func() {
		srv, err := a2a.NewServer(a2aBackend{n}, a2a.ServerConfig{PublicURL: n.cfg.A2A.PublicURL, PushAllow: n.cfg.A2A.PushAllow,
			PushLog: n.log, PushAlone: n.ownLog, PushKey: n.keys.get, MaxBody: maxBody, WriteTimeout: n.cfg.HTTP.WriteTimeout, Name: "troupe", Bearer: n.cfg.HTTP.Auth.Enabled(), Stopping: n.streamsDone, Logger: n.cfg.Logger}, n.a2aAgents())
		if err != nil {
			n.cfg.Logger.Error("a2a: not served", "err", err)
			return
		}
		n.a2aServer = srv
		// The push configs of ended tasks are pruned while the node lives.
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-n.stopping
			cancel()
		}()
		go srv.PrunePushes(ctx)
		// The tasks with push configs that a restart cut post their updates on.
		go srv.ResumePushes(ctx)
	})
	if n.a2aServer == nil {
		return nil
	}
	var out []Route
	for _, r := range n.a2aServer.Routes() {
		method, path, _ := strings.Cut(r.Pattern, " ")
		doc := RouteDoc{Summary: "A2A JSON-RPC (0.3 and 1.0): message/send, message/stream (SSE), tasks/get, tasks/cancel, tasks/resubscribe, tasks/pushNotificationConfig/*, and 1.0's SendMessage, SendStreamingMessage, GetTask, CancelTask, SubscribeToTask, *TaskPushNotificationConfig*"}
		if method == http.MethodGet {
			doc = RouteDoc{Summary: "The A2A agent card (open without a token)"}
			if strings.HasSuffix(path, a2a.LegacyCardPath) {
				doc = RouteDoc{Summary: "The A2A agent card at A2A 0.2's path (open without a token)"}
			}
		}
		// The A2A handler bounds its body itself (a2a.ServerConfig.MaxBody).
		out = append(out, Route{Method: method, Path: path, Handler: r.Handler, MaxBody: maxBody, Doc: doc})
	}
	return out
}

// a2aAgents describes the node's agents for their cards: the default agent first.
func (n *Node) a2aAgents() []a2a.AgentInfo {
	var all []string
	for _, s := range n.ToolSpecs() {
		all = append(all, s.Name)
	}
	out := []a2a.AgentInfo{{Name: "default", Description: "The node's default agent.", Tools: all}}
	for _, a := range n.cfg.Agents {
		t := a.Tools
		if t == nil {
			t = all
		}
		out = append(out, a2a.AgentInfo{Name: a.Name, Description: a.Description, Tools: t})
	}
	return out
}

// a2aBackend is the node as package a2a sees it.
type a2aBackend struct{ n *Node }

var _ a2a.TaskChecker = a2aBackend{}

func (b a2aBackend) SubmitTask(ctx context.Context, s a2a.Submission) error {
	env, err := b.n.ingress.admit(a2aTask(s), Arrival{Source: SourceHTTP, MessageID: s.EnvelopeID}, nil)
	if err != nil {
		return err
	}
	// The session keeps a task.submitted's causation: the client's messageId,
	// which the task rebuilt from the events shows (after a restart).
	env.CausationID = a2a.MessageCause(s.MessageID)
	_, err = b.n.submit(ctx, env)
	return err
}

// a2aTask is the Task of an A2A submission.
func a2aTask(s a2a.Submission) Task {
	agent := s.Agent
	if agent == "default" {
		agent = ""
	}
	return Task{Input: s.Input, SessionID: s.SessionID, Agent: agent,
		MaxTokens: s.Budget.MaxTokens, MaxCostUSD: s.Budget.MaxCostUSD, MaxSteps: s.Budget.MaxSteps, DeadlineMS: s.Budget.DeadlineMS}
}

// CheckTask implements a2a.TaskChecker: what SubmitTask's admission refuses.
func (b a2aBackend) CheckTask(s a2a.Submission) error {
	t := a2aTask(s)
	if err := b.n.ingress.checkTask(t); err != nil {
		return err
	}
	return b.n.ingress.checkSessionShape(t.SessionID)
}

var _ a2a.EventFinder = a2aBackend{}

// FindEvent implements a2a.EventFinder: by its ID where the log finds events
// so, else reading the session a page at a time (recordedEvent).
func (b a2aBackend) FindEvent(ctx context.Context, session, id string) (messages.Envelope, bool, error) {
	return b.n.recordedEvent(ctx, session, id)
}

func (b a2aBackend) Events(ctx context.Context, sessionID string, from uint64) ([]messages.Envelope, error) {
	return b.n.log.Read(ctx, sessionID, from)
}

var _ a2a.RunningTasks = a2aBackend{}

// RunningTask implements a2a.RunningTasks: the task the session's kept fold
// (statusFolds) says it runs, folding only the events since the node's last read
// of it, where tasks/cancel read the session's whole history. The fold activates
// the first task submitted that has not ended as the one before it ends, as
// a2a.RunningTask tells from the events.
func (b a2aBackend) RunningTask(ctx context.Context, session string) (string, error) {
	var running string
	_, err := b.n.folds.with(ctx, b.n.log, session, func(st *actors.SessionState) error {
		running = st.Active()
		return nil
	})
	if errors.Is(err, ErrUnknownSession) {
		return "", nil
	}
	return running, err
}

var _ a2a.RunningLister = a2aBackend{}

// RunningSessions implements a2a.RunningLister: the sessions of the log running a
// task now, in one listing.
func (b a2aBackend) RunningSessions(ctx context.Context) ([]string, error) {
	infos, err := b.n.log.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true})
	if err != nil {
		return nil, err
	}
	out := make([]string, len(infos))
	for i, info := range infos {
		out[i] = info.ID
	}
	return out, nil
}

func (b a2aBackend) Watch(sessionID string) (<-chan messages.Envelope, func()) {
	return b.n.WatchDeltas(sessionID)
}

func (b a2aBackend) Cancel(ctx context.Context, sessionID, reason string) error {
	return b.n.Cancel(ctx, sessionID, reason)
}

var _ a2a.TaskCanceler = a2aBackend{}

// CancelTask implements a2a.TaskCanceler: the task by its ID, running or waiting
// its turn, never the task the session runs next. It answers once the task's end
// is recorded (cancelFollowed: on a sharded node, once its owner recorded it),
// so that tasks/cancel tells the task canceled only when it was.
func (b a2aBackend) CancelTask(ctx context.Context, sessionID, envelopeID, reason string) error {
	err := b.n.cancelFollowed(ctx, sessionID, envelopeID, reason)
	switch {
	case errors.Is(err, actors.ErrNoRunningTask):
		return fmt.Errorf("%w: %w", a2a.ErrTaskNotRunning, err)
	case errors.Is(err, errEndNotRecorded):
		return fmt.Errorf("%w: %w", a2a.ErrCancelUnconfirmed, err)
	}
	return err
}

// CheckAnswerReason refuses a reason Approve would refuse (a2a.AnswerChecker).
func (b a2aBackend) CheckAnswerReason(reason string) error { return checkApprovalReason(reason) }

var _ a2a.AnswerChecker = a2aBackend{}

func (b a2aBackend) Approve(ctx context.Context, sessionID, call string, approve bool, reason string) error {
	return b.n.Approve(ctx, sessionID, call, approve, reason, messages.ApprovedByHTTP)
}
