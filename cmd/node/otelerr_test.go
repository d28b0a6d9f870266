package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestTraceExportErrorsGoToTheNodesLogRedacted: a collector that refuses the
// node's spans (here 400, echoing the request's Authorization header in its body)
// is told in the node's own log, through its redacting handler: the password of the
// OTLP endpoint's URL and the exporter's header value never show, and the line
// says that traces were not exported.
func TestTraceExportErrorsGoToTheNodesLogRedacted(t *testing.T) {
	var posts atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
		http.Error(w, "refused\n\x1b[31mauth "+r.Header.Get("Authorization"), http.StatusBadRequest)
	}))
	defer collector.Close()
	const password = "collectorPassw0rd42"
	const header = "Basic aGVhZGVyU2VjcmV0VmFsdWU5OQ"
	endpoint := strings.Replace(collector.URL, "http://", "http://otel:"+password+"@", 1)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization="+header)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--model", "offline", "echo hi"}, &out, &errb, options{})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if posts.Load() == 0 {
		t.Fatal("the node sent the collector no spans")
	}
	log := errb.String()
	for _, s := range []string{password, "aGVhZGVyU2VjcmV0VmFsdWU5OQ", "\x1b"} {
		if strings.Contains(log, s) {
			t.Errorf("the node's log holds %q:\n%s", s, log)
		}
	}
	if !strings.Contains(log, "traces") || !strings.Contains(log, "400") {
		t.Errorf("the node's log does not say that the collector refused its spans:\n%s", log)
	}
}
