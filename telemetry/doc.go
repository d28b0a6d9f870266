// Package telemetry sets up a node's OpenTelemetry traces and carries trace context
// across the bus.
//
// Traces enter from the environment: FromEnv reads the standard OTEL_* variables
// (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, …) through the
// contrib autoexport package, and builds an SDK tracer provider with a batching
// exporter. Tracing is off unless those variables ask for an exporter: then the
// provider is OpenTelemetry's no-op one, and a span costs an interface call.
//
// Trace context leaves and enters a process in the W3C traceparent format: Inject and
// Extract put it in and read it from a bus message's metadata (a Watermill
// message.Metadata is a map of strings), and TraceParent and ParseTraceParent turn a
// span context into the one string a recorded task keeps, so that a session resumed
// on another node continues its task's trace.
//
// The span and attribute names follow the OpenTelemetry GenAI semantic conventions
// (semconv v1.40.0); Troupe's own attributes are named troupe.*.
package telemetry
