package a2a

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/tools"
)

func TestPushSenderRefusesLoopbackByDefault(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	s, err := NewPushSender(nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Send(context.Background(), &sdk.PushConfig{URL: srv.URL + "/hook"}, []byte(`{}`))
	if !errors.Is(err, tools.ErrAddressRefused) {
		t.Fatalf("err %v, want the address refused", err)
	}
	if hits.Load() != 0 {
		t.Fatalf("the webhook was called %d times", hits.Load())
	}
}

func TestPushSenderRetriesWithBackoffThenDelivers(t *testing.T) {
	var hits atomic.Int64
	var token, body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		token.Store(r.Header.Get("X-A2A-Notification-Token"))
		body.Store(string(b))
	}))
	defer srv.Close()
	s, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.backoff = 20 * time.Millisecond
	start := time.Now()
	if err := s.Send(context.Background(), &sdk.PushConfig{URL: srv.URL, Token: "tok"}, []byte(`{"id":"t1"}`)); err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 3 || token.Load() != "tok" || body.Load() != `{"id":"t1"}` {
		t.Fatalf("hits %d, token %v, body %v", hits.Load(), token.Load(), body.Load())
	}
	if waited := time.Since(start); waited < 60*time.Millisecond {
		t.Fatalf("two retries after 20ms and 40ms took %s", waited)
	}
}

func TestPushSenderGivesUpOnClientErrors(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	s, _ := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	s.backoff = time.Millisecond
	if err := s.Send(context.Background(), &sdk.PushConfig{URL: srv.URL}, []byte(`{}`)); err == nil || hits.Load() != 1 {
		t.Fatalf("err %v after %d calls; a 404 is not retried", err, hits.Load())
	}
}
