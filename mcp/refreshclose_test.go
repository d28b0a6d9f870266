package mcp_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
)

// lockedBuffer is a bytes.Buffer that a logger and a test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A client closed while it lists a server's offer again (the server said its list
// changed, as server-everything does as it starts) logs no warning that the listing
// failed: the listing was cut by the close, and nothing is wrong with the server.
// Every `node tools call` against server-everything ended with such a warning
// ("listing its tools again failed; keeping the last list ... context canceled").
func TestCloseDuringARelistWarnsOfNothing(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "changing", Version: "1"}, nil)
	srv.AddResource(&sdk.Resource{URI: "note://a", Name: "a"}, func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: "note://a", Text: "a"}}}, nil
	})
	addTool := func(name string) {
		srv.AddTool(&sdk.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{}, nil
			})
	}
	addTool("first")
	// The second listing of the resources (the one after the change) waits for its
	// request's end.
	var lists atomic.Int32
	relisting := make(chan struct{})
	srv.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "resources/list" && lists.Add(1) == 2 {
				close(relisting)
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return next(ctx, method, req)
		}
	})
	var logs lockedBuffer
	c, err := mcp.NewClient(mcp.ClientConfig{Servers: map[string]mcp.ServerConfig{"changing": {Transport: mcp.InProcess(srv)}},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	addTool("second")
	select {
	case <-relisting:
	case <-ctx.Done():
		t.Fatal("the client did not list the server again after its tools changed")
	}
	c.Close()
	<-done
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("a close during a relisting logged a warning:\n%s", logs.String())
	}
}
