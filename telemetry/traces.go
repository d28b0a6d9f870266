package telemetry

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// TracerName is the instrumentation scope of Troupe's spans.
const TracerName = "github.com/troupe-run/troupe"

// DefaultServiceName is the service.name of a node's spans when neither
// OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES names one.
const DefaultServiceName = "troupe"

// Traces is a process's tracing: a tracer provider and, when tracing is on, the
// exporter behind it. The zero value is not usable; use FromEnv, Off or With.
//
// Its methods are safe for concurrent use.
type Traces struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
	// sdk is the provider FromEnv built (nil when off or given): Shutdown flushes it.
	sdk *sdktrace.TracerProvider
	// exporter names the exporter FromEnv chose ("otlp", "console", …); "" when off.
	exporter string
}

// Off returns tracing that is off: OpenTelemetry's no-op provider.
func Off() *Traces {
	p := noop.NewTracerProvider()
	return &Traces{provider: p, tracer: p.Tracer(TracerName)}
}

// With returns tracing through a provider the caller owns (a test's, with an
// in-memory exporter, or one an embedding program set up). Shutdown leaves it alone.
func With(p trace.TracerProvider) *Traces {
	if p == nil {
		return Off()
	}
	_, off := p.(noop.TracerProvider)
	t := &Traces{provider: p, tracer: p.Tracer(TracerName)}
	if !off {
		t.exporter = "given"
	}
	return t
}

// Enabled reports whether spans go anywhere.
func (t *Traces) Enabled() bool { return t.exporter != "" }

// Exporter names the exporter spans go to: "otlp", "console", "given" (With), or ""
// when tracing is off.
func (t *Traces) Exporter() string { return t.exporter }

// Provider returns the tracer provider.
func (t *Traces) Provider() trace.TracerProvider { return t.provider }

// Tracer returns Troupe's tracer.
func (t *Traces) Tracer() trace.Tracer { return t.tracer }

// Shutdown exports the spans still buffered and stops the exporter FromEnv built,
// within ctx. Tracing that is off or given (With) has nothing to stop. It is
// idempotent.
func (t *Traces) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	if err := t.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: flush and stop the trace exporter: %w", err)
	}
	return nil
}

// Options are what FromEnv adds to the environment's configuration.
type Options struct {
	// ServiceName is the service.name when the environment names none (default
	// DefaultServiceName).
	ServiceName string
	// InstanceID, when set, is the service.instance.id (a node's ID) unless the
	// environment sets one.
	InstanceID string
	// Logger takes the warnings of settings FromEnv reads past (default
	// slog.Default()).
	Logger *slog.Logger
}

// Environment variables that turn tracing on (FromEnv).
const (
	envTracesExporter  = "OTEL_TRACES_EXPORTER"
	envOTLPEndpoint    = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envOTLPTracesEndpt = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envSDKDisabled     = "OTEL_SDK_DISABLED"
	// The OTLP exporter's protocol (grpc or http/protobuf), named in errors.
	envOTLPProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envOTLPTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// FromEnv sets up tracing from the standard OTEL_* environment variables. Tracing is
// on when OTEL_TRACES_EXPORTER names an exporter other than "none" ("otlp",
// "console"), or when it is unset and OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (then the exporter is OTLP, over
// OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf by default, or grpc). Otherwise, or when
// OTEL_SDK_DISABLED is true, it is off: no exporter is created and Off is returned.
//
// When on, spans are batched (OTEL_BSP_* tune the batches), sampled as
// OTEL_TRACES_SAMPLER says (parent-based always-on by default), and carry the
// resource of OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, with opts' defaults.
// An unknown exporter or protocol is an error.
func FromEnv(ctx context.Context, opts Options) (*Traces, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv(envSDKDisabled)), "true") {
		return Off(), nil
	}
	exporter := strings.TrimSpace(os.Getenv(envTracesExporter))
	if exporter == "" && os.Getenv(envOTLPEndpoint) == "" && os.Getenv(envOTLPTracesEndpt) == "" {
		return Off(), nil
	}
	if exporter == "" {
		exporter = "otlp"
	}
	if exporter == "otlp" {
		if err := checkEndpoints(); err != nil {
			return nil, err
		}
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %s: %w", exporterSettings(exporter), err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return Off(), nil
	}
	res, err := newResource(ctx, opts)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(spanLimits(cmp.Or(opts.Logger, slog.Default()))))
	return &Traces{provider: sdk, tracer: sdk.Tracer(TracerName), sdk: sdk, exporter: exporter}, nil
}

