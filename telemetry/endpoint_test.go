package telemetry_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/telemetry"
)

// TestOTLPEndpointThatIsNoURLIsRefused: an OTLP endpoint that is no http(s) URL
// (a typo, a missing scheme, a broken IPv6 literal) is an error naming its
// variable, its password redacted, rather than traces sent to the exporter's
// default, https://localhost:4318, or to no host at all.
func TestOTLPEndpointThatIsNoURLIsRefused(t *testing.T) {
	for _, tc := range []struct{ variable, value string }{
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "::not a url"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:hunter2secret@[::1"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://%41"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://collector:4318"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector/v1/traces"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			clearOTELEnv(t)
			t.Setenv(tc.variable, tc.value)
			tr, err := telemetry.FromEnv(context.Background(), telemetry.Options{})
			if err == nil {
				_ = tr.Shutdown(context.Background())
				t.Fatalf("%s=%q: traces on (exporter %q), no error", tc.variable, tc.value, tr.Exporter())
			}
			if !strings.Contains(err.Error(), tc.variable) || strings.Contains(err.Error(), "hunter2secret") {
				t.Fatalf("error does not name %s, or shows the password: %v", tc.variable, err)
			}
		})
	}
	for _, ok := range []string{"http://localhost:4318", "https://otel.example:443/", "HTTP://127.0.0.1:4318/base"} {
		clearOTELEnv(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ok)
		tr, err := telemetry.FromEnv(context.Background(), telemetry.Options{})
		if err != nil {
			t.Fatalf("%q refused: %v", ok, err)
		}
		_ = tr.Shutdown(context.Background())
	}
}
