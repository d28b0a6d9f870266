package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// approvalsFile writes an agents file whose agent "careful" must have its
// calculator calls approved.
func approvalsFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agents.yaml")
	if err := os.WriteFile(path, []byte("agents:\n  careful:\n    tools:\n      - clock\n      - {name: calculator, approval: required}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runCareful runs "What is 6 * 7?" with the careful agent, stdin given and taken for
// a terminal or not, and returns the exit code, stdout and the session's events.
func runCareful(t *testing.T, stdin string, terminal bool) (int, string, []messages.Envelope) {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", data, "--model", "offline", "--agents", approvalsFile(t), "--agent", "careful", "What is 6 * 7?"},
		&out, &errb, options{stdin: strings.NewReader(stdin), terminal: &terminal})
	if code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, out.String(), errb.String())
	}
	return code, out.String(), readSession(t, data, sessionOf(t, out.String()))
}

// resolution returns the session's approval.resolved and the calculator's result.
func resolution(t *testing.T, events []messages.Envelope) (*messages.ApprovalResolved, *messages.ToolCallCompleted) {
	t.Helper()
	var res *messages.ApprovalResolved
	var done *messages.ToolCallCompleted
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *messages.ApprovalResolved:
			res = p
		case *messages.ToolCallCompleted:
			done = p
		}
	}
	if res == nil || done == nil {
		t.Fatalf("no approval.resolved or tool.completed among %d events", len(events))
	}
	return res, done
}

// node run asks its terminal: the tool and its arguments, y/N, a reason; "y" runs
// the call.
func TestRunAsksTheTerminalToApprove(t *testing.T) {
	_, out, events := runCareful(t, "y\nlooks right\n", true)
	if !strings.Contains(out, `approve the call of calculator with {"expression":"6 * 7"}? [y/N]`) || !strings.Contains(out, "answer: 42") {
		t.Fatalf("stdout:\n%s", out)
	}
	res, done := resolution(t, events)
	if !res.Approve || res.By != messages.ApprovedByTerminal || res.Reason != "looks right" || done.Result != "42" {
		t.Fatalf("answer %+v, result %+v", res, done)
	}
}

// Anything but y or yes rejects, and the model reads the rejection.
func TestRunTerminalRejects(t *testing.T) {
	_, _, events := runCareful(t, "n\n\n", true)
	res, done := resolution(t, events)
	if res.Approve || res.By != messages.ApprovedByTerminal || done.Error != "rejected by a human" {
		t.Fatalf("answer %+v, result %+v", res, done)
	}
}

// Without a terminal, node run (which serves no API) rejects the call at once and
// says why.
func TestRunWithoutTerminalRejectsTheCall(t *testing.T) {
	_, out, events := runCareful(t, "y\n", false)
	if strings.Contains(out, "[y/N]") || !strings.Contains(out, "no terminal") {
		t.Fatalf("stdout:\n%s", out)
	}
	res, done := resolution(t, events)
	if res.Approve || res.By != messages.ApprovedByAPI || !strings.Contains(done.Error, "no terminal to ask on") {
		t.Fatalf("answer %+v, result %+v", res, done)
	}
}

// The example agents file with an approval is valid, and the list marks the tool
// that needs one; a malformed tool entry exits 2 with the line and the problem.
func TestAgentsListApprovals(t *testing.T) {
	code, out, errOut := runAgents(t, "list", "--agents", filepath.Join("..", "..", "examples", "approvals.yaml"))
	if code != 0 || !strings.Contains(out, "calculator(approval)") || strings.Contains(out, "clock(approval)") {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	bad := writeAgents(t, "agents:\n  a:\n    tools:\n      - {name: calculator, approval: always}\n")
	code, _, errOut = runAgents(t, "list", "--agents", bad)
	if code != 2 || !strings.Contains(errOut, `line 4: agent "a": tools: approval "always": want required or none`) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