// DefaultAttributeValueLimit bounds the string values of spans' attributes, in
// bytes, when neither OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT nor
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT sets a bound (OpenTelemetry's default is
// none): a name a model makes up (gen_ai.tool.name) may be of any length.
const DefaultAttributeValueLimit = 4 << 10

// Environment variables that bound the string values of spans' attributes: the
// first set to a value other than empty decides.
var attributeValueLimitEnv = [...]string{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"}

// spanLimits are the SDK's span limits of the OTEL_SPAN_* environment, with the
// attribute value limit of attributeValueLimitEnv (a negative one is no bound),
// DefaultAttributeValueLimit when it sets none. A value that is no integer ("4k",
// or one past an int) keeps DefaultAttributeValueLimit and is named in a warning
// to logger: the SDK would log it where no one looks and drop the bound.
func spanLimits(logger *slog.Logger) sdktrace.SpanLimits {
	l := sdktrace.NewSpanLimits()
	l.AttributeValueLengthLimit = DefaultAttributeValueLimit
	for _, key := range attributeValueLimitEnv {
		v := strings.TrimSpace(os.Getenv(key))
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			logger.Warn("telemetry: "+key+" is no integer (bytes, or -1 for no bound); spans' attribute values are bounded by the default",
				"value", messages.QuoteHead(v), "default", DefaultAttributeValueLimit)
			break
		}
		l.AttributeValueLengthLimit = n
		break
	}
	return l
}

// checkEndpoints refuses an OTLP endpoint that is no http or https URL with a
// host: the exporter would log the parse error with its own logger and send the
// spans to its default (https://localhost:4318) instead, or to no host (an
// endpoint without its scheme, "collector:4318", parses as a scheme and no host).
func checkEndpoints() error {
	for _, k := range []string{envOTLPEndpoint, envOTLPTracesEndpt} {
		v := strings.TrimSpace(os.Getenv(k))
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		switch {
		case err != nil:
			if i := strings.LastIndex(v, "@"); i >= 0 {
				v = "…" + v[i:] // what may be a user and a password, unparsed
			}
			return fmt.Errorf("telemetry: %s=%q is no URL: want http(s)://HOST:PORT", k, v)
		case !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https"), u.Host == "":
			return fmt.Errorf("telemetry: %s=%q: want an http:// or https:// URL with a host, such as http://localhost:4318", k, redact.URL(v))
		}
	}
	return nil
}

// exporterSettings names the variables that chose the exporter, with their
// values, for an error: OTEL_TRACES_EXPORTER (or the endpoint that means OTLP when
// it is unset) and, for OTLP, the protocol variables that are set.
func exporterSettings(exporter string) string {
	var parts []string
	if v := os.Getenv(envTracesExporter); strings.TrimSpace(v) != "" {
		parts = append(parts, fmt.Sprintf("%s=%q", envTracesExporter, v))
	} else {
		parts = append(parts, fmt.Sprintf("OTLP (%s unset, an OTLP endpoint set)", envTracesExporter))
	}
	if exporter == "otlp" {
		for _, k := range []string{envOTLPProtocol, envOTLPTracesProtocol} {
			if v, ok := os.LookupEnv(k); ok && v != "" {
				parts = append(parts, fmt.Sprintf("%s=%q", k, v))
			}
		}
	}
	return strings.Join(parts, ", ")
}

// newResource is the resource of the environment (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES) over opts' service name and instance ID.
func newResource(ctx context.Context, opts Options) (*resource.Resource, error) {
	name := opts.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	defaults := []resource.Option{resource.WithTelemetrySDK(), resource.WithAttributes(semconv.ServiceName(name))}
	if opts.InstanceID != "" {
		defaults = append(defaults, resource.WithAttributes(semconv.ServiceInstanceID(opts.InstanceID)))
	}
	base, err := resource.New(ctx, defaults...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	env, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// The environment's attributes win over the defaults.
	res, err := resource.Merge(base, env)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return res, nil
}

// EnvSecrets returns the secrets the OTEL_* environment gives the exporters, for a
// redactor to keep out of logs: the values of the headers of
// OTEL_EXPORTER_OTLP_HEADERS and OTEL_EXPORTER_OTLP_TRACES_HEADERS ("key=value,…",
// values percent-encoded; with the credential after a scheme, "Basic <base64>"; an
// entry written "Name: value" too, which the exporter skips and reports), and
// the credentials of the OTLP endpoints' URLs. A collector that refuses spans may
// echo them in its answer, which the exporter's error quotes.
func EnvSecrets() []string {
	var out []string
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		for _, kv := range strings.Split(os.Getenv(k), ",") {
			_, v, ok := strings.Cut(kv, "=")
			if !ok {
				// Written as an HTTP header ("Name: value"): the exporter
				// skips it, and reports it whole.
				_, v, ok = strings.Cut(kv, ":")
			}
			if v = strings.TrimSpace(v); !ok || v == "" {
				continue
			}
			if dec, err := url.PathUnescape(v); err == nil && dec != v {
				out = append(out, redact.HeaderSecrets(dec)...)
			}
			out = append(out, redact.HeaderSecrets(v)...)
		}
	}
	for _, k := range []string{envOTLPEndpoint, envOTLPTracesEndpt} {
		out = append(out, redact.URLSecrets(os.Getenv(k))...)
	}
	return out
}
