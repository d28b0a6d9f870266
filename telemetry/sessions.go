package telemetry

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/troupe-run/troupe/messages"
)

// Troupe's own span attributes, beside the GenAI conventions'.
const (
	// AttrTaskID is the task's ID (its task.submitted event's, the correlation ID of
	// its events).
	AttrTaskID = attribute.Key("troupe.task.id")
	// AttrStep is the step of the agent's loop (messages.ModelRequested.Step).
	AttrStep = attribute.Key("troupe.step")
	// AttrEffectKey is an effect's idempotency key (messages.EffectKey).
	AttrEffectKey = attribute.Key("troupe.effect.key")
	// AttrCostUSD is a model call's (or a task's) cost in US dollars, as the
	// gateway's prices say.
	AttrCostUSD = attribute.Key("troupe.cost_usd")
	// AttrCached is set on a model call answered from the gateway's cache.
	AttrCached = attribute.Key("troupe.cached")
	// AttrPurpose names what a paradigm made a call for (a plan, a critique).
	AttrPurpose = attribute.Key("troupe.purpose")
	// AttrSteps is the steps a task took.
	AttrSteps = attribute.Key("troupe.steps")
	// AttrFailure is why a task failed (messages.TaskFailed.Reason).
	AttrFailure = attribute.Key("troupe.failure_reason")
	// AttrResumed is set on the spans a node starts for a task it resumed from the
	// log (after a crash, a restart or a rebalance): the task's spans before it are
	// the previous owner's, in the same trace.
	AttrResumed = attribute.Key("troupe.resumed")
	// AttrInterrupted is set on the spans ended because their node stopped while
	// the task ran.
	AttrInterrupted = attribute.Key("troupe.interrupted")
	// AttrParentSession names the parent session of a sub-agent's task.
	AttrParentSession = attribute.Key("troupe.parent.session_id")
	// AttrMemoryNamespace and AttrMemoryAction name the namespace (or knowledge
	// base) and the operation of a memory command performed by its owner.
	AttrMemoryNamespace = attribute.Key("troupe.memory.namespace")
	AttrMemoryAction    = attribute.Key("troupe.memory.action")
	// AttrRemote is set on the span of an effect a node performs for a session of
	// another node.
	AttrRemote = attribute.Key("troupe.remote")
)

// DefaultMaxOpenSessions is the default bound of Sessions' sessions with open spans.
const DefaultMaxOpenSessions = 10_000

// Sessions turns the events of a node's sessions into spans, following the GenAI
// semantic conventions:
//
//   - "invoke_agent {agent}" per task, from its task.submitted to its
//     task.completed or task.failed, the child of the span the task was submitted
//     under (messages.TaskSubmitted.TraceParent);
//   - "step {n}" per step of the agent's loop, from its model.requested to the
//     next step's, the child of the task's span;
//   - "chat {model}" per model call and "execute_tool {tool}" per tool call, from
//     the request event to the answer event, children of the step's span; a tool
//     call that waits for a human's approval has the events approval.requested and
//     approval.resolved (troupe.approval.approved, troupe.approval.by).
//
// It reads events once they are durable (Observe, Recover): it never changes one,
// and the replay path never sees it. Spans are timed by the node's wall clock.
//
// A task whose session moved to another node (a rebalance) leaves its spans open
// here until Close, or until more than MaxOpen sessions have open spans (the least
// recently seen are ended first).
//
// Its methods are safe for concurrent use.
type Sessions struct {
	tracer trace.Tracer
	// MaxOpen bounds the sessions with open spans (default DefaultMaxOpenSessions).
	maxOpen int

	mu   sync.Mutex
	open map[string]*sessionSpans
	// effects are the open spans of model and tool calls, by effect key.
	effects map[string]effectSpan
	tick    uint64
	// providerOf names a model's provider (SetProviders); nil: none known.
	providerOf func(model string) string
}

// effectSpan is the open span of a model or tool call; unnamed is set on a model
// call whose request named no model: its span is named after the model that answers.
type effectSpan struct {
	span    trace.Span
	unnamed bool
}

// sessionSpans are the open spans of one session's running task.
type sessionSpans struct {
	session string
	taskID  string
	task    trace.Span
	taskCtx context.Context
	step    trace.Span
	stepCtx context.Context
	stepN   int
	resumed bool
	effects map[string]bool // keys of its spans in Sessions.effects
	seen    uint64          // Sessions.tick when it was last seen
}

