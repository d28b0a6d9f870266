package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestServeStopsCleanlyWhateverTheCollector: node serve whose trace collector
// takes the spans' connection and never answers stops on its signal with exit 0:
// the spans it could not flush within 5 s are a warning, not a failure of the
// node's stop (exit 1 and "close node" at error level, before), which its
// supervisor would count as a crash.
func TestServeStopsCleanlyWhateverTheCollector(t *testing.T) {
	hang := make(chan struct{})
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer collector.Close()
	defer close(hang)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errb := &syncBuffer{}
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--http", addr, "--model", "offline", "--data", t.TempDir()}, io.Discard, errb, options{})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Post("http://"+addr+"/v1/tasks", "application/json", strings.NewReader(`{"input": "echo hi", "session_id": "s-traced"}`))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusAccepted {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node serve took no task\n%s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		resp, err := http.Get("http://" + addr + "/v1/sessions/s-traced")
		if err == nil {
			var b strings.Builder
			_, _ = io.Copy(&b, resp.Body)
			resp.Body.Close()
			if strings.Contains(b.String(), `"completed"`) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task did not complete\n%s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("node serve exited %d\n%s", code, errb.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("node serve did not stop")
	}
	if !strings.Contains(errb.String(), "not every span") {
		t.Fatalf("the node did not say that spans were not exported\n%s", errb.String())
	}
}
