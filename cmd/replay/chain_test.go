package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

const chainFile = `{"model": "offline", "chains": [{"name": "twice", "description": "Doubles a number twice.",
	"input_schema": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
	"steps": [{"name": "a", "tool": "calculator", "args": "{\"expression\": \"{{.args.x}} * 2\"}"},
	          {"name": "b", "tool": "calculator", "args": "{\"expression\": \"{{.steps.a.output}} * 2\"}"}],
	"output": "{{.args.x}} doubled twice is {{.steps.b.output}}"}]}`

const chainScript = `{"name": "scripted", "steps": [
	{"tool_calls": [{"id": "c1", "name": "twice", "arguments": "{\"x\": 5}"}]},
	{"content": "twenty"}]}`

func TestVerifyASessionWithAToolChain(t *testing.T) {
	dir, files := t.TempDir(), t.TempDir()
	cfgPath, scriptPath := filepath.Join(files, "troupe.json"), filepath.Join(files, "script.json")
	if err := os.WriteFile(cfgPath, []byte(chainFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(scriptPath, []byte(chainScript), 0o644); err != nil {
		t.Fatal(err)
	}
	// Record a session on a node whose agent has the chain.
	fc, err := nodeconfig.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := fc.Agent(nodeconfig.AgentOptions{})
	if err != nil {
		t.Fatal(err)
	}

	model, err := llm.LoadScript(scriptPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{DataDir: dir, Model: model}
	agent.Apply(&cfg)
	events := recordRun(context.Background(), t, cfg, "chained", "double 5 twice")
	var stepDone uint64
	var result string
	for _, e := range events {
		p, _ := e.Decode()
		switch p := p.(type) {
		case *messages.ToolCallCompleted:
			if e.Actor == "session" {
				result = p.Result
			} else if stepDone == 0 {
				stepDone = e.Seq
			}
		}
	}
	if result != "5 doubled twice is 20" || stepDone == 0 {
		t.Fatalf("the chain's result %q (first step answered at seq %d)", result, stepDone)
	}

	// Verify knows the chain from --config; without it the agent differs (no chain).
	if code, out, errs := replay(t, "verify", "chained", "--data", dir, "--config", cfgPath); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify --config: %d %s %s", code, out, errs)
	}
	if code, out, _ := replay(t, "verify", "chained", "--data", dir); code != 1 || !strings.Contains(out, "diverges") {
		t.Fatalf("verify without the chain: %d %s", code, out)
	}

	// A fork taken mid-chain runs the remaining step under its own keys, its chain
	// field naming the fork's call of the chain, and verifies too.
	code, out, errs := replay(t, "fork", "chained", "--at", strconv.FormatUint(stepDone, 10), "--session", "chained-fork", "--data", dir,
		"--config", cfgPath, "--model", "scripted:"+scriptPath)
	if code != 0 || !strings.Contains(out, "twenty") {
		t.Fatalf("fork: %d\n%s\n%s", code, out, errs)
	}
	child := readAll(t, dir)["chained-fork"]
	var chainKeys []string
	for _, e := range child {
		if p, _ := e.Decode(); p != nil {
			if r, ok := p.(*messages.ToolCallRequested); ok && r.Chain != "" {
				chainKeys = append(chainKeys, r.Chain+" "+r.ChainStep)
			}
		}
	}
	if len(chainKeys) != 2 || !strings.HasPrefix(chainKeys[0], "chained-fork/") || chainKeys[0][:len(chainKeys[0])-2] != chainKeys[1][:len(chainKeys[1])-2] {
		t.Fatalf("the fork's chain steps: %q", chainKeys)
	}
	if code, out, errs := replay(t, "verify", "chained-fork", "--data", dir, "--config", cfgPath); code != 0 {
		t.Fatalf("verify the fork: %d %s %s", code, out, errs)
	}
	// A bad chain in --config is refused.
	bad := filepath.Join(files, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"chains": [{"name": "c", "description": "d", "steps": [{"name": "a", "tool": "shell"}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := replay(t, "verify", "chained", "--data", dir, "--config", bad); code != 2 || !strings.Contains(errs, `calls the tool "shell"`) {
		t.Fatalf("verify with a bad chain: %d %s", code, errs)
	}
}

// recordRun builds a node from cfg, runs one task on sessionID with
// nodetest.Run, and stops and closes the node before returning the session's
// events, so that the log under cfg.DataDir is left for the replay to read.
func recordRun(ctx context.Context, t *testing.T, cfg node.Config, sessionID, input string) []messages.Envelope {
	t.Helper()
	n, err := node.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	return nodetest.Run(t, n, sessionID, input)
}
