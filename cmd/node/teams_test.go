package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// examples/teams.yaml: node agents list prints its teams, and node run runs the
// orchestrator on the offline model: routed by the model to the calculator, whose
// answer is the team's.
func TestRunTeamsExample(t *testing.T) {
	t.Setenv("TROUPE_AGENTS", "")
	example := filepath.Join("..", "..", "examples", "teams.yaml")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"agents", "list", "--agents", example}, &out, &errb, options{}); code != 0 {
		t.Fatalf("agents list: exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"TEAM", "PATTERN", "MEMBERS", "desk                orchestrator  calculator,writer,fallback=writer",
		"review              debate        calculator,checker,judge=judge"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("agents list lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--model", "offline", "--agents", example, "--agent", "desk",
		"What is 12 * (7 + 5)?"}, &out, &errb, options{})
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"team state: append global.routing by team: calculator: the model's choice: the task is arithmetic",
		"tool delegate → 144 (child session ", "team state: merge calculator.answer by calculator: 144", "\nanswer: 144\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("node run lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--agents", example, "--agent", "desks", "hi"}, &out, &errb, options{}); code != 2 ||
		!strings.Contains(errb.String(), "the teams are compute_then_write, desk, frontdesk, panel, review") {
		t.Errorf("an unknown team: exit %d %s", code, errb.String())
	}
}

// node agents list reads TROUPE_AGENTS as node run does, and prints a
// description's control characters escaped (a description is the file author's
// text, not the terminal's commands).
func TestAgentsListReadsTroupeAgentsAndEscapes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agents.yaml")
	if err := os.WriteFile(file, []byte("agents:\n  painter:\n    description: \"\\e[31mRED\\e[0m and a bell\\a\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TROUPE_AGENTS", file)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"agents", "list"}, &out, &errb, options{}); code != 0 {
		t.Fatalf("agents list with TROUPE_AGENTS: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), `painter`) || !strings.Contains(out.String(), `\x1b[31mRED\x1b[0m and a bell\a`) || strings.ContainsAny(out.String(), "\x1b\a") {
		t.Errorf("agents list:\n%q", out.String())
	}
}
