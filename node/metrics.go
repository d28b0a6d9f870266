package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// The series of a node's own work: its sessions' tasks, steps, tokens, cost and
// model and tool calls (sessionMetrics), its log appends (timedStore), its actors'
// restarts (actorRestarts), its bus consumers' lag (busLag) and its watchers' waits
// for the end of a call's deltas (deltaTailTimeouts).

// Bounds of the label values of the session series: past maxLabelValues names of a
// dimension (agents, models, tools), a new name counts as otherLabel; a task whose
// task.submitted this process did not record (it was submitted before the node
// started) counts as unknownAgent unless its session's actor folded it here
// (recovered). maxTrackedTasks bounds the running tasks whose
// agent is remembered.
const (
	maxLabelValues  = 64
	maxTrackedTasks = 1 << 16
	otherLabel      = "other"
	unknownAgent    = "unknown"
)

// sessionMetrics counts what the node's own session actors record, from each batch
// of new events once it is durable (SessionDeps.Live): every event is counted once,
// by the node that appended it. A refold (an actor's restart, a node's restart over
// the same log) appends nothing, so it counts nothing again. It reads the few
// fields it needs from the events' encoded payloads without decoding them.
type sessionMetrics struct {
	tasks     *prometheus.CounterVec
	running   *prometheus.GaugeVec
	steps     *prometheus.CounterVec
	tokens    *prometheus.CounterVec
	cost      *prometheus.CounterVec
	modelCall *prometheus.HistogramVec
	toolCall  *prometheus.HistogramVec

	mu sync.Mutex
	// taskAgent maps a running task (its task.submitted's event ID) to its agent's
	// series.
	taskAgent map[string]*agentSeries
	agents    labelled[agentSeries]
	models    labelled[modelSeries]
	tools     labelled[toolSeries]
}

// labelled holds the series of one label dimension's values, by the JSON text of
// the name (as events carry it) and by label value.
type labelled[S any] struct {
	byRaw  map[string]*S
	byName map[string]*S
	// allowed, when set, holds the only names with series of their own besides
	// unknownAgent; the others share otherLabel's.
	allowed map[string]bool
	// known, when set, says whether a name may have a series of its own: one it
	// refuses shares otherLabel's and takes no place among the maxLabelValues
	// (a tool the model made up), and is asked about again when seen again (a
	// tool an MCP server may offer later).
	known func(name string) bool
}

// get returns the series of raw, a JSON string, made by newSeries on first use.
// Past maxLabelValues names, a new one shares the series of otherLabel.
func (l *labelled[S]) get(raw []byte, newSeries func(name string) *S) *S {
	if s, ok := l.byRaw[string(raw)]; ok {
		return s
	}
	if l.byRaw == nil {
		l.byRaw, l.byName = map[string]*S{}, map[string]*S{}
	}
	name := labelValue(raw, len(l.byName))
	if l.allowed != nil && !l.allowed[name] && name != unknownAgent {
		name = otherLabel
	}
	pin := true
	if l.known != nil && name != otherLabel && !l.known(name) {
		name, pin = otherLabel, false
	}
	s, ok := l.byName[name]
	if !ok {
		s = newSeries(name)
		l.byName[name] = s
	}
	if pin && len(l.byRaw) < 4*maxLabelValues {
		l.byRaw[string(raw)] = s
	}
	return s
}

type agentSeries struct {
	submitted, completed, failed, cancelled, steps prometheus.Counter
	running                                        prometheus.Gauge
}

type modelSeries struct {
	input, output, cached, cost prometheus.Counter
	ok, failed, fromCache       prometheus.Observer
}

type toolSeries struct{ ok, failed prometheus.Observer }

