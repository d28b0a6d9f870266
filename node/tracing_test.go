package node_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/telemetry"
	"github.com/troupe-run/troupe/tools"
)

// gotSpan is a span as an OTLP receiver got it, flattened for assertions.
type gotSpan struct {
	Name                    string
	Kind                    tracepb.Span_SpanKind
	TraceID, SpanID, Parent string
	Attrs                   map[string]string
	Node                    string // the resource's service.instance.id
	Service                 string // the resource's service.name
	Error                   bool
	Status                  string // the status's message
}

// otlpReceiver is an OTLP/HTTP trace receiver (protobuf), as a collector would be.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []gotSpan
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&export)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) add(export *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range export.ResourceSpans {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, gotSpan{Name: s.Name, Kind: s.Kind, TraceID: hex.EncodeToString(s.TraceId),
					SpanID: hex.EncodeToString(s.SpanId), Parent: hex.EncodeToString(s.ParentSpanId), Attrs: attrMap(s.Attributes),
					Node: res["service.instance.id"], Service: res["service.name"], Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					Status: s.GetStatus().GetMessage()})
			}
		}
	}
}

func (r *otlpReceiver) got() []gotSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gotSpan(nil), r.spans...)
}

// attrMap flattens OTLP attributes to strings (arrays joined by ",").
func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = anyString(kv.Value)
	}
	return m
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.Values {
			parts = append(parts, anyString(e))
		}
		return strings.Join(parts, ",")
	}
	return ""
}

// setOTLPEnv points the OTEL_* environment at the receiver, as a user enables traces.
func setOTLPEnv(t *testing.T, r *otlpReceiver) {
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "troupe-test")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
}

