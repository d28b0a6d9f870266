package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// scrape reads a node's /metrics as Prometheus parses it.
func scrape(t *testing.T, n *node.Node) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	n.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// sampleOf returns the value of the series of name with the labels given as
// name, value pairs (a histogram's: its count), and whether there is one.
func sampleOf(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// wantSample fails the test unless the series has the value want.
func wantSample(t *testing.T, fams map[string]*dto.MetricFamily, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := sampleOf(fams, name, labels...)
	if !ok {
		t.Errorf("/metrics has no %s%v", name, labels)
		return
	}
	if got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// metricsScript is a two-step task: the model calls the calculator, then answers,
// each step with the usage it reports.
func metricsScript(t *testing.T) *llm.Scripted {
	t.Helper()
	m, err := llm.NewScripted(llm.Script{Name: "metered", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}},
			Usage: messages.Usage{PromptTokens: 100, CompletionTokens: 10, CachedTokens: 40, CostUSD: 0.25}},
		{Content: "42", Usage: messages.Usage{PromptTokens: 130, CompletionTokens: 5, CostUSD: 0.5}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// recordedUsage sums the usage of a session's model answers as its log holds them.
func recordedUsage(t *testing.T, events []messages.Envelope) (u messages.Usage) {
	t.Helper()
	for _, e := range events {
		if e.Type != messages.TypeModelResponded {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		r := p.(*messages.ModelResponded)
		u.PromptTokens += r.Usage.PromptTokens
		u.CompletionTokens += r.Usage.CompletionTokens
		u.CachedTokens += r.Usage.CachedTokens
		u.CostUSD += r.Usage.CostUSD
	}
	return u
}

// wantOneTask checks the series of one completed two-step task with the scripted
// usage and one calculator call.
func wantOneTask(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	wantSample(t, fams, 1, "troupe_tasks_total", "agent", "default", "outcome", "submitted")
	wantSample(t, fams, 1, "troupe_tasks_total", "agent", "default", "outcome", "completed")
	wantSample(t, fams, 0, "troupe_tasks_total", "agent", "default", "outcome", "failed")
	wantSample(t, fams, 0, "troupe_tasks_running", "agent", "default")
	wantSample(t, fams, 2, "troupe_steps_total", "agent", "default")
	wantSample(t, fams, 230, "troupe_model_tokens_total", "model", "metered", "kind", "input")
	wantSample(t, fams, 15, "troupe_model_tokens_total", "model", "metered", "kind", "output")
	wantSample(t, fams, 40, "troupe_model_tokens_total", "model", "metered", "kind", "cached")
	wantSample(t, fams, 0.75, "troupe_model_cost_usd_total", "model", "metered")
	wantSample(t, fams, 2, "troupe_model_call_seconds", "model", "metered", "outcome", "ok")
	wantSample(t, fams, 1, "troupe_tool_call_seconds", "tool", "calculator", "outcome", "ok")
	if _, ok := sampleOf(fams, "troupe_tasks_total", "agent", "unknown"); ok {
		t.Error("a task this node recorded counts under agent \"unknown\"")
	}
}

// A task a node runs is counted on its /metrics once: submitted and completed, its
// steps, the tokens and cost its model answers recorded, its model and tool calls'
// latencies, and the log appends of its session. A node restarted over the same log
// refolds the session and counts only the tasks it runs itself.
func TestMetricsCountTasksOncePerNode(t *testing.T) {
	dir := t.TempDir()
	cfg := node.Config{DataDir: dir, Model: metricsScript(t)}
	first, stop := nodetest.StartWithStop(t, cfg)
	events := nodetest.Run(t, first, "metered", "what is 6*7?")
	if u := recordedUsage(t, events); u != (messages.Usage{PromptTokens: 230, CompletionTokens: 15, CachedTokens: 40, CostUSD: 0.75}) {
		stop()
		t.Fatalf("the log holds usage %+v, not the script's", u)
	}
	fams := scrape(t, first)
	wantOneTask(t, fams)
	if appends, _ := sampleOf(fams, "troupe_eventlog_append_seconds", "backend", "sqlite"); appends < 1 {
		t.Errorf("troupe_eventlog_append_seconds{backend=\"sqlite\"} counts %v appends, want some", appends)
	}
	stop()

	second := nodetest.Start(t, cfg)
	fams = scrape(t, second)
	if v, ok := sampleOf(fams, "troupe_tasks_total", "outcome", "completed"); ok && v != 0 {
		t.Errorf("a restarted node counts %v completed tasks before it ran any", v)
	}
	nodetest.Run(t, second, "metered", "and again?")
	wantOneTask(t, scrape(t, second))
}

// refusingOnce is a log that refuses, once, the first batch that holds an event of
// the type given, as a log refuses a batch for its content: the session actor
// panics, and its supervisor restarts it.
type refusingOnce struct {
	eventlog.Log
	typ     messages.Type
	refused atomic.Bool
}

func (l *refusingOnce) Append(ctx context.Context, events []messages.Envelope) error {
	for _, e := range events {
		if e.Type == l.typ && l.refused.CompareAndSwap(false, true) {
			return fmt.Errorf("refused once: %w", eventlog.ErrInvalidEvent)
		}
	}
	return l.Log.Append(ctx, events)
}

// A session actor that panics (its log refused a batch) is restarted by its
// supervisor, and /metrics counts the restart; the refold that follows counts
// nothing of the task again.
func TestMetricsCountActorRestarts(t *testing.T) {
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	log := &refusingOnce{Log: l, typ: messages.TypeToolCallCompleted}
	n := nodetest.Start(t, node.Config{Log: log, Model: metricsScript(t)})
	events := nodetest.Run(t, n, "restarted", "what is 6*7?")
	if !log.refused.Load() {
		t.Fatal("the log refused no batch")
	}
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s after the restart", last.Type)
	}
	fams := scrape(t, n)
	wantSample(t, fams, 1, "troupe_actor_restarts_total", "kind", "session")
	wantOneTask(t, fams)
}

// On Kafka, /metrics has the lag of each partition of troupe.tasks the node
// consumes, and it is 0 once the node has handled what was written.
func TestMetricsBusLagPerPartition(t *testing.T) {
	k := newKafkaEnv(t)
	n := k.nodeWith(t, node.Config{Model: metricsScript(t)})
	nodetest.Run(t, n, "lagging", "what is 6*7?")
	var lags map[string]float64
	waitFor(t, 30*time.Second, "every partition of troupe.tasks at lag 0", func() bool {
		lags = map[string]float64{}
		for _, m := range scrape(t, n)["troupe_bus_consumer_lag"].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["topic"] == messages.TopicTasks {
				lags[labels["partition"]] = m.GetGauge().GetValue()
			}
		}
		if len(lags) != 3 {
			return false
		}
		for _, lag := range lags {
			if lag != 0 {
				return false
			}
		}
		return true
	})
	for p := range 3 {
		if _, ok := lags[strconv.Itoa(p)]; !ok {
			t.Errorf("no lag for partition %d of %s: %v", p, messages.TopicTasks, lags)
		}
	}
}

// The embedded bus has no partitions to lag behind: the series is absent.
func TestMetricsNoBusLagOnTheEmbeddedBus(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: metricsScript(t)})
	nodetest.Run(t, n, "embedded", "what is 6*7?")
	if f := scrape(t, n)["troupe_bus_consumer_lag"]; f != nil && len(f.GetMetric()) > 0 {
		t.Errorf("the embedded bus reports a consumer lag: %v", f)
	}
}