func newSessionMetrics(reg prometheus.Registerer) *sessionMetrics {
	latency := prometheus.ExponentialBuckets(1e-3, 2.5, 12) // 1 ms to about 1 min
	m := &sessionMetrics{
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "tasks", Name: "total",
			Help: "Tasks of this node's sessions, by agent and outcome: submitted (recorded), completed, failed, cancelled. " +
				"A task submitted before the node started and resumed by it counts its end under its agent; " +
				"one whose session this node did not fold (its actor ended before) under agent \"unknown\"."}, []string{"agent", "outcome"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "tasks", Name: "running",
			Help: "Tasks of this node's sessions that have not ended, by agent: submitted since it started, or resumed by it."}, []string{"agent"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Name: "steps_total",
			Help: "Agent loop steps (model calls requested by the loop; a paradigm's other model calls, which name a purpose, are not steps) of this node's sessions, by agent."},
			[]string{"agent"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "model", Name: "tokens_total",
			Help: "Tokens of the model answers this node's sessions recorded, by model and kind: input (prompt tokens, cached ones included), output, cached (the part of input the provider read from its prompt cache). Answers from the gateway's cache spent none and are not counted."},
			[]string{"model", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "model", Name: "cost_usd_total",
			Help: "Cost in US dollars of the model answers this node's sessions recorded (as priced by the gateway), by model; gateway cache hits cost nothing."},
			[]string{"model"}),
		modelCall: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "troupe", Subsystem: "model", Name: "call_seconds",
			Help:    "Latency of the model calls this node's sessions recorded, by model and outcome (ok, error, cached: answered by the gateway's cache).",
			Buckets: latency}, []string{"model", "outcome"}),
		toolCall: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "troupe", Subsystem: "tool", Name: "call_seconds",
			Help:    "Latency of the tool calls this node's sessions recorded, by tool and outcome (ok, error).",
			Buckets: latency}, []string{"tool", "outcome"}),
		taskAgent: map[string]*agentSeries{},
	}
	reg.MustRegister(m.tasks, m.running, m.steps, m.tokens, m.cost, m.modelCall, m.toolCall)
	return m
}

// runAgents restricts the agent label to the agents the node runs: "default" and
// its named agents; and the tool label to the tools they have (Agent.Tools, and
// what their catalogs offer when a call completes): a call to a tool an agent does
// not have, a name its model made up (of any length, with any characters, as
// many as it likes), counts under otherLabel and leaves the label's places to
// the node's tools. It is called before any session runs.
func (m *sessionMetrics) runAgents(agents actors.Agents) {
	allowed := map[string]bool{"default": true}
	tools := map[string]bool{}
	var catalogs []actors.ToolCatalog
	for _, a := range append([]actors.Agent{agents.Default}, slices.Collect(maps.Values(agents.Named))...) {
		for _, s := range a.Tools {
			tools[s.Name] = true
		}
		if a.Catalog != nil {
			catalogs = append(catalogs, a.Catalog)
		}
	}
	for name := range agents.Named {
		allowed[name] = true
	}
	m.mu.Lock()
	m.agents.allowed = allowed
	m.tools.known = func(name string) bool {
		if tools[name] {
			return true
		}
		for _, c := range catalogs {
			if _, ok := c.Tool(name); ok {
				return true
			}
		}
		return false
	}
	m.mu.Unlock()
}

// observe counts a batch of a session's new events. It never blocks on I/O.
func (m *sessionMetrics) observe(events []messages.Envelope) {
	for i := range events {
		e := &events[i]
		switch e.Type {
		case messages.TypeTaskSubmitted:
			m.submitted(e)
		case messages.TypeModelRequested:
			if isLoopStep(e.Payload) {
				m.mu.Lock()
				m.agentOf(e.CorrelationID).steps.Inc()
				m.mu.Unlock()
			}
		case messages.TypeModelResponded:
			m.modelResponded(e.Payload)
		case messages.TypeToolCallCompleted:
			m.toolCompleted(e.Payload)
		case messages.TypeTaskCompleted:
			m.ended(e.CorrelationID, func(a *agentSeries) prometheus.Counter { return a.completed })
		case messages.TypeTaskFailed:
			reason, _ := jsonField(e.Payload, "reason")
			if string(reason) == `"`+messages.ReasonCancelled+`"` {
				m.ended(e.CorrelationID, func(a *agentSeries) prometheus.Counter { return a.cancelled })
			} else {
				m.ended(e.CorrelationID, func(a *agentSeries) prometheus.Counter { return a.failed })
			}
		}
	}
}

