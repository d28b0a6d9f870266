package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/telemetry"
)

// A node's traces (OpenTelemetry), off unless the OTEL_* environment asks for an
// exporter (telemetry.FromEnv) or Config.Traces gives a provider. When on:
//
//   - a task is stamped where it enters (submit, handleTask) with the span it was
//     submitted under, "submit_task", child of the caller's span (a traceparent in
//     the bus message's metadata, or in the context of Go code): its
//     messages.TaskSubmitted.TraceParent, recorded with the task;
//   - the node's sessions' events become spans (telemetry.Sessions): the task's
//     "invoke_agent", its steps, its "chat" and "execute_tool" calls, children of
//     the task's TraceParent wherever the session runs, and again after a resume;
//   - a memory command sent to the owner of its namespace carries the tool
//     call's traceparent in its message's metadata; the owner spans it ("memory
//     {action}");
//   - an effect asked of another node carries its span's traceparent in the
//     request message's metadata; the node that performs it starts its own span
//     there (telemetry.StartEffect), the child of the asking one.
//
// Nothing here writes an event nor touches a decision: the stamp is written before
// the task is recorded, as an input, and spans are made from durable events.
// When tracing is off, none of the hooks below is installed.
type tracing struct {
	traces *telemetry.Traces
	own    bool // FromEnv made it: Close shuts it down
	tracer trace.Tracer
	spans  *telemetry.Sessions
	// providerOf names the provider of a model by its name ("" the default
	// model), for gen_ai.provider.name; set by setProviders.
	providerOf func(model string) string

	mu sync.Mutex
	// remote are the parents of the effects this node performs for other nodes'
	// sessions, by key, from the request's metadata until the call starts.
	remote map[string]trace.SpanContext
}

// newTracing sets up the node's traces: cfg.Traces, or those of the environment.
func (n *Node) newTracing(ctx context.Context) error {
	t := &tracing{traces: n.cfg.Traces, remote: map[string]trace.SpanContext{}}
	if t.traces == nil {
		traces, err := telemetry.FromEnv(ctx, telemetry.Options{InstanceID: n.cfg.NodeID, Logger: n.cfg.Logger})
		if err != nil {
			return fmt.Errorf("node: traces: %w", err)
		}
		t.traces, t.own = traces, true
	}
	t.tracer = t.traces.Tracer()
	if t.traces.Enabled() {
		t.spans = telemetry.NewSessions(t.tracer, 0)
		n.cfg.Logger.Info("traces on", "exporter", t.traces.Exporter())
	}
	n.tracing = t
	return nil
}

// setProviders names, for the spans of model calls, the provider of each model
// the node may call: its default model (by its name and by ""), the default's
// fallbacks and every agent's models. A model says its provider when it
// implements gateway.ProviderNamer (the OpenAI-compatible models, the offline
// model); others get no gen_ai.provider.name.
func (t *tracing) setProviders(cfg Config) {
	if !t.on() {
		return
	}
	providers := map[string]string{}
	add := func(ms ...llm.Model) {
		for _, m := range ms {
			if m == nil {
				continue
			}
			if _, seen := providers[m.Name()]; seen {
				continue // the first model of a name is the one called (gateway.Config.Routes)
			}
			p := ""
			if pn, ok := m.(gateway.ProviderNamer); ok {
				p = pn.Provider()
			}
			providers[m.Name()] = p
		}
	}
	add(cfg.Model)
	if cfg.Model != nil {
		providers[""] = providers[cfg.Model.Name()]
	}
	add(cfg.Fallbacks...)
	for _, a := range cfg.Agents {
		add(a.Model)
		add(a.Fallbacks...)
		add(a.CriticModel, a.SummaryModel)
	}
	t.providerOf = func(model string) string { return providers[model] }
	t.spans.SetProviders(t.providerOf)
}

// on reports whether the node traces.
func (t *tracing) on() bool { return t != nil && t.spans != nil }

// stamp records in a task the span it is submitted under: a "submit_task" span,
// child of the span in ctx, unless the task has a TraceParent already (a task
// forwarded, or submitted by a node that traces). end ends that span.
func (t *tracing) stamp(ctx context.Context, env messages.Envelope) (messages.Envelope, func()) {
	nothing := func() {}
	if !t.on() || env.Type != messages.TypeTaskSubmitted {
		return env, nothing
	}
	p, err := env.Decode()
	if err != nil {
		return env, nothing
	}
	ts := p.(*messages.TaskSubmitted)
	if ts.TraceParent != "" {
		return env, nothing
	}
	agent := ts.Agent
	if agent == "" {
		agent = "default"
	}
	_, span := t.tracer.Start(ctx, "submit_task", trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		semconv.GenAIConversationID(env.SessionID), semconv.GenAIAgentName(agent), telemetry.AttrTaskID.String(env.ID)))
	ts.TraceParent, ts.TraceState = telemetry.TraceParent(span.SpanContext()), telemetry.TraceState(span.SpanContext())
	b, err := json.Marshal(ts)
	if err != nil {
		span.End()
		return env, nothing
	}
	env.Payload = b
	return env, func() { span.End() }
}

