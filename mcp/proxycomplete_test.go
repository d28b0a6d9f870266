package mcp_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// completion/complete of an argument of a prompt or a resource template that the
// node offers from one of its MCP servers goes to that server, under the prompt's
// name there: server-everything's completable-prompt (department "E" →
// Engineering) and its templates' resourceId were answered no values, the node
// knowing none itself.
func TestServerCompletesItsServersPromptsAndTemplates(t *testing.T) {
	asked := make(chan *sdk.CompleteParams, 4)
	upstream := sdk.NewServer(&sdk.Implementation{Name: "up", Version: "1"}, &sdk.ServerOptions{
		CompletionHandler: func(_ context.Context, r *sdk.CompleteRequest) (*sdk.CompleteResult, error) {
			asked <- r.Params
			var all []string
			switch {
			case r.Params.Ref.Type == "ref/prompt" && r.Params.Ref.Name == "team" && r.Params.Argument.Name == "department":
				all = []string{"Engineering", "Sales", "Support"}
			case r.Params.Ref.Type == "ref/resource" && r.Params.Ref.URI == "file:///logs/{day}" && r.Params.Argument.Name == "day":
				all = []string{"monday", "tuesday"}
			}
			var values []string
			for _, v := range all {
				if strings.HasPrefix(strings.ToLower(v), strings.ToLower(r.Params.Argument.Value)) {
					values = append(values, v)
				}
			}
			return &sdk.CompleteResult{Completion: sdk.CompletionResultDetails{Values: values, Total: len(values)}}, nil
		},
	})
	upstream.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: "file:///logs/{day}", Name: "logs"},
		func(_ context.Context, r *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: mcp.TextContents(r.Params.URI, "text/plain", "log")}, nil
		})
	upstream.AddPrompt(&sdk.Prompt{Name: "team", Arguments: []*sdk.PromptArgument{{Name: "department", Required: true}}},
		func(_ context.Context, r *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: r.Params.Arguments["department"]}}}}, nil
		})
	c := startClient(t, map[string]mcp.ServerConfig{"up": {Transport: mcp.InProcess(upstream)}}, nil)
	n := nodetest.Start(t, node.Config{ToolCatalog: c})
	srv := mcp.NewServer(n, mcp.ServerOptions{Changed: c.Changed, Sources: []mcp.Source{c}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go srv.Run(ctx)
	cs := connect(t, srv, nil)
	waitFor(t, 10*time.Second, "the upstream prompt offered", func() bool {
		got, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "up__team", Arguments: map[string]string{"department": "x"}})
		return err == nil && len(got.Messages) == 1
	})

	res, err := cs.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/prompt", Name: "up__team"},
		Argument: sdk.CompleteParamsArgument{Name: "department", Value: "s"}})
	if err != nil || !slices.Equal(res.Completion.Values, []string{"Sales", "Support"}) {
		t.Errorf("completion of up__team's department \"s\": %+v, %v; want Sales, Support", res, err)
	}
	select {
	case p := <-asked:
		if p.Ref.Name != "team" {
			t.Errorf("the server was asked to complete prompt %q, want its own name team", p.Ref.Name)
		}
	default:
		t.Error("the server was not asked")
	}
	res, err = cs.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/resource", URI: "file:///logs/{day}"},
		Argument: sdk.CompleteParamsArgument{Name: "day", Value: "m"}})
	if err != nil || !slices.Equal(res.Completion.Values, []string{"monday"}) {
		t.Errorf("completion of file:///logs/{day}'s day \"m\": %+v, %v; want monday", res, err)
	}
}
