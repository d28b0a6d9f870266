package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMalformedOTLPHeadersAreLoggedRedacted: OTEL_EXPORTER_OTLP_HEADERS written
// as HTTP headers ("Name: value", no "=") or with a bad percent escape is
// reported by the exporter as it starts; the report goes to the node's log, and the
// header's value, a secret, does not.
func TestMalformedOTLPHeadersAreLoggedRedacted(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer collector.Close()
	for _, tc := range []struct{ headers, secret string }{
		{"X-Honeycomb-Team: hcTeamValue0193847", "hcTeamValue0193847"},
		{"api-key=k3yV4lue%zz9812", "k3yV4lue"},
	} {
		t.Run(tc.headers, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
			t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", tc.headers)
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--model", "offline", "echo hi"}, &out, &errb, options{})
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			log := errb.String()
			if strings.Contains(log, tc.secret) {
				t.Errorf("the node's log holds the header's value %q:\n%s", tc.secret, log)
			}
			if !strings.Contains(log, "header") {
				t.Errorf("the node's log does not say the headers were not understood:\n%s", log)
			}
		})
	}
}
