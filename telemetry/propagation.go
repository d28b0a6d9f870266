package telemetry

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// propagator is the W3C Trace Context propagator: the traceparent and tracestate
// headers (or metadata keys).
var propagator = propagation.TraceContext{}

// TraceParentKey is the metadata key (and HTTP header) of a W3C traceparent.
const TraceParentKey = "traceparent"

// Inject writes the span context of ctx into md (a bus message's metadata, whose
// type is a map of strings) as W3C traceparent and tracestate. A context without a
// valid span context writes nothing.
func Inject(ctx context.Context, md map[string]string) {
	if md == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, propagation.MapCarrier(md))
}

// Extract returns ctx with the remote span context md carries (W3C traceparent), if
// any.
func Extract(ctx context.Context, md map[string]string) context.Context {
	if md == nil || md[TraceParentKey] == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier(md))
}

// ExtractHTTP is Extract from an HTTP request's headers (a client's traceparent).
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	if h.Get(TraceParentKey) == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// TraceParent returns the W3C traceparent of sc ("00-<trace id>-<span id>-<flags>"),
// or "" when sc is not valid.
func TraceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	md := map[string]string{}
	propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.MapCarrier(md))
	return md[TraceParentKey]
}

// ParseTraceParent returns the remote span context of a W3C traceparent; a value
// that is empty or malformed gives an invalid span context.
func ParseTraceParent(s string) trace.SpanContext {
	if s == "" {
		return trace.SpanContext{}
	}
	ctx := propagator.Extract(context.Background(), propagation.MapCarrier{TraceParentKey: s})
	return trace.SpanContextFromContext(ctx)
}

// TraceState returns the W3C tracestate of sc ("" when it has none).
func TraceState(sc trace.SpanContext) string { return sc.TraceState().String() }

// ParseTraceContext is ParseTraceParent with the tracestate that came with the
// traceparent: a tracestate that is malformed is left out, as the W3C
// propagator leaves it out of a request's headers.
func ParseTraceContext(traceparent, tracestate string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	md := propagation.MapCarrier{TraceParentKey: traceparent}
	if tracestate != "" {
		md["tracestate"] = tracestate
	}
	return trace.SpanContextFromContext(propagator.Extract(context.Background(), md))
}

// ValidTraceContext returns traceparent and tracestate as far as W3C Trace Context
// reads them, as a task records them: "" for a traceparent that is malformed (and
// then for its tracestate too, which has nothing to belong to), and "" for a
// tracestate that is (a member that is no key=value of the grammar, more than 32
// members, a value past 256 characters). What is valid is returned unchanged.
func ValidTraceContext(traceparent, tracestate string) (string, string) {
	if !ParseTraceParent(traceparent).IsValid() {
		return "", ""
	}
	if tracestate != "" {
		if _, err := trace.ParseTraceState(tracestate); err != nil {
			return traceparent, ""
		}
	}
	return traceparent, tracestate
}