// TestClusterTraceIsWhole runs a task submitted on a workers node (tools and models)
// on an agents node (sessions) that asks the workers node for every model and tool
// call over Kafka, with traces exported by OTLP/HTTP as the OTEL_* environment says:
// the receiver gets the spans of both nodes in one trace, nested submit → task →
// step → call → the call performed remotely, with the GenAI attributes.
func TestClusterTraceIsWhole(t *testing.T) {
	recv := newOTLPReceiver(t)
	setOTLPEnv(t, recv)
	c := newTestCluster(t, 0)
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "call_1", Name: "ledger", Arguments: `{"amount":7}`}}, Usage: messages.Usage{PromptTokens: 40, CompletionTokens: 9}},
		{Content: "paid", Usage: messages.Usage{PromptTokens: 60, CompletionTokens: 2}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The model names its provider, as the OpenAI-compatible models do.
	named := withProvider{model, "troupe.scripted"}
	agents, stopAgents := clusterNode(t, c.k, c.group, c.log, "agents", node.RoleSessions, []tools.Tool{c.led.tool("agents")}, named)
	workers, stopWorkers := clusterNode(t, c.k, c.group, c.log, "workers", node.RoleTools|node.RoleModels, []tools.Tool{c.led.tool("workers")}, named)
	if agents.Traces().Exporter() != "otlp" || workers.Traces().Exporter() != "otlp" {
		t.Fatalf("exporters %q and %q, want otlp from OTEL_TRACES_EXPORTER", agents.Traces().Exporter(), workers.Traces().Exporter())
	}
	session, err := workers.Submit(context.Background(), node.Task{Input: "pay 7", SessionID: "traced-1"})
	if err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, agents, []string{session}, 90*time.Second)
	// Close flushes each node's spans to the receiver.
	stopAgents()
	stopWorkers()

	spans := recv.got()
	byName := map[string][]gotSpan{}
	ids := map[string]gotSpan{}
	traces := map[string]bool{}
	for _, s := range spans {
		if s.Attrs["gen_ai.conversation.id"] != session {
			t.Errorf("span %s@%s: gen_ai.conversation.id %q, want %q", s.Name, s.Node, s.Attrs["gen_ai.conversation.id"], session)
		}
		byName[s.Name+"@"+s.Node] = append(byName[s.Name+"@"+s.Node], s)
		ids[s.SpanID] = s
		traces[s.TraceID] = true
	}
	var names []string
	for n := range byName {
		names = append(names, fmt.Sprintf("%s×%d", n, len(byName[n])))
	}
	sort.Strings(names)
	t.Logf("spans: %v", names)
	if len(traces) != 1 {
		t.Fatalf("the session's spans are in %d traces, want 1: %v", len(traces), names)
	}
	one := func(key string) gotSpan {
		t.Helper()
		if len(byName[key]) != 1 {
			t.Fatalf("%d spans %q, want 1 (have %v)", len(byName[key]), key, names)
		}
		return byName[key][0]
	}
	submit := one("submit_task@workers")
	task := one("invoke_agent default@agents")
	step1, step2 := one("step 1@agents"), one("step 2@agents")
	tool := one("execute_tool ledger@agents")
	remoteTool := one("execute_tool ledger@workers")
	if len(byName["chat scripted@agents"]) != 2 || len(byName["chat scripted@workers"]) != 2 {
		t.Fatalf("chat spans: %v, want 2 on each node", names)
	}
	// Nesting: submit → task → steps → calls → the calls performed remotely.
	parentOf := func(s gotSpan, want gotSpan, what string) {
		t.Helper()
		if s.Parent != want.SpanID {
			t.Errorf("%s: parent %s (%s), want %s (%s)", what, s.Parent, ids[s.Parent].Name, want.SpanID, want.Name)
		}
	}
	if submit.Parent != "" || submit.Kind != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Errorf("submit_task: parent %q kind %v, want a root producer span", submit.Parent, submit.Kind)
	}
	parentOf(task, submit, "invoke_agent")
	parentOf(step1, task, "step 1")
	parentOf(step2, task, "step 2")
	parentOf(tool, step1, "execute_tool")
	parentOf(remoteTool, tool, "the remote execute_tool")
	for _, chat := range byName["chat scripted@agents"] {
		var remote *gotSpan
		for _, r := range byName["chat scripted@workers"] {
			if r.Parent == chat.SpanID {
				remote = &r
			}
		}
		if remote == nil {
			t.Errorf("chat span %s (%s) has no remote child on the workers node", chat.SpanID, chat.Attrs["troupe.effect.key"])
		} else if remote.Kind != tracepb.Span_SPAN_KIND_SERVER || remote.Attrs["troupe.remote"] != "true" || remote.Attrs["gen_ai.provider.name"] != "troupe.scripted" {
			t.Errorf("remote chat span: kind %v attrs %v", remote.Kind, remote.Attrs)
		}
		if chat.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("chat span kind %v, want client", chat.Kind)
		}
		want := step1
		if chat.Attrs["troupe.step"] == "2" {
			want = step2
		}
		parentOf(chat, want, "chat of step "+chat.Attrs["troupe.step"])
	}
	// GenAI attributes.
	wantAttrs := func(s gotSpan, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if s.Attrs[k] != v {
				t.Errorf("%s@%s: %s = %q, want %q (all: %v)", s.Name, s.Node, k, s.Attrs[k], v, s.Attrs)
			}
		}
	}
	wantAttrs(task, map[string]string{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "default",
		"gen_ai.conversation.id": session, "gen_ai.usage.input_tokens": "100", "gen_ai.usage.output_tokens": "11", "troupe.steps": "2"})
	wantAttrs(tool, map[string]string{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "ledger", "gen_ai.tool.call.id": "call_1"})
	wantAttrs(remoteTool, map[string]string{"gen_ai.tool.name": "ledger", "gen_ai.tool.call.id": "call_1", "troupe.remote": "true"})
	for _, chat := range byName["chat scripted@agents"] {
		want := map[string]string{"gen_ai.operation.name": "chat", "gen_ai.response.model": "scripted", "gen_ai.provider.name": "troupe.scripted",
			"gen_ai.usage.input_tokens": "40", "gen_ai.usage.output_tokens": "9", "gen_ai.response.finish_reasons": "tool_calls"}
		if chat.Attrs["troupe.step"] == "2" {
			want["gen_ai.usage.input_tokens"], want["gen_ai.usage.output_tokens"], want["gen_ai.response.finish_reasons"] = "60", "2", "stop"
		}
		wantAttrs(chat, want)
	}
	if submit.Service != "troupe-test" || task.Service != "troupe-test" {
		t.Errorf("service.name %q, %q: want OTEL_SERVICE_NAME's", submit.Service, task.Service)
	}
}

