package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools/skills"
)

// Every refusal of a resources/read, prompts/get or completion/complete reaches
// the go-sdk's client as a JSON-RPC error with the code the MCP specification
// gives it: a resource not found (a skill or a skill's file that is not there),
// Invalid params (-32602) with its URI in the error's data (SEP-2164); a URI
// naming no file of a skill's folder, a prompt unknown, a required argument
// missing, Invalid params; a resource whose configured file is gone, Internal
// error (-32603). Before, the errors of the sources went out with code 0, which
// the specification gives no meaning, and the clients could not tell a missing
// resource from a broken server.
func TestServerRefusalsHaveTheSpecificationsCodes(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "pdf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pdf", "SKILL.md"), []byte("---\nname: pdf\ndescription: Fill in PDF forms.\n---\n# Forms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, _, err := skills.Load(skills.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var served mcp.ServedConfig
	if err := json.Unmarshal([]byte(`{
		"resources": [{"uri": "notes://gone", "name": "gone", "file": `+jsonString(filepath.Join(dir, "gone.txt"))+`}],
		"prompts": [{"name": "review", "arguments": [{"name": "lang", "required": true}], "messages": [{"text": "Review this {lang} code."}]}]}`), &served); err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cs := sdkSession(ctx, t, mcp.NewServer(n, mcp.ServerOptions{Sources: []mcp.Source{mcp.SkillSource(set), served.Source()}}))

	read := func(uri string) error {
		_, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
		return err
	}
	for _, c := range []struct {
		label   string
		err     error
		code    int64
		dataURI string
	}{
		{"an unknown URI", read("notes://nothing"), jsonrpc.CodeInvalidParams, "notes://nothing"},
		{"a skill's file that is not there", read("skill://pdf/nope.md"), jsonrpc.CodeInvalidParams, "skill://pdf/nope.md"},
		{"a skill that is not there", read("skill://nosuch/x.md"), jsonrpc.CodeInvalidParams, "skill://nosuch/x.md"},
		{"a path out of the skill's folder", read("skill://pdf/../x"), jsonrpc.CodeInvalidParams, ""},
		{"a skill's SKILL.md", read("skill://pdf/SKILL.md"), jsonrpc.CodeInvalidParams, ""},
		{"a resource whose file is gone", read("notes://gone"), jsonrpc.CodeInternalError, ""},
		{"a prompt without its required argument", func() error {
			_, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "review"})
			return err
		}(), jsonrpc.CodeInvalidParams, ""},
		{"an unknown prompt", func() error {
			_, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "nope"})
			return err
		}(), jsonrpc.CodeInvalidParams, ""},
		{"completion of an unknown prompt", func() error {
			_, err := cs.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/prompt", Name: "nope"},
				Argument: sdk.CompleteParamsArgument{Name: "lang"}})
			return err
		}(), jsonrpc.CodeInvalidParams, ""},
		{"an unknown tool", func() error {
			_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "nope"})
			return err
		}(), jsonrpc.CodeInvalidParams, ""},
	} {
		var e *jsonrpc.Error
		if !errors.As(c.err, &e) {
			t.Errorf("%s: %v, want a JSON-RPC error", c.label, c.err)
			continue
		}
		if e.Code != c.code || e.Message == "" {
			t.Errorf("%s: code %d (%q), want %d", c.label, e.Code, e.Message, c.code)
		}
		if c.dataURI != "" {
			var data struct{ URI string }
			if json.Unmarshal(e.Data, &data) != nil || data.URI != c.dataURI {
				t.Errorf("%s: data %s, want the URI %s", c.label, e.Data, c.dataURI)
			}
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