// NewSessions returns the session spans of tracer; maxOpen bounds the sessions with
// open spans (0: DefaultMaxOpenSessions).
func NewSessions(tracer trace.Tracer, maxOpen int) *Sessions {
	if maxOpen <= 0 {
		maxOpen = DefaultMaxOpenSessions
	}
	return &Sessions{tracer: tracer, maxOpen: maxOpen, open: map[string]*sessionSpans{}, effects: map[string]effectSpan{}}
}

// SetProviders sets how the spans of model calls name the provider of a model
// (gen_ai.provider.name), by the model's name; "" names the node's default model.
// A model whose provider is "" gets no such attribute. Call it before the first
// Observe.
func (s *Sessions) SetProviders(providerOf func(model string) string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.providerOf = providerOf
}

// provider is the gen_ai.provider.name attribute of model, and whether its
// provider is known.
func (s *Sessions) provider(model string) (attribute.KeyValue, bool) {
	if s.providerOf == nil {
		return attribute.KeyValue{}, false
	}
	return ProviderAttribute(s.providerOf(model))
}

// ProviderAttribute is the gen_ai.provider.name attribute of provider, and whether
// provider is set.
func ProviderAttribute(provider string) (attribute.KeyValue, bool) {
	if provider == "" {
		return attribute.KeyValue{}, false
	}
	return semconv.GenAIProviderNameKey.String(provider), true
}

// Observe turns a batch of a session's events, durable and in order, into spans.
// It does not block on I/O (the exporter batches in the background).
func (s *Sessions) Observe(sessionID string, batch []messages.Envelope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for i := range batch {
		s.observe(sessionID, &batch[i], now)
	}
}

func (s *Sessions) observe(sessionID string, e *messages.Envelope, now time.Time) {
	p, ok := spanPayload(e)
	if !ok {
		return // no event the spans follow; or one that does not decode, which the session recorded: not the tracer's to judge
	}
	if t, ok := p.(*messages.TaskSubmitted); ok {
		s.startTask(sessionID, e.ID, t, false, now)
		return
	}
	ss := s.open[sessionID]
	if ss == nil || (e.CorrelationID != "" && e.CorrelationID != ss.taskID) {
		return // a task this node did not see start (Recover starts those)
	}
	s.tick++
	ss.seen = s.tick
	switch p := p.(type) {
	case *messages.ModelRequested:
		s.startModel(ss, p, now)
	case *answered:
		if es, ok := s.takeEffect(ss, p.Key); ok {
			if es.unnamed && p.Model != "" {
				es.span.SetName(spanName("chat", p.Model))
			}
			if p.Model != "" { // a fallback answered: its provider, not the one asked
				if a, ok := s.provider(p.Model); ok {
					es.span.SetAttributes(a)
				}
			}
			EndModel(es.span, p.Model, p.Usage, p.Cached, finishReason(p.Error, p.asksTools), p.Error, now)
		}
	case *messages.ToolCallRequested:
		s.startTool(ss, p, now)
	case *messages.ToolCallCompleted:
		if es, ok := s.takeEffect(ss, p.Key); ok {
			EndTool(es.span, p.Error, now)
		}
	case *messages.ApprovalRequested:
		if es, ok := s.effects[p.Key]; ok {
			es.span.AddEvent("approval.requested", trace.WithTimestamp(now))
		}
	case *messages.ApprovalResolved:
		if es, ok := s.effects[p.Key]; ok {
			es.span.AddEvent("approval.resolved", trace.WithTimestamp(now), trace.WithAttributes(
				attribute.Bool("troupe.approval.approved", p.Approve), attribute.String("troupe.approval.by", p.By)))
		}
	case *messages.TaskCompleted:
		ss.task.SetAttributes(AttrSteps.Int(p.Steps))
		usageAttributes(ss.task, p.Usage)
		s.endTask(sessionID, ss, "", now)
	case *messages.TaskFailed:
		ss.task.SetAttributes(AttrSteps.Int(p.Steps), AttrFailure.String(p.Reason), semconv.ErrorTypeKey.String(p.Reason))
		usageAttributes(ss.task, p.Usage)
		s.endTask(sessionID, ss, p.Reason+": "+p.Error, now)
	}
}