// TestNodeTracesOffWithoutOTELEnvironment: a node started with no OTEL_* variables
// creates no exporter, and runs its task as ever.
func TestNodeTracesOffWithoutOTELEnvironment(t *testing.T) {
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	n := nodetest.Start(t, node.Config{})
	if n.Traces().Enabled() || n.Traces().Exporter() != "" {
		t.Fatalf("traces on without OTEL_* variables: exporter %q", n.Traces().Exporter())
	}
	events := nodetest.Run(t, n, "untraced", "echo hi")
	for _, e := range events {
		if e.Type == messages.TypeTaskSubmitted && strings.Contains(string(e.Payload), "traceparent") {
			t.Fatalf("a task recorded a traceparent with tracing off: %s", e.Payload)
		}
	}
}

// stallingTool blocks until its call's context ends (the node stops), after saying
// it started; with answer set it answers at once instead.
type stallingTool struct {
	started chan struct{}
	answer  string
}

func (b stallingTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "slow", Description: "takes its time"}
}

func (b stallingTool) Call(ctx context.Context, c tools.Call) (string, error) {
	if b.answer != "" {
		return b.answer, nil
	}
	select {
	case b.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return "", ctx.Err()
}

// spansByName indexes recorded spans by name.
func spansByName(spans tracetest.SpanStubs) map[string][]tracetest.SpanStub {
	m := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		m[s.Name] = append(m[s.Name], s)
	}
	return m
}

func spanAttr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// TestResumedTaskKeepsItsTrace stops a node while its task waits on a tool call and
// starts another on the same data: the resumed task's spans are in the trace the task
// was submitted under, the first node's ended as interrupted, and the tool call
// issued again is spanned under the resumed task.
func TestResumedTaskKeepsItsTrace(t *testing.T) {
	dir := t.TempDir()
	model := func() llm.Model {
		m, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
			{ToolCalls: []messages.ToolCall{{ID: "call_s", Name: "slow", Arguments: `{}`}}},
			{Content: "done"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	exp1, exp2 := tracetest.NewInMemoryExporter(), tracetest.NewInMemoryExporter()
	tp1 := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp1))
	tp2 := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp2))
	t.Cleanup(func() { _ = tp1.Shutdown(context.Background()); _ = tp2.Shutdown(context.Background()) })

	started := make(chan struct{}, 1)
	n1, stop1 := startWithTask(t, node.Config{DataDir: dir, Model: model(), Tools: []tools.Tool{stallingTool{started: started}},
		Traces: telemetry.With(tp1), HandoffGrace: heldCallGrace}, node.Task{Input: "go slow", SessionID: "resumed"})
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the tool call did not start")
	}
	if err := n1.Close(); err != nil {
		t.Fatal(err)
	}
	stop1()

	n2 := nodetest.Start(t, node.Config{DataDir: dir, Model: model(), Tools: []tools.Tool{stallingTool{answer: "slow but sure"}},
		Traces: telemetry.With(tp2)})
	waitCompleted(t, n2, []string{"resumed"}, 10*time.Second)
	if err := n2.Close(); err != nil {
		t.Fatal(err)
	}

	first, second := spansByName(exp1.GetSpans()), spansByName(exp2.GetSpans())
	if len(first["submit_task"]) != 1 || len(first["invoke_agent default"]) != 1 || len(second["invoke_agent default"]) != 1 {
		t.Fatalf("spans: first node %v, second node %v", keys(first), keys(second))
	}
	submit, task1, task2 := first["submit_task"][0], first["invoke_agent default"][0], second["invoke_agent default"][0]
	traceID := submit.SpanContext.TraceID()
	if task1.SpanContext.TraceID() != traceID || task2.SpanContext.TraceID() != traceID {
		t.Fatalf("trace IDs: submitted %s, first run %s, resumed %s", traceID, task1.SpanContext.TraceID(), task2.SpanContext.TraceID())
	}
	if task2.Parent.SpanID() != submit.SpanContext.SpanID() {
		t.Errorf("the resumed task's parent is %s, want the submit span %s", task2.Parent.SpanID(), submit.SpanContext.SpanID())
	}
	if spanAttr(task1, "troupe.interrupted") != "true" || spanAttr(task2, "troupe.resumed") != "true" {
		t.Errorf("first run interrupted=%q, second run resumed=%q", spanAttr(task1, "troupe.interrupted"), spanAttr(task2, "troupe.resumed"))
	}
	if spanAttr(task2, "troupe.steps") != "2" {
		t.Errorf("resumed task steps %q, want 2", spanAttr(task2, "troupe.steps"))
	}
	tools := second["execute_tool slow"]
	if len(tools) != 1 || tools[0].SpanContext.TraceID() != traceID || spanAttr(tools[0], "gen_ai.tool.call.id") != "call_s" {
		t.Fatalf("the resumed tool call's spans: %+v", tools)
	}
	steps := second["step 1"]
	if len(steps) != 1 || tools[0].Parent.SpanID() != steps[0].SpanContext.SpanID() || steps[0].Parent.SpanID() != task2.SpanContext.SpanID() {
		t.Errorf("the resumed tool call is not under the resumed step 1 under the resumed task")
	}
	if len(second["chat scripted"]) != 1 || len(first["chat scripted"]) != 1 {
		t.Errorf("chat spans: %d on the first node, %d on the second, want 1 each", len(first["chat scripted"]), len(second["chat scripted"]))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// BenchmarkLoopNodeTraced is BenchmarkLoopNode with tracing on (every span made and
// batched, then dropped by a no-op exporter): the cost of traces when they are on.
func BenchmarkLoopNodeTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	n := nodetest.Start(b, node.Config{Model: benchScript(b), Traces: telemetry.With(tp)})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		runTask(b, n, fmt.Sprintf("bench-%d", i))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*stepsPerTask), "µs/step")
}

