package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// node run follows a task whose session records more events at once than a live
// watcher's backlog holds (a team member's answer sharing two thousand STATE
// facts, each a team.state_updated event): it prints every one and the answer.
// Before, its feed fell behind and closed, and node run stopped with "error: lost
// the live event feed", exit 1, leaving the task running in the data directory.
func TestRunFollowsABurstOfEventsPastTheWatchersBacklog(t *testing.T) {
	t.Setenv("TROUPE_AGENTS", "")
	dir := t.TempDir()
	var facts []string
	for i := range 2000 {
		facts = append(facts, fmt.Sprintf("STATE: k%d = v%d", i, i))
	}
	script, err := json.Marshal(map[string]any{"name": "sharer", "steps": []map[string]string{{"content": "42\n" + strings.Join(facts, "\n")}}})
	if err != nil {
		t.Fatal(err)
	}
	scriptFile, agents := filepath.Join(dir, "sharer.json"), filepath.Join(dir, "agents.yaml")
	if err := os.WriteFile(scriptFile, script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agents, []byte("agents:\n  sharer:\n    model: scripted:"+scriptFile+"\n    tools: []\n"+
		"teams:\n  line:\n    pattern: pipeline\n    members: [sharer]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", filepath.Join(dir, "data"), "--model", "offline", "--agents", agents, "--agent", "line",
		"Share the facts."}, &out, &errb, options{})
	if code != 0 {
		t.Fatalf("exit %d: %s\n%.2000s", code, errb.String(), out.String())
	}
	for _, want := range []string{"team state: merge global.k0 by sharer: v0\n", "team state: merge global.k1999 by sharer: v1999\n", "\nanswer: 42\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("node run lacks %q", want)
		}
	}
}