// A task submitted before a restart and resumed by the next node over the same
// data runs and ends under its agent there, not under "unknown": the node learns
// the agent from the events its session folds.
func TestMetricsCountAResumedTaskUnderItsAgent(t *testing.T) {
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	cfg.DataDir = t.TempDir()
	p := stopAtApproval(t, cfg, node.Task{Input: "mail bob", SessionID: "metrics-resumed", Agent: "mailer"})

	second := nodetest.Start(t, cfg)
	// The node resumes the session as it starts: the task runs under its agent.
	waitFor(t, 10*time.Second, "the resumed task running under agent mailer", func() bool {
		v, _ := sampleOf(scrape(t, second), "troupe_tasks_running", "agent", "mailer")
		return v == 1
	})
	if err := second.Approve(context.Background(), "metrics-resumed", p.Call, true, "", messages.ApprovedByAPI); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, second, "metrics-resumed")
	fams := scrape(t, second)
	wantSample(t, fams, 1, "troupe_tasks_total", "agent", "mailer", "outcome", "completed")
	wantSample(t, fams, 0, "troupe_tasks_running", "agent", "mailer")
	wantSample(t, fams, 1, "troupe_steps_total", "agent", "mailer") // the step after the approval
	if _, ok := sampleOf(fams, "troupe_tasks_total", "agent", "mailer", "outcome", "submitted"); ok {
		if v, _ := sampleOf(fams, "troupe_tasks_total", "agent", "mailer", "outcome", "submitted"); v != 0 {
			t.Errorf("the resumed task counts as submitted on the node that resumed it (%v)", v)
		}
	}
	if v, ok := sampleOf(fams, "troupe_tasks_total", "agent", "unknown", "outcome", "completed"); ok && v != 0 {
		t.Errorf("the resumed task ended under agent \"unknown\" (%v)", v)
	}
}

