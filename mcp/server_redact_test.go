package mcp_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// resources/read, prompts/get and completion/complete of what the node offers from
// its MCP servers answer with the node's secrets redacted, their errors too, as
// tools/call does (Node.CallTool): a server whose resource or prompt shows its
// environment (server-everything's get-env, as a resource) answered the node's
// API tokens in plain text to any /mcp client holding one of them.
func TestServerRedactsTheNodesSecretsFromResourcesAndPrompts(t *testing.T) {
	const secret = "tok-0123456789abcdefghij-secret"
	env := "TROUPE_AUTH_TOKENS=" + secret
	upstream := sdk.NewServer(&sdk.Implementation{Name: "up", Version: "1"}, &sdk.ServerOptions{
		CompletionHandler: func(context.Context, *sdk.CompleteRequest) (*sdk.CompleteResult, error) {
			return &sdk.CompleteResult{Completion: sdk.CompletionResultDetails{Values: []string{env}}}, nil
		},
	})
	upstream.AddResource(&sdk.Resource{URI: "env://text", Name: "text"}, func(_ context.Context, r *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: mcp.TextContents(r.Params.URI, "text/plain", env)}, nil
	})
	upstream.AddResource(&sdk.Resource{URI: "env://blob", Name: "blob"}, func(_ context.Context, r *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: mcp.BlobContents(r.Params.URI, "application/octet-stream", []byte(env))}, nil
	})
	upstream.AddResource(&sdk.Resource{URI: "env://fails", Name: "fails"}, func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return nil, errors.New("cannot read " + env)
	})
	upstream.AddPrompt(&sdk.Prompt{Name: "env", Arguments: []*sdk.PromptArgument{{Name: "v"}}}, func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		return &sdk.GetPromptResult{Description: "shows " + env, Messages: []*sdk.PromptMessage{
			{Role: "user", Content: &sdk.TextContent{Text: env}},
			{Role: "user", Content: &sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "env://text", MIMEType: "text/plain", Text: env}}},
		}}, nil
	})
	upstream.AddPrompt(&sdk.Prompt{Name: "fails"}, func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		return nil, errors.New("cannot show " + env)
	})
	c := startClient(t, map[string]mcp.ServerConfig{"up": {Transport: mcp.InProcess(upstream)}}, nil)
	n := nodetest.Start(t, node.Config{ToolCatalog: c, Secrets: []string{secret}})
	srv := mcp.NewServer(n, mcp.ServerOptions{Changed: c.Changed, Sources: []mcp.Source{c}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go srv.Run(ctx)
	cs := connect(t, srv, nil)
	waitFor(t, 10*time.Second, "the upstream resources offered", func() bool {
		_, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "env://text"})
		return err == nil
	})
	check := func(what, got string) {
		t.Helper()
		if strings.Contains(got, secret) || !strings.Contains(got, "[REDACTED]") {
			t.Errorf("%s answered %q: the secret is not redacted", what, got)
		}
	}

	for _, uri := range []string{"env://text", "env://blob"} {
		res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
		if err != nil || len(res.Contents) != 1 {
			t.Fatalf("read %s: %+v, %v", uri, res, err)
		}
		check("read "+uri, res.Contents[0].Text+string(res.Contents[0].Blob))
	}
	if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "env://fails"}); err == nil {
		t.Error("read env://fails did not fail")
	} else {
		check("read env://fails's error", err.Error())
	}

	p, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "up__env"})
	if err != nil || len(p.Messages) != 2 {
		t.Fatalf("get up__env: %+v, %v", p, err)
	}
	check("get up__env's description", p.Description)
	check("get up__env's text", p.Messages[0].Content.(*sdk.TextContent).Text)
	check("get up__env's embedded resource", p.Messages[1].Content.(*sdk.EmbeddedResource).Resource.Text)
	if _, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "up__fails"}); err == nil {
		t.Error("get up__fails did not fail")
	} else {
		check("get up__fails's error", err.Error())
	}

	comp, err := cs.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/prompt", Name: "up__env"},
		Argument: sdk.CompleteParamsArgument{Name: "v", Value: ""}})
	if err != nil || len(comp.Completion.Values) != 1 {
		t.Fatalf("complete up__env: %+v, %v", comp, err)
	}
	check("complete up__env", comp.Completion.Values[0])
}
