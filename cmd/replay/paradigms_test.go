package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A recorded session of each paradigm of the examples verifies as deterministic
// against the configuration that ran it: reflection (a critique) and reflexion (a
// search of lessons, an evaluation, a lesson stored in memory), on the offline model.
func TestVerifyReflectionAndReflexionSessions(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	for _, c := range []struct {
		agent, file, input string
		memory             bool
		want               []string // purposes recorded
	}{
		{"reviewer", "reflection.yaml", "What is 17 * 23?", false, []string{"critique"}},
		{"learner", "reflexion.yaml", "Who wrote Hamlet?", true, []string{"lessons", "evaluate", "lesson", "store_lesson"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			agentsPath, err := filepath.Abs(filepath.Join("..", "..", "examples", c.file))
			if err != nil {
				t.Fatal(err)
			}
			conf := `{"agents_file": ` + quote(agentsPath) + `}`
			cfg := node.Config{DataDir: data, Model: llm.Offline{}}
			if c.memory {
				conf = `{"agents_file": ` + quote(agentsPath) + `, "memory": {"tool": true, "namespace": "agent:learner"}}`
				cfg.Memory, cfg.MemoryTool = &memory.Config{}, &memory.ToolConfig{Namespace: "agent:learner"}
			}
			writeFiles(t, dir, map[string]string{"troupe.json": conf})
			file, err := nodeconfig.LoadAgents(agentsPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := file.CheckNodeTools(cfg); err != nil {
				t.Fatal(err)
			}
			cfg.Agents = file.NodeAgents()
			var seen []string
			last := recordTasks(t, cfg, func(e messages.Envelope) {
				if p, err := e.Decode(); err == nil {
					switch p := p.(type) {
					case *messages.ModelRequested:
						seen = append(seen, p.Purpose)
					case *messages.ToolCallRequested:
						seen = append(seen, p.Purpose)
					}
				}
			}, node.Task{Input: c.input, SessionID: "p", Agent: c.agent})[0]
			if last.Type != messages.TypeTaskCompleted {
				t.Fatalf("the task ended with %s", last.Type)
			}
			got := strings.Join(seen, ",")
			for _, p := range c.want {
				if !strings.Contains(got, p) {
					t.Fatalf("purposes recorded %q: no %s", got, p)
				}
			}
			if code, out, errs := replay(t, "verify", "p", "--data", data, "--config", filepath.Join(dir, "troupe.json")); code != 0 || !strings.Contains(out, "deterministic") {
				t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
			}
			// The timeline names each call's purpose and the completion's note.
			if code, out, errs := replay(t, "show", "p", "--data", data); code != 0 || !strings.Contains(out, "to "+c.want[len(c.want)-1]) && !strings.Contains(out, c.want[len(c.want)-1]+": memory(") ||
				!strings.Contains(out, "("+c.file[:len(c.file)-len(".yaml")]+": ") {
				t.Fatalf("show: exit %d\n%s%s", code, out, errs)
			}
		})
	}
}

// A reflection whose critic runs on a model of its own verifies against its agents
// file: verify takes the critic's model, as the agent's, from the recording.
func TestVerifyAReflectionWithItsOwnCritic(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	writeFiles(t, dir, map[string]string{
		"judge.json":  `{"name": "judge", "steps": [{"content": "unused"}, {"content": "{\"verdict\": \"pass\"}"}]}`,
		"agents.yaml": "agents:\n  reviewer:\n    paradigm: reflection\n    tools: []\n    critic_model: " + quote("scripted:"+filepath.Join(dir, "judge.json")) + "\n",
	})
	file, err := nodeconfig.LoadAgents(filepath.Join(dir, "agents.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.ResolveModels(context.Background(), map[string]llm.Model{"offline": llm.Offline{}}, nil); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := node.New(ctx, node.Config{DataDir: data, Model: llm.Offline{}, Agents: file.NodeAgents()})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := n.RunTask(ctx, node.Task{Input: "echo forty-two", SessionID: "j", Agent: "reviewer"})
	stop()
	n.Close()
	if err != nil || res.Output != "forty-two" || !strings.Contains(res.Note, "passed") {
		t.Fatalf("result: %+v %v", res, err)
	}
	code, out, errs := replay(t, "show", "j", "--data", data)
	if code != 0 || !strings.Contains(out, "ask judge to critique") {
		t.Fatalf("show: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := replay(t, "verify", "j", "--data", data, "--agents", filepath.Join(dir, "agents.yaml")); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
	}
}
