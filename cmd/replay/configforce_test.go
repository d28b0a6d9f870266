package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/skills"
)

// A session recorded by a node with one system prompt and skill verifies against
// a configuration file whose system prompt and skill's description changed since:
// its task recorded the configuration it ran under (decision rules 7), and is
// re-decided under it. The same session as a build of rules 6 recorded it (no
// configuration with its task) diverges at its first model request, its prompt's
// hash alone differing.
func TestVerifyASessionWhoseConfigurationChangedSince(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	writeFiles(t, dir, map[string]string{
		"skills-a/greet/SKILL.md": "---\nname: greet\ndescription: Greets people warmly.\n---\nSay hello by name.\n",
		"skills-b/greet/SKILL.md": "---\nname: greet\ndescription: Greets people curtly.\n---\nSay hi.\n",
		"b.json":                  `{"model": "offline", "system_prompt": "You are the second configuration.", "skills_dir": ` + quote(filepath.Join(dir, "skills-b")) + `}`,
	})
	set, _, err := skills.Load(skills.Config{Dir: filepath.Join(dir, "skills-a")})
	if err != nil {
		t.Fatal(err)
	}
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
		{Content: "hello, 42"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	recordRun(context.Background(), t, node.Config{DataDir: data, Model: model, Skills: set,
		Tools: []tools.Tool{tools.Calculator{}, tools.NewClock(nil)}, SystemPrompt: "You are the first configuration."}, "changed", "greet Ada and multiply")

	if code, out, errs := replay(t, "verify", "changed", "--data", data, "--config", filepath.Join(dir, "b.json")); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify under the changed configuration: exit %d\n%s%s", code, out, errs)
	}

	// The export carries the configuration its task names, stored in the log once,
	// not with the task: imported into another log, the session verifies there
	// under the changed configuration.
	file := filepath.Join(dir, "changed.jsonl")
	if code, _, errs := replay(t, "export", "changed", "--data", data, "--out", file); code != 0 {
		t.Fatalf("export: %s", errs)
	}
	copyData := filepath.Join(dir, "copy")
	if code, out, errs := replay(t, "import", file, "--data", copyData); code != 0 {
		t.Fatalf("import: %s%s", out, errs)
	}
	if code, out, errs := replay(t, "verify", "changed", "--data", copyData, "--config", filepath.Join(dir, "b.json")); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify of the imported session under the changed configuration: exit %d\n%s%s", code, out, errs)
	}

	// The session as rules 6 recorded it.
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	configs := 0
	for i, line := range lines[1:] {
		var e messages.Envelope
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == messages.TypeConfigRecorded && bytes.Contains(e.Payload, []byte("Greets people warmly.")) {
			configs++
		}
		if e.Type != messages.TypeTaskSubmitted {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		task := p.(*messages.TaskSubmitted)
		if task.Rules != actors.ContextRules || task.Config != nil || len(task.ConfigDigest) != 64 || bytes.Contains(e.Payload, []byte("Greets people")) {
			t.Fatalf("the task recorded rules %d, digest %q, configuration %+v", task.Rules, task.ConfigDigest, task.Config)
		}
		task.Rules, task.ConfigDigest, task.Config = 6, "", nil
		enc, err := messages.NewEnvelope(task)
		if err != nil {
			t.Fatal(err)
		}
		e.Payload = enc.Payload
		if lines[i+1], err = json.Marshal(e); err != nil {
			t.Fatal(err)
		}
	}
	if configs != 1 {
		t.Fatalf("the export carries %d configurations with the skill; want 1:\n%s", configs, raw)
	}
	old := filepath.Join(dir, "old.jsonl")
	if err := os.WriteFile(old, append(bytes.Join(lines, []byte("\n")), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	oldData := filepath.Join(dir, "old")
	if code, _, errs := replay(t, "import", old, "--data", oldData); code != 0 {
		t.Fatalf("import: %s", errs)
	}
	code, out, _ := replay(t, "verify", "changed", "--data", oldData, "--config", filepath.Join(dir, "b.json"), "--json")
	var res struct {
		Divergence *struct {
			Seq      uint64 `json:"seq"`
			Expected string `json:"expected"`
			Actual   string `json:"actual"`
		} `json:"divergence"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 || res.Divergence == nil || res.Divergence.Seq != 2 {
		t.Fatalf("verify of the session as rules 6 recorded it: exit %d %s (%v)", code, out, err)
	}
	// The same model, step and tools: the prompt's hash differs (and the system
	// prompt's tokens in its context report).
	rec, now := res.Divergence.Expected, res.Divergence.Actual
	i, j := strings.Index(rec, `"prompt_hash":"`), strings.Index(rec, `,"context"`)
	if i < 0 || j < i || rec[:i+15] != now[:i+15] || rec[i:i+79] == now[i:i+79] || rec[i+79:j] != now[i+79:j] {
		t.Errorf("rules 6 diverges otherwise than by the prompt's hash:\n%s\n%s", rec, now)
	}
}

// An export's configurations are read back as written, and one that is not the
// one event of its digest's stream is refused, the whole file with it.
func TestExportCarriesConfigurations(t *testing.T) {
	cfg := messages.AgentConfig{SystemPrompt: "You file."}
	digest := actors.ConfigDigest(&cfg)
	task, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "hi", Rules: 7, ConfigDigest: digest})
	if err != nil {
		t.Fatal(err)
	}
	task.ID, task.SessionID, task.Seq, task.TS = "s/1", "s", 1, 1
	good, err := messages.ConfigRecordedEvent(digest, cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := writeExport(&b, []messages.Envelope{task}, good); err != nil {
		t.Fatal(err)
	}
	events, configs, err := readExport(bytes.NewReader(b.Bytes()))
	if err != nil || len(events) != 1 || len(configs) != 1 || configs[0].SessionID != good.SessionID || !bytes.Equal(configs[0].Payload, good.Payload) {
		t.Fatalf("read back %v %v (%v)", events, configs, err)
	}
	b.Reset()
	if err := writeExport(&b, []messages.Envelope{task}); err != nil || !strings.HasPrefix(b.String(), `{"format":"troupe.session","version":1,`) {
		t.Fatalf("an export with no configuration: %q (%v); want version 1", b.String(), err)
	}
	for name, bad := range map[string]func(e *messages.Envelope){
		"another stream": func(e *messages.Envelope) {
			e.SessionID, e.ID = "config/"+strings.Repeat("cd", 32), "config/"+strings.Repeat("cd", 32)+"/1"
		},
		"another seq": func(e *messages.Envelope) { e.Seq = 2 },
		"a session":   func(e *messages.Envelope) { e.SessionID, e.ID = "s2", "s2/1" },
	} {
		e := good
		bad(&e)
		b.Reset()
		if err := writeExport(&b, []messages.Envelope{task}, e); err != nil {
			t.Fatal(err)
		}
		if _, _, err := readExport(bytes.NewReader(b.Bytes())); !errors.Is(err, ErrBadExport) {
			t.Errorf("%s: %v; want ErrBadExport", name, err)
		}
	}
}