// recovered learns the agents of a session's tasks that have not ended, from the
// events its actor folded (SessionDeps.Recovered): a task submitted before this node
// started (or to the node that owned the session before) and resumed here ends
// under its agent, and runs under it meanwhile, not under unknownAgent. It counts
// nothing as submitted: the node that recorded the task.submitted did. A task this
// process tracks already (an actor folded again after a restart of its own) is
// left as it is.
func (m *sessionMetrics) recovered(_ string, events []messages.Envelope) {
	var open map[string][]byte // agent by task, of the tasks not ended
	for i := range events {
		e := &events[i]
		switch e.Type {
		case messages.TypeTaskSubmitted:
			if open == nil {
				open = map[string][]byte{}
			}
			raw, _ := jsonField(e.Payload, "agent")
			open[e.ID] = raw
		case messages.TypeTaskCompleted, messages.TypeTaskFailed:
			delete(open, e.CorrelationID)
		}
	}
	if len(open) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for task, raw := range open {
		if _, ok := m.taskAgent[task]; ok || len(m.taskAgent) >= maxTrackedTasks {
			continue
		}
		a := m.agent(raw)
		m.taskAgent[task] = a
		a.running.Inc()
	}
}

// handedOver forgets the running tasks: the node handed every session over
// (Node.Revoked), and a task of theirs ends on the partitions' next owner, which
// counts it running meanwhile (recovered). One whose session comes back here is
// counted again as its session folds.
func (m *sessionMetrics) handedOver() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for task, a := range m.taskAgent {
		a.running.Dec()
		delete(m.taskAgent, task)
	}
}

func (m *sessionMetrics) submitted(e *messages.Envelope) {
	raw, _ := jsonField(e.Payload, "agent")
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.agent(raw)
	a.submitted.Inc()
	if len(m.taskAgent) < maxTrackedTasks {
		m.taskAgent[e.ID] = a
		a.running.Inc()
	}
}

// ended counts the end of task, under the counter outcome picks.
func (m *sessionMetrics) ended(task string, outcome func(*agentSeries) prometheus.Counter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.taskAgent[task]
	if ok {
		delete(m.taskAgent, task)
		a.running.Dec()
	} else {
		a = m.agent(unknownAgentRaw)
	}
	outcome(a).Inc()
}

// agentOf returns the series of the agent running task (m.mu held).
func (m *sessionMetrics) agentOf(task string) *agentSeries {
	if a, ok := m.taskAgent[task]; ok {
		return a
	}
	return m.agent(unknownAgentRaw)
}

// agent returns the series of the agent raw names (a JSON string, or nothing for
// the default agent) (m.mu held).
func (m *sessionMetrics) agent(raw []byte) *agentSeries {
	if len(raw) == 0 || string(raw) == `""` {
		raw = defaultAgentRaw
	}
	return m.agents.get(raw, func(name string) *agentSeries {
		return &agentSeries{
			submitted: m.tasks.WithLabelValues(name, "submitted"),
			completed: m.tasks.WithLabelValues(name, "completed"),
			failed:    m.tasks.WithLabelValues(name, "failed"),
			cancelled: m.tasks.WithLabelValues(name, "cancelled"),
			steps:     m.steps.WithLabelValues(name),
			running:   m.running.WithLabelValues(name),
		}
	})
}

// The JSON text of the agent names the session series use themselves.
var (
	defaultAgentRaw = []byte(`"default"`)
	unknownAgentRaw = []byte(`"` + unknownAgent + `"`)
)

