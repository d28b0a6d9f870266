package mcp_test

import (
	"context"
	"errors"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// toolless is a Node with no tools and no agent, for the example.
type toolless struct{}

func (toolless) ToolSpecs() []messages.ToolSpec { return nil }
func (toolless) CallTool(context.Context, string, string, string) (string, error) {
	return "", errors.New("no tools")
}
func (toolless) RunTask(context.Context, node.Task) (messages.TaskResult, error) {
	return messages.TaskResult{}, errors.New("no agent")
}

// A server offers the resources and prompts of its sources; here, the catalog an
// "mcp_server" section declares.
func ExampleServedConfig() {
	served := mcp.ServedConfig{
		Resources: []mcp.ServedResource{{URI: "notes://style", Name: "style", Text: "Short sentences."}},
		Prompts: []mcp.ServedPrompt{{Name: "review",
			Arguments: []mcp.ServedArgument{{Name: "lang", Required: true, Values: []string{"go", "python"}}},
			Messages:  []mcp.ServedMessage{{Text: "Review this {lang} code."}, {Resource: "notes://style"}}}},
	}
	if err := served.Validate("mcp_server"); err != nil {
		fmt.Println(err)
		return
	}
	srv := mcp.NewServer(toolless{}, mcp.ServerOptions{Sources: []mcp.Source{served.Source()}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, ct := sdk.NewInMemoryTransports()
	go srv.Serve(ctx, st)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "example", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cs.Close()

	got, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "review", Arguments: map[string]string{"lang": "go"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(got.Messages[0].Content.(*sdk.TextContent).Text)
	fmt.Println(got.Messages[1].Content.(*sdk.EmbeddedResource).Resource.Text)
	comp, err := cs.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/prompt", Name: "review"},
		Argument: sdk.CompleteParamsArgument{Name: "lang", Value: "p"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(comp.Completion.Values)
	// Output:
	// Review this go code.
	// Short sentences.
	// [python]
}
