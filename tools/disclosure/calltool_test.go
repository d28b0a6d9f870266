package disclosure_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// call_tool calls a tool as the performer would have called it directly: for the
// same agent (an agent's own memory namespace or skills, not the default agent's),
// and under the tool's own limits (its timeout, its bound on arguments).
func TestCallToolKeepsTheAgentAndTheToolsLimits(t *testing.T) {
	type none struct{}
	whoami := tools.MustFunc("whoami", "Says which agent calls.", func(_ context.Context, _ none) (string, error) { return "", nil })
	agentOf := agentEcho{Tool: whoami}
	hangs := tools.MustFunc("hangs", "Hangs.", func(ctx context.Context, _ none) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}, tools.WithTimeout(20*time.Millisecond), tools.WithMaxArguments(64))
	d, err := disclosure.New(disclosure.Search, []tools.Tool{agentOf, hangs})
	if err != nil {
		t.Fatal(err)
	}
	var call tools.Tool
	for _, tl := range d.Tools() {
		if tl.Spec().Name == disclosure.ToolCallTool {
			call = tl
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := call.Call(ctx, tools.Call{Key: "s/1", Agent: "writer", Arguments: `{"name":"whoami"}`}); err != nil || out != "agent=writer" {
		t.Errorf("whoami through call_tool = %q, %v; want the calling agent", out, err)
	}
	if _, err := call.Call(ctx, tools.Call{Key: "s/2", Arguments: `{"name":"hangs"}`}); !errors.Is(err, tools.ErrTimeout) {
		t.Errorf("a tool with a 20ms timeout through call_tool: %v, want its timeout", err)
	}
	big := `{"name":"hangs","arguments":{"x":"` + strings.Repeat("a", 100) + `"}}`
	if _, err := call.Call(ctx, tools.Call{Key: "s/3", Arguments: big}); !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), "the limit is 64") {
		t.Errorf("arguments past the tool's bound through call_tool: %v", err)
	}
}

// agentEcho answers with the agent a call is made for.
type agentEcho struct{ tools.Tool }

func (a agentEcho) Call(_ context.Context, c tools.Call) (string, error) {
	return "agent=" + c.Agent, nil
}
