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

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
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
					Node: res["service.instance.id"], Service: res["service.name"], Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR})
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
	agents, stopAgents := clusterNode(t, c.k, c.group, c.log, "agents", node.RoleSessions, []tools.Tool{c.led.tool("agents")}, model)
	workers, stopWorkers := clusterNode(t, c.k, c.group, c.log, "workers", node.RoleTools|node.RoleModels, []tools.Tool{c.led.tool("workers")}, model)
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
		} else if remote.Kind != tracepb.Span_SPAN_KIND_SERVER || remote.Attrs["troupe.remote"] != "true" {
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
		want := map[string]string{"gen_ai.operation.name": "chat", "gen_ai.response.model": "scripted",
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
