package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/session-files-7f950c2.jsonl was recorded by `node run` of the build of
// 7f950c2 (decision rules version 4) with an agent offering only the files tool,
// whose list operation that build described without the sentence f4b1e23 added
// ("a name that is not plain printable text is quoted"), against an
// OpenAI-compatible test model that wrote a.txt and answered; then exported with
// that build's `replay export`. Its model requests' prompt hashes cover the
// tool's description as that build wrote it.
const filesSession = "cli-01a24198-09b0-7efd-ab23-4d978558a31c"

// A session an earlier build recorded with a built-in tool it described in other
// words verifies as deterministic: the agent decided the same, and verify takes
// the earlier wording of the tool as the prompt's (tools.PriorSpecs). Before, every
// session that had offered the files tool diverged at its first model request
// after an upgrade past f4b1e23.
func TestVerifyASessionRecordedWithAnEarlierToolDescription(t *testing.T) {
	dir, work := t.TempDir(), t.TempDir()
	agents := filepath.Join(work, "agents.yaml")
	if err := os.WriteFile(agents, []byte("agents:\n  lister:\n    description: Writes files.\n    system_prompt: You write files.\n    tools: [files]\n    max_steps: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(work, "node.json")
	if err := os.WriteFile(config, []byte(`{"tools": {"files": {"root": "`+work+`"}}, "agents_file": "`+agents+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := replay(t, "import", filepath.Join("testdata", "session-files-7f950c2.jsonl"), "--data", dir); code != 0 {
		t.Fatalf("import: %s %s", out, errs)
	}
	code, out, errs := replay(t, "verify", filesSession, "--data", dir, "--config", config)
	if code != 0 || !strings.Contains(out, "deterministic (8 events") {
		t.Fatalf("verify of a session recorded with the files tool's earlier description: %d %s %s", code, out, errs)
	}
	// The earlier wording is no excuse for another prompt: a request whose prompt
	// differs otherwise still diverges.
	golden, err := os.ReadFile(filepath.Join("testdata", "session-files-7f950c2.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(golden), `"prompt_hash":"`, `"prompt_hash":"0`, 1)
	file := filepath.Join(work, "changed.jsonl")
	if err := os.WriteFile(file, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if code, out, errs := replay(t, "import", file, "--data", other); code != 0 {
		t.Fatalf("import: %s %s", out, errs)
	}
	if code, out, _ := replay(t, "verify", filesSession, "--data", other, "--config", config); code == 0 || !strings.Contains(out, "diverges at seq 2") {
		t.Fatalf("verify of a session whose prompt hash differs: %d %s", code, out)
	}
}