// startTask starts the span of a task (ending what was open for the session).
func (s *Sessions) startTask(sessionID, taskID string, t *messages.TaskSubmitted, resumed bool, now time.Time) *sessionSpans {
	if old := s.open[sessionID]; old != nil {
		s.endTask(sessionID, old, "", now)
	}
	if len(s.open) >= s.maxOpen {
		s.evictOldest(now)
	}
	ctx := context.Background()
	if sc := ParseTraceContext(t.TraceParent, t.TraceState); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	agent := t.Agent
	if agent == "" {
		agent = "default"
	}
	attrs := []attribute.KeyValue{semconv.GenAIOperationNameInvokeAgent, semconv.GenAIAgentName(agent),
		semconv.GenAIConversationID(sessionID), AttrTaskID.String(taskID)}
	if t.Model != "" {
		attrs = append(attrs, semconv.GenAIRequestModel(t.Model))
	}
	if t.Parent != nil {
		attrs = append(attrs, AttrParentSession.String(t.Parent.SessionID))
	}
	if resumed {
		attrs = append(attrs, AttrResumed.Bool(true))
	}
	ctx, span := s.tracer.Start(ctx, spanName("invoke_agent", agent), trace.WithTimestamp(now), trace.WithAttributes(attrs...))
	s.tick++
	ss := &sessionSpans{session: sessionID, taskID: taskID, task: span, taskCtx: ctx, resumed: resumed, effects: map[string]bool{}, seen: s.tick}
	s.open[sessionID] = ss
	return ss
}

// startStep ends the open step of ss and starts step n, unless it is open already.
func (s *Sessions) startStep(ss *sessionSpans, n int, now time.Time) {
	if ss.step != nil && ss.stepN == n {
		return
	}
	if ss.step != nil {
		ss.step.End(trace.WithTimestamp(now))
	}
	attrs := []attribute.KeyValue{AttrStep.Int(n), semconv.GenAIConversationID(ss.session)}
	if ss.resumed {
		attrs = append(attrs, AttrResumed.Bool(true))
	}
	ss.stepCtx, ss.step = s.tracer.Start(ss.taskCtx, "step "+strconv.Itoa(n), trace.WithTimestamp(now), trace.WithAttributes(attrs...))
	ss.stepN = n
}

func (s *Sessions) startModel(ss *sessionSpans, p *messages.ModelRequested, now time.Time) {
	s.startStep(ss, p.Step, now)
	name := "chat"
	attrs := []attribute.KeyValue{semconv.GenAIOperationNameChat, semconv.GenAIConversationID(ss.session), AttrEffectKey.String(p.Key), AttrStep.Int(p.Step)}
	if p.Model != "" {
		name += " " + p.Model
		attrs = append(attrs, semconv.GenAIRequestModel(p.Model))
	}
	if a, ok := s.provider(p.Model); ok {
		attrs = append(attrs, a)
	}
	if p.Purpose != "" {
		attrs = append(attrs, AttrPurpose.String(p.Purpose))
	}
	_, span := s.tracer.Start(ss.stepCtx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(now), trace.WithAttributes(attrs...))
	s.addEffect(ss, p.Key, effectSpan{span: span, unnamed: p.Model == ""}, now)
}

func (s *Sessions) startTool(ss *sessionSpans, p *messages.ToolCallRequested, now time.Time) {
	parent := ss.stepCtx
	if ss.step == nil {
		parent = ss.taskCtx // a call a paradigm made before any model call
	}
	attrs := []attribute.KeyValue{semconv.GenAIOperationNameExecuteTool, semconv.GenAIConversationID(ss.session), semconv.GenAIToolName(p.Tool),
		semconv.GenAIToolType("function"), AttrEffectKey.String(p.Key), AttrStep.Int(p.Step)}
	if p.CallID != "" {
		attrs = append(attrs, semconv.GenAIToolCallID(p.CallID))
	}
	if p.Purpose != "" {
		attrs = append(attrs, AttrPurpose.String(p.Purpose))
	}
	_, span := s.tracer.Start(parent, spanName("execute_tool", p.Tool), trace.WithTimestamp(now), trace.WithAttributes(attrs...))
	s.addEffect(ss, p.Key, effectSpan{span: span}, now)
}

// addEffect registers the open span of effect key (ending one left open for it).
func (s *Sessions) addEffect(ss *sessionSpans, key string, es effectSpan, now time.Time) {
	if old, ok := s.effects[key]; ok {
		old.span.End(trace.WithTimestamp(now))
	}
	s.effects[key] = es
	ss.effects[key] = true
}

// takeEffect removes and returns the open span of effect key.
func (s *Sessions) takeEffect(ss *sessionSpans, key string) (effectSpan, bool) {
	es, ok := s.effects[key]
	if ok {
		delete(s.effects, key)
		delete(ss.effects, key)
	}
	return es, ok
}