func (m *sessionMetrics) modelResponded(payload []byte) {
	var (
		model                            []byte
		input, output, cached, latencyUS int64
		cost                             float64
		failed, fromCache                bool
	)
	scanMembers(payload, func(key, value []byte) {
		switch string(key) {
		case "model":
			model = value
		case "latency_us":
			latencyUS = jsonInt(value)
		case "error":
			failed = len(value) > 2 // a non-empty string
		case "cached":
			fromCache = string(value) == "true"
		case "usage":
			scanMembers(value, func(key, value []byte) {
				switch string(key) {
				case "prompt_tokens":
					input = jsonInt(value)
				case "completion_tokens":
					output = jsonInt(value)
				case "cached_tokens":
					cached = jsonInt(value)
				case "cost_usd":
					cost, _ = strconv.ParseFloat(string(value), 64)
				}
			})
		}
	})
	m.mu.Lock()
	s := m.models.get(model, func(name string) *modelSeries {
		return &modelSeries{
			input: m.tokens.WithLabelValues(name, "input"), output: m.tokens.WithLabelValues(name, "output"),
			cached: m.tokens.WithLabelValues(name, "cached"), cost: m.cost.WithLabelValues(name),
			ok: m.modelCall.WithLabelValues(name, "ok"), failed: m.modelCall.WithLabelValues(name, "error"),
			fromCache: m.modelCall.WithLabelValues(name, "cached"),
		}
	})
	m.mu.Unlock()
	seconds := float64(latencyUS) / 1e6
	switch {
	case failed:
		s.failed.Observe(seconds)
	case fromCache:
		s.fromCache.Observe(seconds)
	default:
		s.ok.Observe(seconds)
	}
	if fromCache {
		return // the gateway's cache spent no tokens
	}
	s.input.Add(float64(input))
	s.output.Add(float64(output))
	s.cached.Add(float64(cached))
	if cost > 0 {
		s.cost.Add(cost)
	}
}

func (m *sessionMetrics) toolCompleted(payload []byte) {
	var (
		tool      []byte
		latencyUS int64
		failed    bool
	)
	scanMembers(payload, func(key, value []byte) {
		switch string(key) {
		case "tool":
			tool = value
		case "latency_us":
			latencyUS = jsonInt(value)
		case "error":
			failed = len(value) > 2
		}
	})
	m.mu.Lock()
	s := m.tools.get(tool, func(name string) *toolSeries {
		return &toolSeries{ok: m.toolCall.WithLabelValues(name, "ok"), failed: m.toolCall.WithLabelValues(name, "error")}
	})
	m.mu.Unlock()
	if failed {
		s.failed.Observe(float64(latencyUS) / 1e6)
	} else {
		s.ok.Observe(float64(latencyUS) / 1e6)
	}
}

// labelValue is the label value of raw, a JSON string value: the string, or
// otherLabel when its dimension has known names already, or raw is no string.
func labelValue(raw []byte, known int) string {
	var s string
	if known >= maxLabelValues || json.Unmarshal(raw, &s) != nil {
		return otherLabel
	}
	if s == "" {
		return unknownAgent
	}
	return s
}

// isLoopStep reports whether a model.requested payload is a step of the agent's
// loop: it names no purpose. A payload without the bytes "purpose" (most, and
// long: the context report) has no such member, since the encoders of events escape
// no letter; one with them is read member by member.
func isLoopStep(payload []byte) bool {
	if !bytes.Contains(payload, []byte(`"purpose"`)) {
		return true
	}
	purpose, _ := jsonField(payload, "purpose")
	return len(purpose) == 0 || string(purpose) == `""`
}

// jsonField returns the raw value of the member key of the JSON object obj (nil
// when it has none).
func jsonField(obj []byte, key string) ([]byte, bool) {
	var found []byte
	ok := scanMembers(obj, func(k, v []byte) {
		if found == nil && string(k) == key {
			found = v
		}
	})
	return found, ok && found != nil
}

// jsonInt reads a JSON integer (0 when value is none).
func jsonInt(value []byte) int64 {
	var n int64
	neg := len(value) > 0 && value[0] == '-'
	if neg {
		value = value[1:]
	}
	for _, c := range value {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		return -n
	}
	return n
}

// scanMembers calls each with the key (its raw text between the quotes) and the
// raw value of every member of the JSON object obj, in order, without decoding or
// allocating; it reports false when obj is not a well-formed object (each may have
// been called for the members before the fault).
func scanMembers(obj []byte, each func(key, value []byte)) bool {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return true
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return false
		}
		end := skipString(obj, i)
		if end < 0 {
			return false
		}
		key := obj[i+1 : end-1]
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return false
		}
		i = skipSpace(obj, i+1)
		vend := skipValue(obj, i)
		if vend < 0 {
			return false
		}
		each(key, obj[i:vend])
		i = skipSpace(obj, vend)
		switch {
		case i < len(obj) && obj[i] == ',':
			i = skipSpace(obj, i+1)
		case i < len(obj) && obj[i] == '}':
			return true
		default:
			return false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the JSON string starting at b[i] (a quote),
// or -1.
func skipString(b []byte, i int) int {
	// The closing quote is the first one after b[i] not escaped: not preceded by
	// an odd run of backslashes (each backslash escapes the byte after it, so the
	// parity of the run decides). bytes.IndexByte finds each quote in long text
	// many bytes at a time.
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		k += j
		n := 0
		for k-n-1 > i && b[k-n-1] == '\\' {
			n++
		}
		if n%2 == 0 {
			return k + 1
		}
		j = k + 1
	}
	return -1
}

