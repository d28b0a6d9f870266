package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/tools"
)

// ErrToolPanicked is the error a tool call returns when the tool panicked.
var ErrToolPanicked = errors.New("tool panicked")

// ErrToolTimeout is the error a tool call returns when it ran past its timeout.
var ErrToolTimeout = errors.New("tool timed out")

// effectStrategy is the supervision policy of model and tool actors: restart the
// actor on failure, at most 10 times in 10 seconds. User code never runs on the
// actor's own goroutine, so in practice these actors fail only on bugs of their own.
func effectStrategy() actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(10, 10*time.Second, actor.DefaultDecider)
}

// ModelActorConfig configures the ModelActor.
type ModelActorConfig struct {
	Model llm.Model
	// Timeout bounds one model call (default 2 minutes).
	Timeout time.Duration
	// Concurrency bounds calls in flight across the node (default 64).
	Concurrency int
	Logger      *slog.Logger
}

// ModelActor is the actor every model call of a node goes through. It runs each call
// on its own recovered goroutine, bounded by Concurrency and Timeout, and answers with
// a *ModelResult. Retries, fallback, quotas, cost and caching belong to the model it
// is given: the node gives it a gateway.Gateway.
type ModelActor struct {
	cfg ModelActorConfig
	sem chan struct{}
}

// NewModelActorProps returns the props of a ModelActor with its supervision policy.
func NewModelActorProps(cfg ModelActorConfig) *actor.Props {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	sem := make(chan struct{}, cfg.Concurrency)
	return actor.PropsFromProducer(func() actor.Actor { return &ModelActor{cfg: cfg, sem: sem} },
		actor.WithSupervisor(effectStrategy()))
}

// Receive implements actor.Actor.
func (m *ModelActor) Receive(ctx actor.Context) {
	call, ok := ctx.Message().(*ModelCall)
	if !ok {
		return
	}
	root := ctx.ActorSystem().Root
	go func() {
		m.sem <- struct{}{}
		defer func() { <-m.sem }()
		start := time.Now()
		resp, err := m.once(call)
		root.Send(call.ReplyTo, &ModelResult{Key: call.Request.Key, Model: m.cfg.Model.Name(), Response: resp, Err: err,
			LatencyUS: time.Since(start).Microseconds()})
	}()
}

func (m *ModelActor) once(call *ModelCall) (resp llm.Response, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("model %s panicked: %v", m.cfg.Model.Name(), r)
			m.cfg.Logger.Error("model panicked", "session", call.SessionID, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	c, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout)
	defer cancel()
	return m.cfg.Model.Generate(c, call.Request)
}

// ToolActorConfig configures one ToolActor.
type ToolActorConfig struct {
	Tool tools.Tool
	// Timeout bounds one call (default 30 s). A call past it answers ErrToolTimeout;
	// its goroutine is abandoned once the tool returns (tools must honour ctx).
	Timeout time.Duration
	// Concurrency bounds this tool's calls in flight across the node (default 16).
	Concurrency int
	Logger      *slog.Logger
}

// ToolActor runs one tool. Each call runs on its own goroutine with a timeout and
// panic recovery: a tool that panics or hangs becomes an error result for the model.
type ToolActor struct {
	cfg ToolActorConfig
	sem chan struct{}
}

// NewToolActorProps returns the props of a ToolActor with its supervision policy.
func NewToolActorProps(cfg ToolActorConfig) *actor.Props {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	sem := make(chan struct{}, cfg.Concurrency)
	return actor.PropsFromProducer(func() actor.Actor { return &ToolActor{cfg: cfg, sem: sem} },
		actor.WithSupervisor(effectStrategy()))
}

// Receive implements actor.Actor.
func (t *ToolActor) Receive(ctx actor.Context) {
	call, ok := ctx.Message().(*ToolCall)
	if !ok {
		return
	}
	root := ctx.ActorSystem().Root
	go func() {
		t.sem <- struct{}{}
		defer func() { <-t.sem }()
		start := time.Now()
		out, err := t.run(call)
		root.Send(call.ReplyTo, &ToolResult{Key: call.Request.Key, Output: out, Err: err, LatencyUS: time.Since(start).Microseconds()})
	}()
}

type toolOutcome struct {
	out string
	err error
}

func (t *ToolActor) run(call *ToolCall) (string, error) {
	c, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
	defer cancel()
	done := make(chan toolOutcome, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				t.cfg.Logger.Error("tool panicked", "tool", call.Request.Tool, "key", call.Request.Key, "panic", r, "stack", string(debug.Stack()))
				done <- toolOutcome{err: fmt.Errorf("%w: %v", ErrToolPanicked, r)}
			}
		}()
		out, err := t.cfg.Tool.Call(c, tools.Call{Key: call.Request.Key, Arguments: call.Request.Arguments})
		done <- toolOutcome{out, err}
	}()
	select {
	case o := <-done:
		return o.out, o.err
	case <-c.Done():
		return "", fmt.Errorf("%w after %s", ErrToolTimeout, t.cfg.Timeout)
	}
}
