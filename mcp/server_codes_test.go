package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
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
	srv := mcp.NewServer(n, mcp.ServerOptions{Sources: []mcp.Source{mcp.SkillSource(set), served.Source()}})
	// A resource not found is -32602 to a client of 2026-07-28 (SEP-2164) and
	// -32002 to a client of an earlier version, whose specification gives it that
	// code; every other refusal has the same code in every version.
	for _, conn := range []struct {
		over, version string
		notFound      int64
	}{
		{"stdio", "2026-07-28", jsonrpc.CodeInvalidParams},
		{"stdio", "2025-11-25", -32002},
		{"http", "2025-06-18", -32002},
		{"http", "", -32002}, // the go-sdk client's latest, over Streamable HTTP a session of 2025-11-25
	} {
		t.Run(conn.over+" "+conn.version, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var tr sdk.Transport
			if conn.over == "http" {
				hs := httptest.NewServer(srv.Handler())
				defer hs.Close()
				tr = &sdk.StreamableClientTransport{Endpoint: hs.URL}
			} else {
				st, ct := sdk.NewInMemoryTransports()
				served := make(chan error, 1)
				go func() { served <- srv.Serve(ctx, st) }()
				defer func() { cancel(); <-served }()
				tr = ct
			}
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, tr,
				&sdk.ClientSessionOptions{ProtocolVersion: conn.version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			refusals(ctx, t, cs, conn.notFound)
		})
	}
}

// refusals checks the codes of the refusals of cs's requests, notFound that of
// a resource not found.
func refusals(ctx context.Context, t *testing.T, cs *sdk.ClientSession, notFound int64) {
	t.Helper()
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
		{"an unknown URI", read("notes://nothing"), notFound, "notes://nothing"},
		{"a skill's file that is not there", read("skill://pdf/nope.md"), notFound, "skill://pdf/nope.md"},
		{"a skill that is not there", read("skill://nosuch/x.md"), notFound, "skill://nosuch/x.md"},
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
	// Before 2026-07-28 resources/subscribe is answered; from then on the go-sdk's
	// Subscribe opens subscriptions/listen and returns without its answer (the
	// server's is the same refusal, -32602 with the URI).
	if notFound != jsonrpc.CodeInvalidParams {
		var e *jsonrpc.Error
		if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: "notes://nothing"}); !errors.As(err, &e) || e.Code != notFound {
			t.Errorf("a subscription to an unknown URI: %v, want code %d", err, notFound)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