// skipValue returns the index after the JSON value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := skipString(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default: // a number, true, false or null
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}

// timedStore is the session actors' event store with each append's latency
// observed (troupe_eventlog_append_seconds).
type timedStore struct {
	actors.EventStore
	appended prometheus.Observer
}

// Append implements actors.EventStore.
func (s timedStore) Append(ctx context.Context, events []messages.Envelope) error {
	start := time.Now()
	err := s.EventStore.Append(ctx, events)
	s.appended.Observe(time.Since(start).Seconds())
	return err
}

// ReadN reads a page of a session through the store (eventlog.PageReader): the
// timer wraps appends only, and must not hide the paged reads of the store.
func (s timedStore) ReadN(ctx context.Context, sessionID string, fromSeq uint64, n, maxBytes int) ([]messages.Envelope, error) {
	return readN(ctx, s.EventStore, sessionID, fromSeq, n, maxBytes)
}

// readN is r's ReadN when r reads pages (eventlog.PageReader, as both logs do),
// else its Read cut as ReadN cuts a page: after n events (n ≤ 0: all), or after
// the event that brings the payload to maxBytes (maxBytes ≤ 0: no bound).
func readN(ctx context.Context, r actors.StreamReader, sessionID string, fromSeq uint64, n, maxBytes int) ([]messages.Envelope, error) {
	if pr, ok := r.(eventlog.PageReader); ok {
		return pr.ReadN(ctx, sessionID, fromSeq, n, maxBytes)
	}
	events, err := r.Read(ctx, sessionID, fromSeq)
	if err != nil {
		return nil, err
	}
	if n > 0 && len(events) > n {
		events = events[:n]
	}
	if maxBytes > 0 {
		size := 0
		for i, e := range events {
			if size += len(e.Payload); size >= maxBytes {
				return events[:i+1], nil
			}
		}
	}
	return events, nil
}

// timedClaims is a timedStore whose store claims sessions (actors.ClaimingStore),
// each claim's latency observed as an append's.
type timedClaims struct {
	timedStore
	claims actors.ClaimingStore
}

// Claim implements actors.ClaimingStore.
func (s timedClaims) Claim(ctx context.Context, events []messages.Envelope) error {
	start := time.Now()
	err := s.claims.Claim(ctx, events)
	s.appended.Observe(time.Since(start).Seconds())
	return err
}

// timed returns store with each append's (and claim's) latency observed.
func timed(store actors.EventStore, appended prometheus.Observer) actors.EventStore {
	t := timedStore{EventStore: store, appended: appended}
	if c, ok := store.(actors.ClaimingStore); ok {
		return timedClaims{timedStore: t, claims: c}
	}
	return t
}

// logBackend names an event log's implementation for the backend label: its
// package ("sqlite", "clickhouse"), or the type of a log from elsewhere.
func logBackend(log any) string {
	t := strings.TrimPrefix(fmt.Sprintf("%T", log), "*")
	if pkg, _, ok := strings.Cut(t, "."); ok {
		return pkg
	}
	return t
}

