package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
)

// The node and MCP, both ways (package mcp): the MCP servers of the configuration's
// "mcp_servers" give the agent their tools (startMCP, for run, serve and mcp);
// `node mcp` serves the node's tools and run_task over stdio (serveMCP), and
// `node serve` over Streamable HTTP at /mcp (mountMCP).

// mcpStartWait bounds how long a node waits at start for its MCP servers' first
// connection; a server not connected by then joins the catalog when it connects.
const mcpStartWait = 10 * time.Second

// mcpMaxBody bounds a request to /mcp: a run_task call carries a task, which
// POST /v1/tasks bounds at 2 MiB.
const mcpMaxBody = 2 << 20

// startMCP connects to the MCP servers of the configuration, makes them cfg's tool
// catalog, and adds their header and environment values to cfg's secrets (so a
// server that echoes its token does not put it in an event); cfg.Redactor (that of
// logger) learns their OAuth tokens as they are obtained. It waits up to
// mcpStartWait for each server's first attempt and logs every server's state. With
// no servers it does nothing; stop closes the connections.
func startMCP(ctx context.Context, servers map[string]mcp.ServerConfig, cfg *node.Config, logger *slog.Logger) (client *mcp.Client, stop func(), err error) {
	client, stop, err = nodeconfig.ConnectMCP(ctx, servers, mcpStartWait, logger, cfg.Redactor)
	if err != nil || client == nil {
		return client, stop, err
	}
	cfg.Secrets = append(cfg.Secrets, nodeconfig.MCPSecrets(servers)...)
	for _, st := range client.Status() {
		switch st.State {
		case mcp.StateConnected:
			logger.Info("mcp server connected", "mcp_server", st.Name, "transport", st.Transport, "server", st.Server, "tools", len(st.Tools), "skipped", len(st.Skipped))
		case mcp.StateDown:
			logger.Warn("mcp server is down; retrying in the background", "mcp_server", st.Name, "transport", st.Transport, "err", st.Error)
		default:
			logger.Warn("mcp server has not connected yet; its tools join when it does", "mcp_server", st.Name, "transport", st.Transport)
		}
	}
	cfg.ToolCatalog = client
	return client, stop, nil
}

// newMCPServer serves n's tools and run_task over MCP, with the resources and
// prompts of the configuration's "mcp_server" (served), of the node's skills and of
// its MCP servers; its lists follow the MCP client's, when cfg has one.
func newMCPServer(n *node.Node, cfg node.Config, served mcp.ServedConfig) *mcp.Server {
	opts := mcp.ServerOptions{Logger: cfg.Logger, ProgressInterval: served.Interval(), SessionTimeout: served.Idle(), ReconnectDelay: served.Retry(), MaxRequestBytes: mcpMaxBody,
		WriteTimeout: cfg.HTTP.WriteTimeout,
		MaxSessions:  served.MaxSessions,
		Sources:      []mcp.Source{served.Source(), mcp.SkillSource(cfg.Skills)}}
	if c, ok := cfg.ToolCatalog.(*mcp.Client); ok {
		opts.Changed = c.Changed
		opts.Sources = append(opts.Sources, c)
	}
	return mcp.NewServer(n, opts)
}