// TestHTTPTraceparentIsTheTasksParent: a client's traceparent header on POST
// /v1/tasks makes the task's spans part of the client's trace.
func TestHTTPTraceparentIsTheTasksParent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	n := nodetest.Start(t, node.Config{Traces: telemetry.With(tp)})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/tasks", strings.NewReader(`{"input":"echo hi","session_id":"from-client"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/tasks: %s", resp.Status)
	}
	waitCompleted(t, n, []string{"from-client"}, 10*time.Second)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	spans := spansByName(exp.GetSpans())
	submit, task := spans["submit_task"], spans["invoke_agent default"]
	if len(submit) != 1 || len(task) != 1 {
		t.Fatalf("spans %v", keys(spans))
	}
	if submit[0].SpanContext.TraceID().String() != traceID || submit[0].Parent.SpanID().String() != parentID {
		t.Errorf("submit_task in trace %s under %s, want %s under %s", submit[0].SpanContext.TraceID(), submit[0].Parent.SpanID(), traceID, parentID)
	}
	if task[0].SpanContext.TraceID().String() != traceID || task[0].Parent.SpanID() != submit[0].SpanContext.SpanID() {
		t.Errorf("invoke_agent in trace %s under %s", task[0].SpanContext.TraceID(), task[0].Parent.SpanID())
	}
}