// endTask ends every open span of ss, then its task's, with an error status when
// failure is set.
func (s *Sessions) endTask(sessionID string, ss *sessionSpans, failure string, now time.Time, extra ...attribute.KeyValue) {
	for key := range ss.effects {
		if es, ok := s.effects[key]; ok {
			es.span.SetAttributes(extra...)
			es.span.End(trace.WithTimestamp(now))
			delete(s.effects, key)
		}
	}
	if ss.step != nil {
		ss.step.SetAttributes(extra...)
		ss.step.End(trace.WithTimestamp(now))
	}
	ss.task.SetAttributes(extra...)
	if failure != "" {
		ss.task.SetStatus(codes.Error, StatusText(failure))
	}
	ss.task.End(trace.WithTimestamp(now))
	if s.open[sessionID] == ss {
		delete(s.open, sessionID)
	}
}

// evictOldest ends the spans of the least recently seen session.
func (s *Sessions) evictOldest(now time.Time) {
	var oldest string
	var at uint64
	for id, ss := range s.open {
		if oldest == "" || ss.seen < at {
			oldest, at = id, ss.seen
		}
	}
	if oldest != "" {
		s.endTask(oldest, s.open[oldest], "", now, AttrInterrupted.Bool(true))
	}
}

// Recover starts the spans of a task a node resumed: events are the session's
// whole history as it folded them (actors.SessionDeps.Recovered). When a task is
// still running (the first submitted that has not ended: tasks run in turn, and a
// queued one may have ended before it, at its deadline), its span starts again
// (troupe.resumed), in the trace it was submitted under, with the spans of its
// effects requested and not answered, which the session issues again; the answers
// to come end them (Observe).
func (s *Sessions) Recover(sessionID string, events []messages.Envelope) {
	ended := map[string]bool{}
	for _, e := range events {
		if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
			ended[e.CorrelationID] = true
		}
	}
	start := slices.IndexFunc(events, func(e messages.Envelope) bool {
		return e.Type == messages.TypeTaskSubmitted && !ended[e.ID]
	})
	if start < 0 {
		return
	}
	task := events[start].ID
	p, err := events[start].Decode()
	if err != nil {
		return
	}
	// The effects requested and not answered, in order, and the last step.
	var pending []messages.Payload
	answered := map[string]bool{}
	step := -1
	for _, e := range events[start+1:] {
		switch e.Type {
		case messages.TypeModelRequested, messages.TypeToolCallRequested, messages.TypeModelResponded, messages.TypeToolCallCompleted:
		default:
			continue
		}
		if e.CorrelationID != "" && e.CorrelationID != task {
			continue // another task's (an ended one's late answer)
		}
		q, err := e.Decode()
		if err != nil {
			continue
		}
		switch q := q.(type) {
		case *messages.ModelRequested:
			pending, step = append(pending, q), q.Step
		case *messages.ToolCallRequested:
			pending = append(pending, q)
		case *messages.ModelResponded:
			answered[q.Key] = true
		case *messages.ToolCallCompleted:
			answered[q.Key] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	ss := s.startTask(sessionID, events[start].ID, p.(*messages.TaskSubmitted), true, now)
	if step >= 0 {
		s.startStep(ss, step, now)
	}
	for _, q := range pending {
		switch q := q.(type) {
		case *messages.ModelRequested:
			if !answered[q.Key] {
				s.startModel(ss, q, now)
			}
		case *messages.ToolCallRequested:
			if !answered[q.Key] {
				s.startTool(ss, q, now)
			}
		}
	}
}

// SpanContext returns the span context of the open span of effect key (a model or
// tool call of a session of this node), or an invalid one.
func (s *Sessions) SpanContext(key string) trace.SpanContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	if es, ok := s.effects[key]; ok {
		return es.span.SpanContext()
	}
	return trace.SpanContext{}
}

// Open reports how many sessions have open spans.
func (s *Sessions) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// Close ends every open span (troupe.interrupted): the node stops, and the tasks'
// next owners go on with spans of their own, in the same traces.
func (s *Sessions) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for id, ss := range s.open {
		s.endTask(id, ss, "", now, AttrInterrupted.Bool(true))
	}
}

// finishReason is the GenAI finish reason of a model's answer: "error" when the call
// failed, "tool_calls" when it asked for tools, else "stop".
func finishReason(errMsg string, asksTools bool) string {
	switch {
	case errMsg != "":
		return "error"
	case asksTools:
		return "tool_calls"
	}
	return "stop"
}

// usageAttributes sets a usage's tokens and cost on span.
func usageAttributes(span trace.Span, u messages.Usage) {
	span.SetAttributes(semconv.GenAIUsageInputTokens(u.PromptTokens), semconv.GenAIUsageOutputTokens(u.CompletionTokens))
	if u.CachedTokens > 0 {
		span.SetAttributes(semconv.GenAIUsageCacheReadInputTokens(u.CachedTokens))
	}
	if u.CostUSD > 0 {
		span.SetAttributes(AttrCostUSD.Float64(u.CostUSD))
	}
}

