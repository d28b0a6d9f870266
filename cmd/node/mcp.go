package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

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

// validateMCPServers checks the "mcp_servers" section, naming fields as
// mcp_servers.NAME.FIELD.
func validateMCPServers(servers map[string]mcp.ServerConfig) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		if err := servers[name].Validate(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// unknownMCPField names an unknown field of a server in the "mcp_servers" section
// (raw), or returns nil when no server has a field called name.
func unknownMCPField(raw json.RawMessage, name string) error {
	var servers map[string]map[string]json.RawMessage
	_ = json.Unmarshal(raw, &servers)
	for _, server := range slices.Sorted(maps.Keys(servers)) {
		if _, ok := servers[server][name]; ok {
			return fmt.Errorf("unknown field \"mcp_servers.%s.%s\": a server's fields are %s", server, name, jsonFields[mcp.ServerConfig]())
		}
	}
	return nil
}

// startMCP connects to the MCP servers of the configuration, makes them cfg's tool
// catalog, and adds their header and environment values to cfg's secrets (so a
// server that echoes its token does not put it in an event). It waits up to
// mcpStartWait for each server's first attempt and logs every server's state. With
// no servers it does nothing; stop closes the connections.
func startMCP(ctx context.Context, servers map[string]mcp.ServerConfig, cfg *node.Config, logger *slog.Logger) (client *mcp.Client, stop func(), err error) {
	if len(servers) == 0 {
		return nil, func() {}, nil
	}
	client, err = mcp.NewClient(mcp.ClientConfig{Servers: servers, Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	cfg.Secrets = append(cfg.Secrets, mcpSecrets(servers)...)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = client.Run(runCtx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	wctx, wcancel := context.WithTimeout(ctx, mcpStartWait)
	_ = client.WaitReady(wctx)
	wcancel()
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

// mcpSecrets are the values of the servers' configuration that events must not
// hold: every header value (and the token of "Bearer <token>"), and the values of
// environment variables named like a secret (…KEY, …TOKEN, …SECRET, …PASSWORD, …).
// Other variables (NODE_ENV=production) are not secrets: redacting their values
// would blank out common words.
func mcpSecrets(servers map[string]mcp.ServerConfig) []string {
	var out []string
	for _, s := range servers {
		for _, v := range s.Headers {
			out = append(out, v)
			if _, token, ok := strings.Cut(v, " "); ok {
				out = append(out, strings.TrimSpace(token))
			}
		}
		for k, v := range s.Env {
			if secretName.MatchString(k) {
				out = append(out, v)
			}
		}
	}
	return out
}

var secretName = regexp.MustCompile(`(?i)(key|token|secret|passw|auth|credential|private)`)

// newMCPServer serves n's tools and run_task over MCP, with the resources and
// prompts of the configuration's "mcp_server" (served), of the node's skills and of
// its MCP servers; its lists follow the MCP client's, when cfg has one.
func newMCPServer(n *node.Node, cfg node.Config, served mcp.ServedConfig) *mcp.Server {
	opts := mcp.ServerOptions{Logger: cfg.Logger, ProgressInterval: served.Interval(),
		Sources: []mcp.Source{served.Source(), mcp.SkillSource(cfg.Skills)}}
	if c, ok := cfg.ToolCatalog.(*mcp.Client); ok {
		opts.Changed = c.Changed
		opts.Sources = append(opts.Sources, c)
	}
	return mcp.NewServer(n, opts)
}

// unknownServedField names an unknown field of the "mcp_server" section (raw), or
// returns nil when it has no field called name.
func unknownServedField(raw json.RawMessage, name string) error {
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return nil
	}
	if _, ok := top[name]; ok {
		return fmt.Errorf("unknown field \"mcp_server.%s\": its fields are %s", name, jsonFields[mcp.ServedConfig]())
	}
	for section, fields := range map[string]string{"resources": jsonFields[mcp.ServedResource](),
		"resource_templates": jsonFields[mcp.ServedTemplate](), "prompts": jsonFields[mcp.ServedPrompt]()} {
		var items []map[string]json.RawMessage
		_ = json.Unmarshal(top[section], &items)
		for i, item := range items {
			if _, ok := item[name]; ok {
				return fmt.Errorf("unknown field \"mcp_server.%s[%d].%s\": its fields are %s", section, i, name, fields)
			}
			if section != "prompts" {
				continue
			}
			for sub, subFields := range map[string]string{"arguments": jsonFields[mcp.ServedArgument](), "messages": jsonFields[mcp.ServedMessage]()} {
				var subs []map[string]json.RawMessage
				_ = json.Unmarshal(item[sub], &subs)
				for j, x := range subs {
					if _, ok := x[name]; ok {
						return fmt.Errorf("unknown field \"mcp_server.prompts[%d].%s[%d].%s\": its fields are %s", i, sub, j, name, subFields)
					}
				}
			}
		}
	}
	return nil
}

// mountMCP serves MCP over Streamable HTTP at /mcp of n's HTTP API until ctx ends.
func mountMCP(ctx context.Context, n *node.Node, cfg node.Config, served mcp.ServedConfig) {
	srv := newMCPServer(n, cfg, served)
	go srv.Run(ctx)
	n.Handle("/mcp", srv.Handler())
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
	stopNode, err := n.Start(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer stopNode()
	srvCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := newMCPServer(n, cfg, served)
	go srv.Run(srvCtx)
	cfg.Logger.Info("node serving MCP on stdio", "data", n.DataDir(), "model", cfg.Model.Name(), "tools", len(n.ToolSpecs())+1)
	err = srv.Serve(srvCtx, &sdk.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}})
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, sdk.ErrConnectionClosed) {
		fmt.Fprintln(stderr, "error: mcp:", err)
		return 1
	}
	return 0
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