// TestMemoryCommandSpansJoinTheTasksTrace: a session on node a whose memory tool
// writes to a namespace node b owns: b's spans of the commands ("memory tool") are
// children of a's tool call spans, in the task's trace.
func TestMemoryCommandSpansJoinTheTasksTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	withTool := func(c *node.Config) {
		c.Model = memoryAgent{}
		c.MemoryTool = &memory.ToolConfig{Namespace: "agent:cluster", Namespaces: []string{"team:0", "team:1", "team:2", "team:3", "team:4",
			"team:5", "team:6", "team:7", "team:8", "team:9", "team:10", "team:11", "team:12", "team:13", "team:14", "team:15"}}
		c.Traces = telemetry.With(tp)
	}
	a := startMemoryClusterNode(t, k, group, shared, "a", withTool)
	b := startMemoryClusterNode(t, k, group, shared, "b", withTool)
	waitPartitionsSplit(t, a.n, b.n)
	ns := namespaceOn(t, b, "team:")
	session := ""
	for i := range 100 {
		if id := fmt.Sprintf("traced-mem-%d", i); a.parts.owns(kafka.PartitionOf(id, memoryClusterPartitions)) {
			session = id
			break
		}
	}
	if _, err := a.n.Submit(context.Background(), node.Task{Input: ns, SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, a.n, []string{session}, 30*time.Second)
	a.stop()
	b.stop()

	spans := spansByName(exp.GetSpans())
	task := spans["invoke_agent default"]
	if len(task) != 1 {
		t.Fatalf("spans %v", keys(spans))
	}
	tools := map[string]tracetest.SpanStub{}
	for name, ss := range spans {
		if strings.HasPrefix(name, "execute_tool ") {
			for _, s := range ss {
				tools[s.SpanContext.SpanID().String()] = s
			}
		}
	}
	// The memory tool's calls for ns travel to b as memory commands of action
	// "tool": an add, a search and an add b refuses.
	var mem []tracetest.SpanStub
	for _, m := range spans["memory tool"] {
		if spanAttr(m, "troupe.memory.namespace") == ns {
			mem = append(mem, m)
		}
	}
	if len(mem) != 3 {
		t.Fatalf("%d spans of memory commands for %s, want 3 (spans %v)", len(mem), ns, keys(spans))
	}
	for _, m := range mem {
		if m.SpanContext.TraceID() != task[0].SpanContext.TraceID() {
			t.Errorf("memory command: trace %s, want the task's %s", m.SpanContext.TraceID(), task[0].SpanContext.TraceID())
		}
		if _, ok := tools[m.Parent.SpanID().String()]; !ok {
			t.Errorf("memory command: parent %s is no tool call span", m.Parent.SpanID())
		}
		if m.SpanKind != trace.SpanKindServer {
			t.Errorf("memory command: kind %v, want server", m.SpanKind)
		}
	}
}

// withProvider is a model that names its provider (gateway.ProviderNamer).
type withProvider struct {
	llm.Model
	provider string
}

func (m withProvider) Provider() string { return m.provider }

// TestChatSpansNameTheProvider: a chat span carries gen_ai.provider.name, that of
// the model asked when it answers, that of the fallback which answered when the
// model asked failed; a model that names no provider gets none.
func TestChatSpansNameTheProvider(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := fakeProvider(t) // refuses the model "down"
	on := func(provider, model string) llm.Model {
		m, err := openai.New(openai.Config{Provider: provider, BaseURL: srv.URL, Model: model})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	unnamed, err := llm.NewScripted(llm.Script{Name: "unnamed", Steps: []llm.ScriptStep{{Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{
		Traces:    telemetry.With(tp),
		Model:     on("openai", "down"),
		Fallbacks: []llm.Model{on("anthropic", "backup")},
		Agents: []node.NamedAgent{
			{Name: "plain", Model: unnamed}, // says no provider
			{Name: "direct", Model: on("ollama", "direct-model")},
		},
	})
	for _, task := range []node.Task{{Input: "hi", SessionID: "fell-back"}, {Input: "hi", SessionID: "no-provider", Agent: "plain"},
		{Input: "hi", SessionID: "direct", Agent: "direct"}} {
		if _, err := n.Submit(context.Background(), task); err != nil {
			t.Fatal(err)
		}
	}
	waitCompleted(t, n, []string{"fell-back", "no-provider", "direct"}, 20*time.Second)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	chats := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if spanAttr(s, "gen_ai.operation.name") == "chat" {
			chats[spanAttr(s, "gen_ai.conversation.id")] = s
		}
	}
	for session, want := range map[string]string{"fell-back": "anthropic", "no-provider": "", "direct": "ollama"} {
		s, ok := chats[session]
		if !ok {
			t.Fatalf("no chat span of session %s (have %v)", session, keys(chats))
		}
		if got := spanAttr(s, "gen_ai.provider.name"); got != want {
			t.Errorf("session %s: chat span %q has gen_ai.provider.name %q, want %q (response model %q)",
				session, s.Name, got, want, spanAttr(s, "gen_ai.response.model"))
		}
	}
}
