package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A fork whose task, resumed, records more events at once than a live watcher's
// backlog holds (a team member sharing six hundred STATE facts, each a
// team.state_updated event) is followed to its end: replay fork prints each of
// them once and the answer, and none of the events it copied from the parent (a
// first task's own burst, its end). Before, its feed fell behind and closed, and
// replay fork stopped with "error: lost the live event feed", exit 1; a catch-up
// read from the fork's first event would print the copied ones again and count
// the copied task's end as the resumed one's.
func TestForkFollowsABurstOfEventsPastTheWatchersBacklog(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	facts := func(prefix string, n int) string {
		var lines []string
		for i := range n {
			lines = append(lines, fmt.Sprintf("STATE: %s%d = v%d", prefix, i, i))
		}
		return strings.Join(lines, "\n")
	}
	script := func(name, content string) string {
		b, err := json.Marshal(map[string]any{"name": name, "steps": []map[string]string{{"content": content}}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	writeFiles(t, dir, map[string]string{
		"first.json":  script("first", "41\n"+facts("a", 300)),
		"second.json": script("second", "42\n"+facts("b", 600)),
		"agents.yaml": "agents:\n  first:\n    model: scripted:" + filepath.Join(dir, "first.json") + "\n    tools: []\n" +
			"  second:\n    model: scripted:" + filepath.Join(dir, "second.json") + "\n    tools: []\n" +
			"teams:\n  one:\n    pattern: pipeline\n    members: [first]\n  two:\n    pattern: pipeline\n    members: [second]\n",
	})
	agentsPath := filepath.Join(dir, "agents.yaml")
	file, err := nodeconfig.LoadAgents(agentsPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.ResolveModels(context.Background(), map[string]llm.Model{"offline": llm.Offline{}}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.New(ctx, node.Config{DataDir: data, Model: llm.Offline{}, Agents: file.NodeAgents()})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live, stopWatch, _ := n.WatchResuming(ctx, "teams", false, 0)
	var second uint64 // the seq of the second task's task.submitted
	for _, task := range []node.Task{{Input: "Share a.", SessionID: "teams", Agent: "one"}, {Input: "Share b.", SessionID: "teams", Agent: "two"}} {
		if _, err := n.Submit(ctx, task); err != nil {
			t.Fatal(err)
		}
		for ended := false; !ended; {
			e, ok := <-live
			if !ok {
				t.Fatalf("recording %q: the feed closed", task.Input)
			}
			if e.Type == messages.TypeTaskSubmitted && task.Agent == "two" {
				second = e.Seq
			}
			if e.Type == messages.TypeTaskFailed {
				t.Fatalf("recording %q: %s", task.Input, e.Payload)
			}
			ended = e.Type == messages.TypeTaskCompleted
		}
	}
	stopWatch()
	stop()
	n.Close()
	if second == 0 {
		t.Fatal("no task.submitted of the second task")
	}

	code, out, errs := replay(t, "fork", "teams", "--at", fmt.Sprint(second), "--data", data, "--agents", agentsPath,
		"--model", "offline", "--session", "teams-fork")
	if code != 0 {
		t.Fatalf("fork: exit %d\n%s\n%.2000s", code, errs, out)
	}
	for _, want := range []string{"team state: merge global.b0 by second: v0\n", "team state: merge global.b599 by second: v599\n"} {
		if c := strings.Count(out, want); c != 1 {
			t.Errorf("the fork printed %q %d times, want once", want, c)
		}
	}
	if c := strings.Count(out, "team state: merge global.b"); c != 600 {
		t.Errorf("the fork printed %d of the burst's 600 facts", c)
	}
	if strings.Contains(out, "global.a") || strings.Contains(out, "answer: 41") {
		t.Errorf("the fork printed events it copied from the parent:\n%.2000s", out)
	}
	if !strings.Contains(out, "answer: 42\n") || !strings.HasSuffix(out, "session teams-fork\n") {
		t.Errorf("the fork's output lacks its answer or its end:\n%.3000s", out[max(0, len(out)-3000):])
	}
}
