package mcp_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
)

// records keeps the records logged to it, at every level.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// count returns how many records mention what, at level and at other levels.
func (h *records) count(level slog.Level, what string) (at, other int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if !strings.Contains(strings.ToLower(r.Message), what) {
			continue
		}
		if r.Level == level {
			at++
		} else {
			other++
		}
	}
	return at, other
}

// A client without a stream of notifications (GET) answers none of the pings
// of its session: that is no warning each time, but a line at debug level.
func TestServerHTTPPingsUnansweredAreNotWarnings(t *testing.T) {
	logs := &records{}
	srv := mcp.NewServer(&gateNode{}, mcp.ServerOptions{SessionTimeout: 900 * time.Millisecond, Logger: slog.New(logs)})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	url := hs.URL
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for {
		if debug, other := logs.count(slog.LevelDebug, "ping"); debug+other >= 5 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no unanswered pings logged")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if debug, other := logs.count(slog.LevelDebug, "ping"); other > 0 {
		t.Errorf("%d pings unanswered logged at debug level and %d at others; want none at others", debug, other)
	}
}
