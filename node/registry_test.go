package node_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// namedTool is a tool with a given spec that answers "ok".
type namedTool messages.ToolSpec

func (s namedTool) Spec() messages.ToolSpec                        { return messages.ToolSpec(s) }
func (namedTool) Call(context.Context, tools.Call) (string, error) { return "ok", nil }

// The tool section of a prompt is built through tools.NewRegistry: the same tools
// given in any order reach the provider as the same bytes, sorted by name, with their
// schemas compacted, and the recorded prompt hashes agree.
func TestToolSectionIsSortedAndByteStable(t *testing.T) {
	zeta := namedTool{Name: "zeta", Description: "z", Parameters: json.RawMessage("{\n  \"type\": \"object\"\n}")}
	alpha := namedTool{Name: "alpha", Description: "a", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}
	orders := [][]tools.Tool{{zeta, tools.Calculator{}, alpha}, {alpha, zeta, tools.Calculator{}}}
	var sections []string
	var hashes []string
	for i, order := range orders {
		srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Completion(messages.ChatMessage{Content: "fine"}, messages.Usage{})))
		m, err := openai.New(openai.Config{Provider: "fake", BaseURL: srv.URL, Model: "fake-model"})
		if err != nil {
			t.Fatal(err)
		}
		n := nodetest.Start(t, node.Config{Model: m, Tools: order})
		events := nodetest.Run(t, n, "tools-"+string(rune('a'+i)), "hello")
		reqs := srv.Requests()
		if len(reqs) != 1 {
			t.Fatalf("order %d: %d provider requests", i, len(reqs))
		}
		var body struct {
			Tools json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
			t.Fatal(err)
		}
		sections = append(sections, string(body.Tools))
		for _, e := range events {
			if e.Type == messages.TypeModelRequested {
				p, _ := e.Decode()
				hashes = append(hashes, p.(*messages.ModelRequested).PromptHash)
			}
		}
	}
	if sections[0] != sections[1] {
		t.Fatalf("the tool section depends on the order the tools were given:\n%s\n%s", sections[0], sections[1])
	}
	a, c, z := strings.Index(sections[0], `"alpha"`), strings.Index(sections[0], `"calculator"`), strings.Index(sections[0], `"zeta"`)
	if a < 0 || !(a < c && c < z) {
		t.Errorf("tools not sorted by name: %s", sections[0])
	}
	if strings.Contains(sections[0], "\n") {
		t.Errorf("schemas not compacted: %s", sections[0])
	}
	if len(hashes) != 2 || hashes[0] != hashes[1] {
		t.Errorf("prompt hashes %v differ", hashes)
	}
}

// A configuration whose tools the registry refuses (two of one name, a name models
// cannot call) fails validation with the registry's reason.
func TestToolsAreValidatedByTheRegistry(t *testing.T) {
	for name, tl := range map[string][]tools.Tool{
		"duplicate": {tools.Calculator{}, tools.Calculator{}},
		"bad name":  {namedTool{Name: "has space", Description: "x"}},
	} {
		err := node.Config{Tools: tl}.Validate()
		if err == nil || !strings.Contains(err.Error(), "tool") {
			t.Errorf("%s: Validate() = %v", name, err)
		}
	}
}