// mountMCP serves MCP over Streamable HTTP at /mcp of n's HTTP API until ctx ends;
// call the server's CloseStreams when the HTTP server shuts down.
func mountMCP(ctx context.Context, n *node.Node, cfg node.Config, served mcp.ServedConfig) *mcp.Server {
	srv := newMCPServer(n, cfg, served)
	go srv.Run(ctx)
	n.HandleRoute(node.Route{Path: "/mcp", Handler: srv.Handler(), MaxBody: mcpMaxBody, JSONRPC: true, Doc: node.RouteDoc{
		Summary: "MCP over Streamable HTTP: POST a JSON-RPC message, GET the server's stream, DELETE the MCP session",
		Methods: []string{"GET", "POST", "DELETE"},
		Body:    &node.Body{Schema: node.Schema{"type": "object", "description": "a JSON-RPC 2.0 message or batch"}},
		Responses: []node.Response{
			{Status: 200, Description: "the JSON-RPC answer, as application/json or text/event-stream"},
			{Status: 202, Description: "a notification or answer was accepted"},
			{Status: 413, Description: "the request is too large: a JSON-RPC error says so"},
		}}})
	// The MCP servers the node is a client of: their state, and the tools they
	// offer that were left out and why, which an operator otherwise finds only
	// in the log.
	client, _ := cfg.ToolCatalog.(*mcp.Client)
	var redact func(string) string
	if cfg.Redactor != nil {
		redact = cfg.Redactor.String
	}
	n.HandleRoute(node.Route{Method: "GET", Path: "/v1/mcp/servers", Handler: client.StatusHandler(redact), Doc: node.RouteDoc{
		Summary: "The MCP servers of the configuration's \"mcp_servers\": each one's state and last error, its tools in the catalog, and the tools it offers that were left out and why (a schema the node cannot check arguments against, a name clash, too many tools)",
		Responses: []node.Response{{Status: 200, Description: "the servers, sorted by name",
			Body: &node.Body{ContentType: "application/json", Schema: mcp.ServersStatus{}}}}}})
	return srv
}

// askForSIGPIPE is called by `node mcp` at its start and never undone: the
// process exits with SIGPIPE still asked for. A client that goes away (an editor
// that quits or dies) closes stdout, and often stderr too: the next write to
// stdout (a ping, every progress_interval while a call runs) killed the process
// with SIGPIPE, which Go sends a program writing to fd 1 or 2 as a broken pipe
// unless it asks for the signal. Asked for, the write fails with EPIPE instead:
// the session ends, its calls are cancelled (a run_task's task recorded as such),
// and the node stops as when the client closes stdin. Undone before the node had
// stopped, the node's shutdown log to a closed stderr killed it the same way.
func askForSIGPIPE() {
	brokenPipe := make(chan os.Signal, 1)
	signal.Notify(brokenPipe, syscall.SIGPIPE)
}

// serveMCP is `node mcp`: a node that serves its tools and run_task to one MCP
// client over stdin and stdout, until the client closes stdin or ctx ends. Logs go
// to stderr: stdout is the protocol's.
func serveMCP(ctx context.Context, cfg node.Config, served mcp.ServedConfig, attach func(*node.Node), stdin io.Reader, stdout, stderr io.Writer) int {
	n, err := node.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer n.Close()
	attach(n)
	// The node runs, and the MCP session is served, until the node is closed, as
	// node serve's: a signal (ctx) closes the node first (Node.Close: the calls in
	// flight answer within the handoff grace and are recorded, a run_task's task is
	// left to resume, its caller told so), and only then ends Run and the session.
	// Run under ctx, the signal ended Run before Close began (Node.Close says why
	// not), and the node went on with the task in flight, its next calls made,
	// until it ended.
	live := context.WithoutCancel(ctx)
	started, err := n.Start(live)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	srvCtx, cancel := context.WithCancel(live)
	defer cancel()
	stopNode := sync.OnceFunc(started) // by the signal, or at the end of the session
	defer stopNode()
	defer context.AfterFunc(ctx, func() {
		cfg.Logger.Info("shutting down")
		stopNode()
		cancel()
	})()
	// run asked for SIGPIPE (askForSIGPIPE): a write to the closed stdout of a
	// client gone fails with EPIPE.
	srv := newMCPServer(n, cfg, served)
	go srv.Run(srvCtx)
	cfg.Logger.Info("node serving MCP on stdio", "data", n.DataDir(), "model", cfg.Model.Name(), "tools", len(n.ToolSpecs())+1)
	err = srv.Serve(srvCtx, mcp.LineTransport(stdin, stdout, 0))
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrClosedPipe) {
		cfg.Logger.Info("the MCP client went away: its end of stdout is closed", "err", err)
		return 0
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, sdk.ErrConnectionClosed) {
		fmt.Fprintln(stderr, "error: mcp:", err)
		return 1
	}
	return 0
}
