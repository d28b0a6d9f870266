package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// node run --skills DIR with "disclosure": "search" in the config: the agent gets the
// skill tools and the search tools, load_skill returns the skill's body, and a bad
// skill folder is skipped with a warning naming its file.
func TestRunWithSkillsAndSearch(t *testing.T) {
	clearLLMEnv(t)
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	dir := t.TempDir()
	skillsDir := filepath.Join(dir, "skills")
	for rel, content := range map[string]string{
		"greet/SKILL.md":  "---\nname: greet\ndescription: Greets people warmly.\n---\nSay hello by name.\n",
		"broken/SKILL.md": "no front matter here\n",
		"script.json":     `{"steps":[{"tool_calls":[{"id":"1","name":"load_skill","arguments":"{\"name\":\"greet\"}"}]},{"content":"hello"}]}`,
		"troupe.json":     `{"disclosure": "search", "skills": {"allow_scripts": false}}`,
	} {
		p := filepath.Join(skillsDir, rel)
		if !strings.Contains(rel, "/") {
			p = filepath.Join(dir, rel)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--config", filepath.Join(dir, "troupe.json"), "--skills", skillsDir,
		"--model", "scripted:" + filepath.Join(dir, "script.json"), "--data", data, "greet Ada"}, &out, &errb, options{})
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "skill skipped") || !strings.Contains(errb.String(), filepath.Join(skillsDir, "broken", "SKILL.md")) {
		t.Errorf("no warning naming the bad skill:\n%s", errb.String())
	}
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: data, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	infos, err := lg.Sessions(context.Background(), eventlog.Filter{SessionsOnly: true})
	if err != nil || len(infos) != 1 {
		t.Fatalf("sessions %v, %v", infos, err)
	}
	events, err := lg.Read(context.Background(), infos[0].ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	var offered, loaded string
	for _, e := range events {
		p, _ := e.Decode()
		switch p := p.(type) {
		case *messages.ModelRequested:
			if offered == "" {
				offered = strings.Join(p.Tools, ",")
			}
		case *messages.ToolCallCompleted:
			loaded = p.Result + p.Error
		}
	}
	if offered != "calculator,call_tool,clock,load_skill,read_skill_file,run_skill_script,search_tools" {
		t.Errorf("first request offered %s", offered)
	}
	if !strings.Contains(loaded, "Say hello by name.") {
		t.Errorf("load_skill answered %q", loaded)
	}

	// A skills directory that does not exist stops the node with a clear error.
	errb.Reset()
	code = run(context.Background(), []string{"run", "--skills", filepath.Join(dir, "nope"), "--model", "offline", "--data", data, "x"}, &out, &errb, options{})
	if code != 2 || !strings.Contains(errb.String(), "--skills "+filepath.Join(dir, "nope")) {
		t.Errorf("missing skills dir: exit %d, %s", code, errb.String())
	}
}

// TestToolsAndAgentsListTakeTROUPE_SKILLS: node tools list and node agents list show
// the agent node run and serve build, so TROUPE_SKILLS (and TROUPE_DISCLOSURE) count
// for them as for those: the skill tools are listed, and an agent of skill:NAME is
// accepted, as node run --agents accepts it.
func TestToolsAndAgentsListTakeTROUPE_SKILLS(t *testing.T) {
	t.Chdir(t.TempDir()) // no .troupe.json here
	dir := t.TempDir()
	skillsDir := filepath.Join(dir, "skills")
	if err := os.MkdirAll(filepath.Join(skillsDir, "greet"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(skillsDir, "greet", "SKILL.md"), []byte("---\nname: greet\ndescription: Greets people warmly.\n---\nSay hello.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	agentsFile := filepath.Join(dir, "agents.yaml")
	if err := os.WriteFile(agentsFile, []byte("agents:\n  greeter:\n    tools: [\"skill:greet\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TROUPE_SKILLS", skillsDir)
	t.Setenv("TROUPE_DISCLOSURE", "")
	code, out, errs := nodeTools(t, options{}, "list")
	if code != 0 || !strings.Contains(out, "\nload_skill ") || !strings.Contains(out, "\nread_skill_file ") {
		t.Errorf("tools list with TROUPE_SKILLS: %d, no skill tools:\n%s%s", code, out, errs)
	}
	var aout, aerr bytes.Buffer
	if code := run(context.Background(), []string{"agents", "list", "--agents", agentsFile}, &aout, &aerr, options{}); code != 0 || !strings.Contains(aout.String(), "greeter") {
		t.Errorf("agents list with TROUPE_SKILLS: %d\n%s%s", code, aout.String(), aerr.String())
	}
	t.Setenv("TROUPE_DISCLOSURE", "sideways")
	if code, _, errs := nodeTools(t, options{}, "list"); code != 2 || !strings.Contains(errs, "sideways") {
		t.Errorf("tools list with TROUPE_DISCLOSURE=sideways: %d %s; want 2 naming it, as node run refuses it", code, errs)
	}
}
