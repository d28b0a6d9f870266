package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runAgents(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"agents"}, args...), &out, &errb, options{})
	return code, out.String(), errb.String()
}

func writeAgents(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agents.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// node agents list prints the example file's agents, as a table and as JSON, from
// --agents or from the configuration's agents_file.
func TestAgentsList(t *testing.T) {
	example := filepath.Join("..", "..", "examples", "agents.yaml")
	code, out, errOut := runAgents(t, "list", "--agents", example)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "NAME") ||
		!strings.Contains(lines[2], "calculator") || !strings.Contains(lines[2], "react") || !strings.Contains(lines[2], "calculator,clock") ||
		!strings.Contains(lines[1], "(all)") || !strings.Contains(lines[3], "offline") || !strings.Contains(lines[3], "(none)") {
		t.Errorf("list =\n%s", out)
	}
	cfg := writeConfig(t, `{"agents_file": "`+example+`"}`)
	code, out, errOut = runAgents(t, "list", "--json", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got []struct {
		Name, Paradigm, Model string
		Tools                 []string
		Memory                string `json:"memory_namespace"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got) != 3 || got[1].Name != "calculator" || got[1].Paradigm != "react" || strings.Join(got[1].Tools, ",") != "calculator,clock" ||
		got[1].Memory != "agent:calculator" || got[2].Model != "offline" {
		t.Errorf("list --json = %s", out)
	}
}

// A bad file, an unknown tool and a missing file exit 2 with the reason (and the line).
func TestAgentsListErrors(t *testing.T) {
	for _, c := range []struct{ name, file, want string }{
		{"unknown tool", "agents:\n  a:\n    tools: [calculator, shell]\n", `line 3: agent "a": unknown tool "shell"`},
		{"unknown field", "agents:\n  a:\n    tmperature: 1\n", `line 3: agent "a": unknown field "tmperature"`},
		{"paradigm", "agents:\n  a:\n    paradigm: reflection\n", `line 3: agent "a": paradigm "reflection" is not supported yet`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runAgents(t, "list", "--agents", writeAgents(t, c.file))
			if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d, out %q, err %q; want 2 and %q", code, out, errOut, c.want)
			}
		})
	}
	if code, _, errOut := runAgents(t, "list"); code != 2 || !strings.Contains(errOut, "no agents file") {
		t.Errorf("list without a file: exit %d, %q", code, errOut)
	}
	if code, _, _ := runAgents(t, "show"); code != 2 {
		t.Errorf("agents show: exit %d, want 2", code)
	}
}

// Tasks do not run declared agents yet: a node does not start on a configuration
// that names an agents file, rather than ignore it.
func TestRunRefusesAgentsFile(t *testing.T) {
	var out, errb bytes.Buffer
	cfg := writeConfig(t, `{"agents_file": "agents.yaml"}`)
	if code := run(context.Background(), []string{"run", "--config", cfg, "--model", "offline", "1+1"}, &out, &errb, options{}); code != 2 ||
		!strings.Contains(errb.String(), "does not run declared agents yet") {
		t.Errorf("exit %d, %q", code, errb.String())
	}
}