// EndModel ends the span of a model call with its answer: the model that answered,
// its usage and cost, whether it came from the cache, its finish reason, and an
// error status when errMsg is set.
func EndModel(span trace.Span, model string, u messages.Usage, cached bool, finish, errMsg string, now time.Time) {
	if model != "" {
		span.SetAttributes(semconv.GenAIResponseModel(model))
	}
	usageAttributes(span, u)
	span.SetAttributes(semconv.GenAIResponseFinishReasons(finish))
	if cached {
		span.SetAttributes(AttrCached.Bool(true))
	}
	if errMsg != "" {
		span.SetStatus(codes.Error, StatusText(errMsg))
		span.SetAttributes(semconv.ErrorTypeOther)
	}
	span.End(trace.WithTimestamp(now))
}

// EndTool ends the span of a tool call, with an error status when errMsg is set.
func EndTool(span trace.Span, errMsg string, now time.Time) {
	if errMsg != "" {
		span.SetStatus(codes.Error, StatusText(errMsg))
		span.SetAttributes(semconv.ErrorTypeOther)
	}
	span.End(trace.WithTimestamp(now))
}

// StartEffect starts the span of an effect this node performs for a session of
// another node, under ctx (which holds the requesting span, Extract): "chat
// {model}" or "execute_tool {tool}", of kind server. EndEffect ends it.
func StartEffect(ctx context.Context, tracer trace.Tracer, req messages.EffectRequest) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{AttrEffectKey.String(req.Key.String()), semconv.GenAIConversationID(req.SessionID), AttrRemote.Bool(true)}
	name := "effect"
	switch {
	case req.Model != nil:
		name = "chat"
		attrs = append(attrs, semconv.GenAIOperationNameChat, AttrStep.Int(req.Model.Step))
		if len(req.Model.Models) > 0 {
			name = spanName("chat", req.Model.Models[0])
			attrs = append(attrs, semconv.GenAIRequestModel(req.Model.Models[0]))
		}
		if req.Model.Agent != "" {
			attrs = append(attrs, semconv.GenAIAgentName(req.Model.Agent))
		}
	case req.Tool != nil:
		name = spanName("execute_tool", req.Tool.Tool)
		attrs = append(attrs, semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(req.Tool.Tool), semconv.GenAIToolType("function"))
		if req.Tool.CallID != "" {
			attrs = append(attrs, semconv.GenAIToolCallID(req.Tool.CallID))
		}
		if req.Agent != "" {
			attrs = append(attrs, semconv.GenAIAgentName(req.Agent))
		}
	}
	return tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// EndEffect ends a span StartEffect started with the effect's reply.
func EndEffect(span trace.Span, req messages.EffectRequest, rep messages.EffectReply) {
	now := time.Now()
	if req.Model != nil {
		finish := finishReason(rep.Error, rep.Message != nil && len(rep.Message.ToolCalls) > 0)
		if len(req.Model.Models) == 0 && rep.Model != "" {
			span.SetName(spanName("chat", rep.Model))
		}
		EndModel(span, rep.Model, rep.Usage, rep.Cached, finish, rep.Error, now)
		return
	}
	EndTool(span, rep.Error, now)
}

// maxSpanLabel bounds the name of a model, tool or agent in a span's name, in runes.
const maxSpanLabel = 64

// spanName is "op label": label (a model's or a tool's name, which a model or a
// provider chooses: a model may call a tool of any name) on one line of at most
// maxSpanLabel runes, so that a span's name stays a short label for trace backends
// to group by. The span's attributes keep the whole name.
func spanName(op, label string) string {
	var b strings.Builder
	b.WriteString(op)
	b.WriteByte(' ')
	n := 0
	for _, r := range label {
		if n == maxSpanLabel {
			b.WriteString("…")
			break
		}
		if unicode.IsControl(r) || r == utf8.RuneError {
			r = '?'
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// MaxStatusText bounds the message of a span's error status, in bytes: a tool's or
// a model's error may run to tens of kilobytes (a stack dump, a provider's page),
// which a trace backend shows on one line, and a batch of such spans may exceed
// what a collector takes in one request, which refuses the batch whole.
const MaxStatusText = 4 << 10

// StatusText is msg as the message of a span's error status: whole up to
// MaxStatusText bytes, else cut there (at a character's start) and marked with "…".
func StatusText(msg string) string {
	if len(msg) <= MaxStatusText {
		return msg
	}
	const mark = "…"
	i := MaxStatusText - len(mark)
	for i > 0 && !utf8.RuneStart(msg[i]) {
		i--
	}
	return msg[:i] + mark
}