// retriedModel fails its first calls with the errors in fails, then answers "ok".
type retriedModel struct {
	mu    sync.Mutex
	fails []error
}

func (*retriedModel) Name() string { return "retried" }

func (m *retriedModel) Generate(context.Context, llm.Request) (llm.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.fails) > 0 {
		err := m.fails[0]
		m.fails = m.fails[1:]
		return llm.Response{Usage: messages.Usage{PromptTokens: 10}}, err
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "ok"}}, nil
}

// A model call the gateway sends again after a transient failure is counted in
// troupe_model_retries_total, by model and reason: the provider bills each attempt,
// and the session records the call once.
func TestModelRetriesAreCounted(t *testing.T) {
	m := &retriedModel{fails: []error{
		&llm.APIError{StatusCode: 429, Message: "slow down"},
		&llm.APIError{StatusCode: 503, Message: "overloaded"},
		fmt.Errorf("reading the answer: %w", context.DeadlineExceeded),
	}}
	m.fails[2] = fmt.Errorf("%w: %w", llm.ErrTransient, m.fails[2])
	n := nodetest.Start(t, node.Config{Model: m, Gateway: gateway.Config{Retry: gateway.RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.Submit(ctx, node.Task{Input: "hi", SessionID: "retried"}); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, n, []string{"retried"}, 20*time.Second)
	fams := scrape(t, n)
	wantSample(t, fams, 1, "troupe_model_retries_total", "model", "retried", "reason", "rate_limited")
	wantSample(t, fams, 1, "troupe_model_retries_total", "model", "retried", "reason", "server_error")
	wantSample(t, fams, 1, "troupe_model_retries_total", "model", "retried", "reason", "timeout")
}

// rateLimitedModel answers its first call 429 with Retry-After (and says so on
// limited), then answers "ok".
type rateLimitedModel struct {
	calls   atomic.Int32
	limited chan struct{}
}

func (*rateLimitedModel) Name() string { return "limited" }

func (m *rateLimitedModel) Generate(context.Context, llm.Request) (llm.Response, error) {
	if m.calls.Add(1) == 1 {
		close(m.limited)
		return llm.Response{}, &llm.APIError{StatusCode: 429, Message: "slow down", RetryAfter: 2 * time.Second}
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "ok"}}, nil
}

// A model call held back by its provider's cooldown after a 429 (another session's
// call was rate limited) is counted in troupe_model_cooldown_holds_total.
func TestModelCooldownHoldsAreCounted(t *testing.T) {
	m := &rateLimitedModel{limited: make(chan struct{})}
	n := nodetest.Start(t, node.Config{Model: m})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.Submit(ctx, node.Task{Input: "hi", SessionID: "rate-limited"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.limited:
	case <-ctx.Done():
		t.Fatal("no model call")
	}
	if _, err := n.Submit(ctx, node.Task{Input: "hi", SessionID: "held"}); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, n, []string{"rate-limited", "held"}, 20*time.Second)
	fams := scrape(t, n)
	wantSample(t, fams, 1, "troupe_model_cooldown_holds_total", "model", "limited", "action", "waited")
	wantSample(t, fams, 1, "troupe_model_retries_total", "model", "limited", "reason", "rate_limited")
}

// refusingAlways is a log that refuses every batch holding an event of type typ,
// as its content: a session that reaches one fails at every try.
type refusingAlways struct {
	eventlog.Log
	typ     messages.Type
	refused atomic.Int64
}

func (l *refusingAlways) Append(ctx context.Context, events []messages.Envelope) error {
	for _, e := range events {
		if e.Type == l.typ {
			l.refused.Add(1)
			return fmt.Errorf("refused: %w", eventlog.ErrInvalidEvent)
		}
	}
	return l.Log.Append(ctx, events)
}

// A session actor that fails again at each restart is stopped by its supervisor
// after five failures in ten seconds: /metrics counts it, and the node logs it as
// an error. Before, protoactor said so at DEBUG only, and the session sat
// "running" with nothing above INFO in the node's log.
func TestMetricsCountActorsTheirSupervisorsGaveUpOn(t *testing.T) {
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	log := &refusingAlways{Log: l, typ: messages.TypeToolCallCompleted}
	var logged strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelError}))
	n := nodetest.Start(t, node.Config{Log: log, Model: metricsScript(t), Logger: logger})
	if _, err := n.Submit(context.Background(), node.Task{Input: "what is 6*7?", SessionID: "given-up"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the session's supervisor to give up on it", func() bool {
		v, _ := sampleOf(scrape(t, n), "troupe_actor_given_up_total", "kind", "session")
		return v >= 1
	})
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "its supervisor stopped it") || !strings.Contains(logged.String(), "kind=session") {
		t.Errorf("the node logged no error of the session it gave up on:\n%s", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
