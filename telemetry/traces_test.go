package telemetry_test

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/troupe-run/troupe/telemetry"
)

// clearOTELEnv unsets (for the test) every variable that could turn tracing on.
func clearOTELEnv(t *testing.T) {
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(k, "")
	}
}

func TestNoOTELEnvironmentCreatesNoExporter(t *testing.T) {
	clearOTELEnv(t)
	tr, err := telemetry.FromEnv(context.Background(), telemetry.Options{InstanceID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Enabled() || tr.Exporter() != "" {
		t.Fatalf("traces on with no OTEL_* variables: exporter %q", tr.Exporter())
	}
	if _, ok := tr.Provider().(*sdktrace.TracerProvider); ok {
		t.Fatal("an SDK provider (with its batcher and exporter) was built with tracing off")
	}
	_, span := tr.Tracer().Start(context.Background(), "x")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatal("a span of tracing that is off records")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestOTELEnvironmentChoosesTheExporter(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		exporter string // "" off
		err      string
	}{
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, "", ""},
		{"endpoint alone means otlp", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, "otlp", ""},
		{"traces endpoint alone means otlp", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, "otlp", ""},
		{"otlp over grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, "otlp", ""},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, "console", ""},
		{"sdk disabled", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, "", ""},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkinx"}, "", "OTEL_TRACES_EXPORTER"},
		{"unknown protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, "", `OTEL_EXPORTER_OTLP_PROTOCOL="carrier-pigeon"`},
		// An OTLP endpoint alone chose the exporter: the error names the protocol
		// variable, not an empty OTEL_TRACES_EXPORTER.
		{"unknown protocol of an endpoint alone", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "carrier-pigeon"}, "", `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="carrier-pigeon"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearOTELEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			tr, err := telemetry.FromEnv(context.Background(), telemetry.Options{})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %s", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Shutdown(context.Background())
			if tr.Exporter() != c.exporter || tr.Enabled() != (c.exporter != "") {
				t.Fatalf("exporter %q (enabled %v), want %q", tr.Exporter(), tr.Enabled(), c.exporter)
			}
		})
	}
}

func TestTraceParentRoundTrip(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	_, span := tp.Tracer("t").Start(context.Background(), "s")
	sc := span.SpanContext()
	tp0 := telemetry.TraceParent(sc)
	if !strings.HasPrefix(tp0, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-") {
		t.Fatalf("traceparent %q of %v", tp0, sc)
	}
	back := telemetry.ParseTraceParent(tp0)
	if back.TraceID() != sc.TraceID() || back.SpanID() != sc.SpanID() || !back.IsRemote() {
		t.Fatalf("parsed %v, want the remote %v", back, sc)
	}
	md := map[string]string{}
	telemetry.Inject(trace.ContextWithSpanContext(context.Background(), sc), md)
	if md[telemetry.TraceParentKey] != tp0 {
		t.Fatalf("metadata %v", md)
	}
	if got := trace.SpanContextFromContext(telemetry.Extract(context.Background(), md)); got.TraceID() != sc.TraceID() {
		t.Fatalf("extracted %v", got)
	}
	for _, bad := range []string{"", "00-zz-yy-01", "garbage"} {
		if telemetry.ParseTraceParent(bad).IsValid() {
			t.Errorf("%q parsed as valid", bad)
		}
	}
	empty := map[string]string{}
	telemetry.Inject(context.Background(), empty)
	if len(empty) != 0 {
		t.Errorf("a context without a span injected %v", empty)
	}
}
