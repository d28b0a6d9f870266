package mcp_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
)

// countServer is a go-sdk server whose tool "count" counts its calls in n, and
// whose tool "slow" says on started (when not nil) that it runs, and answers when
// its call is cancelled.
func countServer(n *atomic.Int32, started chan<- struct{}) *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "count", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "count"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strconv.Itoa(int(n.Add(1)))}}}, nil, nil
	})
	sdk.AddTool(srv, &sdk.Tool{Name: "slow"}, func(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		if started != nil {
			started <- struct{}{}
		}
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	return srv
}

// A server that forgets the node's session while the node idles (its session
// timeout; the node's pings are further apart) answers the next call's request
// 404: the node initializes a new session and sends the call once more, and the
// tool is performed once.
func TestHTTPSessionExpiredOnTheServer(t *testing.T) {
	var n atomic.Int32
	srv := countServer(&n, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv },
		&sdk.StreamableHTTPOptions{SessionTimeout: 200 * time.Millisecond})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	c := startClient(t, map[string]mcp.ServerConfig{"count": {URL: "http://" + ln.Addr().String() + "/mcp"}},
		func(cfg *mcp.ClientConfig) { cfg.PingInterval = time.Hour })
	if out := mustCall(t, c, "count__count", "{}"); out != "1" {
		t.Fatalf("count answered %q", out)
	}
	waitFor(t, 10*time.Second, "the server's session expired", func() bool {
		for range srv.Sessions() {
			return false
		}
		return true
	})
	if out := mustCall(t, c, "count__count", "{}"); out != "2" {
		t.Errorf("count after the session expired answered %q, want 2 (performed once)", out)
	}
	if st := c.Status()[0]; st.State != mcp.StateConnected || st.Connects != 2 {
		t.Errorf("status %+v, want connected anew", st)
	}
}

// A server that goes away during a call: the call fails at once (it is not waited
// for until its timeout, nor sent again to a server that is not there), and the
// next call, once the server is back at its address, reaches it.
func TestHTTPServerGoneDuringACall(t *testing.T) {
	var n atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	started := make(chan struct{}, 1)
	srv := countServer(&n, started)
	hs := &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)}
	go hs.Serve(ln)
	c := startClient(t, map[string]mcp.ServerConfig{"count": {URL: "http://" + addr + "/mcp"}}, nil)
	slow, _ := c.Tool("count__slow")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := slow.Call(ctx, tools.Call{Key: "s/1", Arguments: "{}"})
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not reach the server within 30 s")
	}
	hs.Close()
	select {
	case err := <-done:
		if err == nil || ctx.Err() != nil {
			t.Errorf("slow answered %v with the server gone", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call still waits 30 s after its server went away")
	}
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the address %s is taken again: %v", addr, err)
	}
	hs2 := &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return countServer(&n, nil) }, nil)}
	go hs2.Serve(ln2)
	t.Cleanup(func() { hs2.Close() })
	if out := mustCall(t, c, "count__count", "{}"); out != "1" {
		t.Errorf("count on the server back answered %q", out)
	}
}
