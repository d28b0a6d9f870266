package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// recordSummarySession runs four tasks on one session of an agent whose
// conversation is summarised by summary_model (spec), on a node whose own model is
// the scripted model "fake", built from the agents file as node serve builds it. It
// returns the data directory, the agents file and the recorded events.
func recordSummarySession(t *testing.T, dir, spec string) (data, agentsPath string, events []messages.Envelope) {
	t.Helper()
	data = filepath.Join(dir, "data")
	steps := func(name string) string {
		var s []string
		for i := range 8 {
			s = append(s, fmt.Sprintf(`{"content": "%s answer %d"}`, name, i+1))
		}
		return `{"name": "` + name + `", "steps": [` + strings.Join(s, ", ") + `]}`
	}
	writeFiles(t, dir, map[string]string{"fake.json": steps("fake"), "sum.json": steps("summ")})
	spec = strings.ReplaceAll(spec, "DIR", dir)
	agentsPath = filepath.Join(dir, "a.yaml")
	writeFiles(t, dir, map[string]string{
		"a.yaml": "agents:\n  chat:\n    context: {window: 4000, reserved_output: 200, compression: summary, keep_turns: 2, step_turns: 1, summary_model: " +
			quote(spec) + "}\n",
		"troupe.json": `{"agents_file": ` + quote(agentsPath) + `}`,
	})
	fake, err := llm.LoadScript(filepath.Join(dir, "fake.json"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := nodeconfig.LoadAgents(agentsPath)
	if err != nil {
		t.Fatal(err)
	}
	fakeSpec := "scripted:" + filepath.Join(dir, "fake.json")
	if _, err := file.ResolveModels(context.Background(), map[string]llm.Model{fakeSpec: fake}, nil); err != nil {
		t.Fatal(err)
	}
	var tasks []node.Task
	for i := range 4 {
		tasks = append(tasks, node.Task{Input: fmt.Sprintf("task number %d, please", i+1), SessionID: "s", Agent: "chat"})
	}
	for _, end := range recordTasks(t, node.Config{DataDir: data, Model: fake, Agents: file.NodeAgents()}, nil, tasks...) {
		if end.Type != messages.TypeTaskCompleted {
			t.Fatalf("a task ended with %s", end.Type)
		}
	}
	st := store{data: data}
	log, err := st.open(context.Background(), reading)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if events, err = log.Read(context.Background(), "s", 1); err != nil {
		t.Fatal(err)
	}
	return data, agentsPath, events
}

// summaryCalls are the models of the summarise calls of events, in order.
func summaryCalls(events []messages.Envelope) (models []string, firstSeq uint64) {
	for _, e := range events {
		if e.Type != messages.TypeModelRequested {
			continue
		}
		p, _ := e.Decode()
		if mr := p.(*messages.ModelRequested); mr.Purpose == pctx.PurposeSummarise {
			models = append(models, mr.Model)
			if firstSeq == 0 {
				firstSeq = e.Seq
			}
		}
	}
	return models, firstSeq
}

// A named agent whose summaries go to a summary_model of its own verifies against
// its configuration: verify takes that model's name from the recording, as it
// takes the agent's own, and decides the summaries the live run decided; with
// summary_model: offline (which cannot summarise) it decides none, as the live
// run did, although the agent's own model could. A fork continues with the
// summary model.
func TestVerifyAndForkAnAgentWithASummaryModel(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")

	t.Run("scripted", func(t *testing.T) {
		dir := t.TempDir()
		data, _, events := recordSummarySession(t, dir, "scripted:DIR/sum.json")
		models, _ := summaryCalls(events)
		if len(models) == 0 || strings.Trim(strings.Join(models, ","), "summ,") != "" {
			t.Fatalf("the session's summarise calls went to %v, want summ (at least one)", models)
		}
		config := filepath.Join(dir, "troupe.json")
		if code, out, errs := replay(t, "verify", "s", "--data", data, "--config", config); code != 0 || !strings.Contains(out, "deterministic") {
			t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
		}
		// Forked before the last task's summary, the fork summarises with summ.
		var lastTask uint64
		for _, e := range events {
			if e.Type == messages.TypeTaskSubmitted {
				lastTask = e.Seq
			}
		}
		code, out, errs := replay(t, "fork", "s", "--at", fmt.Sprint(lastTask), "--data", data, "--config", config,
			"--model", "scripted:"+filepath.Join(dir, "fake.json"), "--session", "s-fork")
		if code != 0 {
			t.Fatalf("fork: exit %d\n%s%s", code, out, errs)
		}
		st := store{data: data}
		log, err := st.open(context.Background(), reading)
		if err != nil {
			t.Fatal(err)
		}
		forked, err := log.Read(context.Background(), "s-fork", 1)
		log.Close()
		if err != nil {
			t.Fatal(err)
		}
		if fm, _ := summaryCalls(forked); len(fm) != len(models) || strings.Trim(strings.Join(fm, ","), "summ,") != "" {
			t.Errorf("the fork's summarise calls went to %v, want summ as in the parent (%v)", fm, models)
		}
		if code, out, errs := replay(t, "verify", "s-fork", "--data", data, "--config", config); code != 0 || !strings.Contains(out, "deterministic") {
			t.Errorf("verify of the fork: exit %d\n%s%s", code, out, errs)
		}
	})

	t.Run("offline", func(t *testing.T) {
		dir := t.TempDir()
		data, _, events := recordSummarySession(t, dir, "offline")
		if models, _ := summaryCalls(events); len(models) != 0 {
			t.Fatalf("the session made summarise calls %v with summary_model: offline", models)
		}
		if code, out, errs := replay(t, "verify", "s", "--data", data, "--config", filepath.Join(dir, "troupe.json")); code != 0 || !strings.Contains(out, "deterministic") {
			t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
		}
	})
}
