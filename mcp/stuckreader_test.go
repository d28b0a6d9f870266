package mcp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// stallGET is an http.RoundTripper whose GET answers (the client's stream of
// notifications) are never read once stalled: a client whose process hangs, or
// whose proxy stops taking bytes, while its connection stays open.
type stallGET struct {
	mu     sync.Mutex
	bodies []*stalledBody
}

type stalledBody struct {
	rc   io.ReadCloser
	once sync.Once
	gone chan struct{}
}

func (b *stalledBody) Read([]byte) (int, error) {
	<-b.gone
	return 0, io.EOF
}

func (b *stalledBody) Close() error {
	b.once.Do(func() { close(b.gone) })
	return b.rc.Close()
}

func (s *stallGET) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.Method != http.MethodGet {
		return res, err
	}
	b := &stalledBody{rc: res.Body, gone: make(chan struct{})}
	s.mu.Lock()
	s.bodies = append(s.bodies, b)
	s.mu.Unlock()
	res.Body = b
	return res, nil
}

func (s *stallGET) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.bodies {
		_ = b.Close()
	}
}

// A client that stops reading its stream of notifications (GET) must not hold
// up the server's notifications to its other clients: the SDK writes a
// resource's update to each subscribed session in turn, with no write deadline
// (the MCP route lifts it), so an update to the stalled client blocked for good
// once the connection's buffers were full, and with it ResourceUpdated, the
// updates of every other client and the upstream MCP client whose notification
// handler called it. Now the write to the stalled client fails after
// ServerOptions.WriteTimeout and its stream ends.
func TestAClientThatStopsReadingHoldsUpNoOtherClientsNotifications(t *testing.T) {
	// A long URI: each update is about 2 KB.
	uri := "notes://today/" + strings.Repeat("x", 2000)
	src := mcp.Catalog{Resources: []mcp.Resource{{
		Resource: sdk.Resource{URI: uri, Name: "today"},
		Read: func(_ context.Context, uri string) ([]*sdk.ResourceContents, error) {
			return mcp.TextContents(uri, "text/plain", "x"), nil
		},
	}}}
	n := nodetest.Start(t, node.Config{})
	srv := mcp.NewServer(n, mcp.ServerOptions{Sources: []mcp.Source{src}, WriteTimeout: time.Second})
	n.Handle("/mcp", srv.Handler())
	hs := httptest.NewServer(n.Handler())
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stall := &stallGET{}
	defer stall.release()
	stuck, err := sdk.NewClient(&sdk.Implementation{Name: "stuck", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: &http.Client{Transport: stall}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	var got atomic.Int64
	healthy, err := sdk.NewClient(&sdk.Implementation{Name: "healthy", Version: "1"}, &sdk.ClientOptions{
		ResourceUpdatedHandler: func(context.Context, *sdk.ResourceUpdatedNotificationRequest) { got.Add(1) },
	}).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	for _, cs := range []*sdk.ClientSession{stuck, healthy} {
		if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}

	// Enough updates to fill the stalled connection's buffers many times over
	// (20 MB); each must return.
	const updates = 10_000
	for i := range updates {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srv.ResourceUpdated(ctx, uri)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("update %d of %d did not return within 20 s (the healthy client got %d): a client that reads nothing holds the server's notifications",
				i+1, updates, got.Load())
		}
	}
	// The healthy client got them all (the last ones may still be on their way).
	deadline := time.Now().Add(20 * time.Second)
	for got.Load() < updates && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := got.Load(); n != updates {
		t.Fatalf("the healthy client got %d updates of %d", n, updates)
	}
}

// A client's stream of notifications that idles longer than the write timeout
// still gets the next one: the deadline bounds a write, not the gaps between
// them.
func TestAnIdleStreamOutlivesTheWriteTimeout(t *testing.T) {
	src := mcp.Catalog{Resources: []mcp.Resource{{
		Resource: sdk.Resource{URI: "notes://today", Name: "today"},
		Read: func(_ context.Context, uri string) ([]*sdk.ResourceContents, error) {
			return mcp.TextContents(uri, "text/plain", "x"), nil
		},
	}}}
	n := nodetest.Start(t, node.Config{})
	srv := mcp.NewServer(n, mcp.ServerOptions{Sources: []mcp.Source{src}, WriteTimeout: 50 * time.Millisecond})
	n.Handle("/mcp", srv.Handler())
	hs := httptest.NewServer(n.Handler())
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	updated := make(chan struct{}, 8)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "idle", Version: "1"}, &sdk.ClientOptions{
		ResourceUpdatedHandler: func(context.Context, *sdk.ResourceUpdatedNotificationRequest) { updated <- struct{}{} },
	}).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: "notes://today"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		time.Sleep(300 * time.Millisecond) // idle past the write timeout
		if err := srv.ResourceUpdated(ctx, "notes://today"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-updated:
		case <-ctx.Done():
			t.Fatal("an update after an idle gap never came")
		}
	}
}