// actorRestarts counts the restarts of the node's actors that their supervisors
// decided (protoactor's SupervisorEvent with RestartDirective), by kind, and the
// actors their supervisors stopped after too many failures (StopDirective), which
// it also logs as an error: protoactor logs its supervision events at DEBUG only,
// so a session whose actor failed five times in ten seconds stopped with nothing
// above INFO said of it, and its tasks waited until something started it again.
func actorRestarts(reg prometheus.Registerer, system *actor.ActorSystem, logger *slog.Logger, red *redact.Redactor) {
	restarts := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "actor", Name: "restarts_total",
		Help: "Actor restarts decided by their supervisors (after a panic), by kind: session, memory, or other."}, []string{"kind"})
	stops := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "actor", Name: "given_up_total",
		Help: "Actors their supervisors stopped after too many failures in a row, by kind: session, memory, or other. A session's host starts it again at once, and the task it failed on fails (session_failed)."}, []string{"kind"})
	reg.MustRegister(restarts, stops)
	for _, k := range []string{"session", "memory"} {
		restarts.WithLabelValues(k) // present at 0
		stops.WithLabelValues(k)
	}
	system.EventStream.Subscribe(func(evt any) {
		e, ok := evt.(*actor.SupervisorEvent)
		if !ok || e.Child == nil {
			return
		}
		switch e.Directive {
		case actor.RestartDirective:
			restarts.WithLabelValues(actorKind(e.Child.Id)).Inc()
		case actor.StopDirective:
			kind := actorKind(e.Child.Id)
			stops.WithLabelValues(kind).Inc()
			// Redacted before it is cut: a secret across the cut would leave its
			// head, which the log's redaction no longer recognizes.
			reason := red.String(fmt.Sprint(e.Reason))
			if len(reason) > 300 {
				reason = strings.ToValidUTF8(reason[:300], "") + "…"
			}
			logger.Error("an actor failed too many times in a row: its supervisor stopped it", "kind", kind, "actor", e.Child.Id, "last_failure", reason)
		}
	})
}

// actorKind names the kind of the actor whose PID is id, from the name of its
// top-level ancestor (never the actor's own name: a session's ID is no label).
func actorKind(id string) string {
	top, _, _ := strings.Cut(id, "/")
	switch {
	case top == "sessions" && strings.Contains(id, "/"):
		return "session"
	case strings.HasPrefix(top, "memory-"):
		return "memory"
	default:
		return "other"
	}
}

// deltaTailTimeouts exports troupe_deltas_tail_timeouts_total from hub's count
// (Hub.tailTimeouts), read at each scrape.
func deltaTailTimeouts(hub *Hub) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "deltas", Name: "tail_timeouts_total",
		Help: "Model answers that a watcher of deltas held the full 1 s for the end of their call's deltas from another node, which never came (lost on the bus, or never sent): its client got an empty delta with reset, then the answer. Stays 0 on the embedded bus."},
		func() float64 { return float64(hub.tailTimeouts.Load()) })
}

// LagReporter is a bus subscriber that knows its consumers' lag
// (kafka.Subscriber.ConsumerLag): each is called with the lag in records of every
// partition it consumes now.
type LagReporter interface {
	ConsumerLag(each func(topic string, partition int, lag int64))
}

// busLag exports troupe_bus_consumer_lag from the node's bus subscribers that are
// LagReporters, read at each scrape.
type busLag struct {
	desc *prometheus.Desc
	subs []message.Subscriber
}

func newBusLag(subs ...message.Subscriber) *busLag {
	return &busLag{
		desc: prometheus.NewDesc("troupe_bus_consumer_lag",
			"Records of a partition this node consumes that it has not handled yet (its high watermark as of the latest fetch, less the end of the acked prefix), by topic and partition; the largest of the node's consumers of the partition. Only on a Kafka bus: absent on the embedded bus.",
			[]string{"topic", "partition"}, nil),
		subs: subs,
	}
}

// Describe implements prometheus.Collector.
func (b *busLag) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

// Collect implements prometheus.Collector.
func (b *busLag) Collect(ch chan<- prometheus.Metric) {
	type tp struct {
		topic     string
		partition int
	}
	lags := map[tp]int64{} // a subscriber in two roles reports the same lags twice
	for _, s := range b.subs {
		r, ok := s.(LagReporter)
		if !ok {
			continue
		}
		r.ConsumerLag(func(topic string, partition int, lag int64) {
			k := tp{topic, partition}
			if old, ok := lags[k]; !ok || lag > old {
				lags[k] = lag
			}
		})
	}
	for k, lag := range lags {
		ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, float64(lag), k.topic, strconv.Itoa(k.partition))
	}
}
