package main

import (
	"bytes"
	"context"
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
