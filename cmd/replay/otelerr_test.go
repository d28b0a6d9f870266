package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestForkTraceExportErrorsAreLoggedRedacted: a fork's node exports its spans as
// a node does (OTEL_*). A collector that refuses them (400, echoing the request's
// Authorization header and a terminal escape) is told on the fork's stderr through
// its redacting log, as node serve's is: neither the header's value nor the
// endpoint's password shows, and the line says the traces were not exported. (It
// went to OpenTelemetry's default handler, the standard log package, raw.)
func TestForkTraceExportErrorsAreLoggedRedacted(t *testing.T) {
	dir := t.TempDir()
	if res := runNamed(t, dir, "traced", "q-1", "What is 12 * (7 + 5)?"); res.Output != "144" {
		t.Fatalf("the parent's task: %+v", res)
	}
	var posts atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
		http.Error(w, "refused\n\x1b[31mauth "+r.Header.Get("Authorization"), http.StatusBadRequest)
	}))
	defer collector.Close()
	const password = "forkCollectorPassw0rd7"
	const header = "Basic Zm9ya0hlYWRlclNlY3JldDg4"
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", strings.Replace(collector.URL, "http://", "http://otel:"+password+"@", 1))
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization="+header)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	code, out, errs := replay(t, "fork", "traced", "--at", "3", "--session", "traced-fork", "--data", dir)
	if code != 0 || !strings.Contains(out, "answer: 144") {
		t.Fatalf("fork: %d\n%s\n%s", code, out, errs)
	}
	if posts.Load() == 0 {
		t.Fatal("the fork sent the collector no spans")
	}
	for _, s := range []string{password, "Zm9ya0hlYWRlclNlY3JldDg4", "\x1b"} {
		if strings.Contains(errs, s) {
			t.Errorf("the fork's stderr holds %q:\n%s", s, errs)
		}
	}
	if !strings.Contains(errs, "traces") || !strings.Contains(errs, "400") {
		t.Errorf("the fork's stderr does not say that the collector refused its spans:\n%s", errs)
	}
}