// taskContext returns the context a task's message carries: its TraceParent (and
// TraceState), as the parent for the bus.
func taskContext(ctx context.Context, env messages.Envelope) context.Context {
	if p, err := env.Decode(); err == nil {
		t := p.(*messages.TaskSubmitted)
		if sc := telemetry.ParseTraceContext(t.TraceParent, t.TraceState); sc.IsValid() {
			return trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	return ctx
}

// observe hands a batch of a session's durable events to the spans, then on.
func (t *tracing) observe(next func(string, []messages.Envelope)) func(string, []messages.Envelope) {
	return func(sessionID string, batch []messages.Envelope) {
		t.spans.Observe(sessionID, batch)
		next(sessionID, batch)
	}
}

// effectHook is actors.LocalEffectsConfig.Trace: nil when the node does not trace.
func (t *tracing) effectHook() func(context.Context, messages.EffectRequest) (context.Context, func(messages.EffectReply)) {
	if !t.on() {
		return nil
	}
	return t.traceEffect
}

// injectHook is actors.BusEffectsConfig.Inject: nil when the node does not trace.
func (t *tracing) injectHook() func(messages.EffectRequest, message.Metadata) {
	if !t.on() {
		return nil
	}
	return t.injectEffect
}

// injectEffect puts the traceparent of an effect's span in its request's metadata
// (actors.BusEffectsConfig.Inject).
func (t *tracing) injectEffect(req messages.EffectRequest, md message.Metadata) {
	if sc := t.spans.SpanContext(req.Key.String()); sc.IsValid() {
		telemetry.Inject(trace.ContextWithSpanContext(context.Background(), sc), md)
	}
}

// expectRemote notes the parent of an effect request read from the bus (the asking
// node's span), for traceEffect; done forgets it.
func (t *tracing) expectRemote(msg *message.Message, key messages.EffectKey) (done func()) {
	sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), msg.Metadata))
	if !sc.IsValid() {
		return func() {}
	}
	k := key.String()
	t.mu.Lock()
	t.remote[k] = sc
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.remote, k)
		t.mu.Unlock()
	}
}

// traceEffect runs a call this node performs (actors.LocalEffectsConfig.Trace): a
// call of one of its own sessions under the session's span of it; a call for
// another node's session under a span of its own, the child of the asking span.
func (t *tracing) traceEffect(ctx context.Context, req messages.EffectRequest) (context.Context, func(messages.EffectReply)) {
	key := req.Key.String()
	if sc := t.spans.SpanContext(key); sc.IsValid() {
		return trace.ContextWithSpanContext(ctx, sc), nil
	}
	t.mu.Lock()
	parent, ok := t.remote[key]
	delete(t.remote, key)
	t.mu.Unlock()
	if !ok {
		return ctx, nil
	}
	ctx, span := telemetry.StartEffect(trace.ContextWithRemoteSpanContext(ctx, parent), t.tracer, req)
	if req.Model != nil && t.providerOf != nil {
		var asked string
		if len(req.Model.Models) > 0 {
			asked = req.Model.Models[0]
		}
		if a, ok := telemetry.ProviderAttribute(t.providerOf(asked)); ok {
			span.SetAttributes(a)
		}
	}
	return ctx, func(rep messages.EffectReply) {
		if rep.Model != "" && t.providerOf != nil { // a fallback answered
			if a, ok := telemetry.ProviderAttribute(t.providerOf(rep.Model)); ok {
				span.SetAttributes(a)
			}
		}
		telemetry.EndEffect(span, req, rep)
	}
}

// startMemory starts the span of a memory (or knowledge base) command this node
// performs as the owner of its namespace, "memory {action}", the child of the span
// in ctx (the asking tool call's, from the command's metadata). end ends it, with an
// error status when errMsg is set.
func (t *tracing) startMemory(ctx context.Context, c messages.MemoryCommand) (context.Context, func(errMsg string)) {
	ctx, span := t.tracer.Start(ctx, "memory "+c.Action, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		telemetry.AttrMemoryNamespace.String(c.Namespace), telemetry.AttrMemoryAction.String(c.Action), telemetry.AttrRemote.Bool(true)))
	return ctx, func(errMsg string) {
		if errMsg != "" {
			span.SetStatus(codes.Error, telemetry.StatusText(errMsg))
		}
		span.End()
	}
}

// withTraceparent puts the span context of a request's traceparent header, if it
// has one, in the request's context.
func withTraceparent(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(telemetry.TraceParentKey) != "" {
			r = r.WithContext(telemetry.ExtractHTTP(r.Context(), r.Header))
		}
		h.ServeHTTP(w, r)
	})
}

// close ends the spans still open (the tasks running as the node stops) and, when
// the node set up its traces, flushes them to the exporter (within 5 s).
func (t *tracing) close() error {
	if t == nil {
		return nil
	}
	if t.spans != nil {
		t.spans.Close()
	}
	if !t.own {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return t.traces.Shutdown(ctx)
}

// Traces returns the node's tracing: where its spans go (Exporter), or that they go
// nowhere (Enabled is false: the OTEL_* environment named no exporter).
func (n *Node) Traces() *telemetry.Traces { return n.tracing.traces }
