package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// countedCalculator is the calculator counting the calls it is asked to perform,
// by session (of the call's key). While hold is set, a call blocks until its
// context ends instead: a call in flight, which the node performs (or not) on its
// own time.
type countedCalculator struct {
	tools.Calculator
	hold    bool
	entered chan string // a held call's session, as it starts
	mu      sync.Mutex
	calls   map[string]int
}

func newCountedCalculator(hold bool) *countedCalculator {
	return &countedCalculator{hold: hold, entered: make(chan string, 16), calls: map[string]int{}}
}

func (c *countedCalculator) Call(ctx context.Context, call tools.Call) (string, error) {
	k, err := messages.ParseEffectKey(call.Key)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	c.calls[k.SessionID]++
	c.mu.Unlock()
	if c.hold {
		c.entered <- k.SessionID
		<-ctx.Done()
		return "", ctx.Err()
	}
	return c.Calculator.Call(ctx, call)
}

func (c *countedCalculator) count(session string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[session]
}

// laterClock is the clock an hour ahead: an approval asked for with a shorter
// timeout has expired on it.
type laterClock struct{}

func (laterClock) Now() time.Time { return time.Now().Add(time.Hour) }

// waitFor polls the log of n until cond holds for session's events, for a minute at most.
func waitFor(t *testing.T, n *node.Node, session, what string, cond func([]messages.Envelope) bool) []messages.Envelope {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		events, err := n.Log().Read(context.Background(), session, 1)
		if err != nil {
			t.Fatal(err)
		}
		if cond(events) {
			return events
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: %s did not happen within a minute (%d events)", session, what, len(events))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func has(typ messages.Type) func([]messages.Envelope) bool {
	return func(events []messages.Envelope) bool {
		for _, e := range events {
			if e.Type == typ {
				return true
			}
		}
		return false
	}
}

func ended(events []messages.Envelope) bool {
	return has(messages.TypeTaskCompleted)(events) || has(messages.TypeTaskFailed)(events)
}

// exportTo exports session of dir (read-only, as while its node serves) to a file.
func exportTo(t *testing.T, dir, session string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), session+".jsonl")
	if code, _, errs := replay(t, "export", session, "--data", dir, "--out", file); code != 0 {
		t.Fatalf("export %s: %d %s", session, code, errs)
	}
	return file
}

// checkRefused checks that a plain import of file into a fresh directory refuses,
// naming what the unfinished task waits for (want) and the choices, and writes
// nothing.
func checkRefused(t *testing.T, file, want string) {
	t.Helper()
	dir := t.TempDir()
	code, out, errs := replay(t, "import", file, "--data", dir)
	if code != 1 || !strings.Contains(errs, "was exported before its tasks ended") || !strings.Contains(errs, want) ||
		!strings.Contains(errs, "--unfinished park") || !strings.Contains(errs, "--unfinished resume") || !strings.Contains(errs, "Nothing was imported") {
		t.Fatalf("import of an unfinished session: exit %d\n%s%s", code, out, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused import wrote %d files", len(entries))
	}
}

// A session exported while a tool call of it is in flight is refused by a plain
// import; imported --unfinished park, a node serving the log performs nothing of
// it (the calculator is never called for it) and it verifies; imported
// --unfinished resume, the node performs the call again and finishes the task.
func TestImportOfASessionWithAToolCallInFlight(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	ctx := context.Background()
	src := t.TempDir()
	held := newCountedCalculator(true)
	n, stop := nodetest.StartWithStop(t, node.Config{DataDir: src, Tools: []tools.Tool{held, tools.NewClock(nil)}})
	for _, id := range []string{"parked", "resumed"} {
		if _, err := n.Submit(ctx, node.Task{Input: "What is 6 * 7?", SessionID: id}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		select {
		case <-held.entered:
		case <-time.After(time.Minute):
			t.Fatal("the calculator was not called within a minute")
		}
	}
	parkedFile, resumedFile := exportTo(t, src, "parked"), exportTo(t, src, "resumed")
	stop()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	checkRefused(t, parkedFile, "waiting for the tool call calculator(")

	dir := t.TempDir()
	code, out, errs := replay(t, "import", parkedFile, "--data", dir, "--unfinished", "park")
	if code != 0 || !strings.Contains(out, "imported session parked") || !strings.Contains(out, "no node resumes it") {
		t.Fatalf("import --unfinished park: %d %s %s", code, out, errs)
	}
	code, out, errs = replay(t, "import", resumedFile, "--data", dir, "--unfinished", "resume")
	if code != 0 || !strings.Contains(out, "imported session resumed") || !strings.Contains(errs, "warning: session resumed is imported unfinished") {
		t.Fatalf("import --unfinished resume: %d %s %s", code, out, errs)
	}
	if code, out, errs := replay(t, "verify", "parked", "--data", dir); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify of the parked session: %d %s %s", code, out, errs)
	}
	parked := readAll(t, dir)["parked"]
	last := parked[len(parked)-1]
	if p, err := last.Decode(); err != nil || last.Type != messages.TypeTaskFailed || p.(*messages.TaskFailed).Reason != messages.ReasonCancelled ||
		!strings.Contains(p.(*messages.TaskFailed).Error, "imported unfinished") {
		t.Fatalf("the parked session ends with %s %s", last.Type, last.Payload)
	}

	// A node serving the log: the resumed session goes on, the parked one does not.
	calc := newCountedCalculator(false)
	n, stop = nodetest.StartWithStop(t, node.Config{DataDir: dir, Tools: []tools.Tool{calc, tools.NewClock(nil)}})
	waitFor(t, n, "resumed", "the end of its task", has(messages.TypeTaskCompleted))
	stop()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if got := calc.count("resumed"); got != 1 {
		t.Errorf("the resumed session's call was performed %d times, want 1", got)
	}
	if got := calc.count("parked"); got != 0 {
		t.Errorf("the parked session's call was performed %d times here, want 0: the deployment it came from performs it", got)
	}
	if after := readAll(t, dir)["parked"]; len(after) != len(parked) {
		t.Errorf("the node wrote %d events to the parked session", len(after)-len(parked))
	}
}

// A session exported while it waits for an approval is refused by a plain import,
// naming the approval; imported --unfinished park, a node serving the log (on a
// clock past the approval's expiry) neither rejects the approval nor calls the
// model for it, and it verifies; imported --unfinished resume, the node goes on
// with it: the approval expires, and the task ends.
func TestImportOfASessionWaitingForAnApproval(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	agentsFile := filepath.Join("..", "..", "examples", "approvals.yaml")
	file, err := nodeconfig.LoadAgents(agentsFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src := t.TempDir()
	n, stop := nodetest.StartWithStop(t, node.Config{DataDir: src, Agents: file.NodeAgents()})
	for _, id := range []string{"parked", "resumed"} {
		if _, err := n.Submit(ctx, node.Task{Input: "What is 6 * 7?", SessionID: id, Agent: "careful"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, n, id, "an approval's request", has(messages.TypeApprovalRequested))
	}
	parkedFile, resumedFile := exportTo(t, src, "parked"), exportTo(t, src, "resumed")
	stop()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	checkRefused(t, parkedFile, "waiting for an approval of calculator(")

	dir := t.TempDir()
	if code, out, errs := replay(t, "import", parkedFile, "--data", dir, "--unfinished", "park"); code != 0 {
		t.Fatalf("import --unfinished park: %d %s %s", code, out, errs)
	}
	if code, out, errs := replay(t, "import", resumedFile, "--data", dir, "--unfinished", "resume"); code != 0 {
		t.Fatalf("import --unfinished resume: %d %s %s", code, out, errs)
	}
	if code, out, errs := replay(t, "verify", "parked", "--data", dir, "--agents", agentsFile); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify of the parked session: %d %s %s", code, out, errs)
	}
	parked := readAll(t, dir)["parked"]

	n, stop = nodetest.StartWithStop(t, node.Config{DataDir: dir, Agents: file.NodeAgents(), Clock: laterClock{}})
	waitFor(t, n, "resumed", "the end of its task", ended)
	stop()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if !has(messages.TypeApprovalResolved)(readAll(t, dir)["resumed"]) {
		t.Error("the resumed session's approval was not answered (expired) here")
	}
	if after := readAll(t, dir)["parked"]; len(after) != len(parked) {
		t.Errorf("the node wrote %d events to the parked session (its approval expired, or the model was called)", len(after)-len(parked))
	}
}

// A session whose tasks all ended imports as before, under each --unfinished; a
// value it does not know is a usage error.
func TestImportOfAnEndedSessionIsUnchanged(t *testing.T) {
	src := t.TempDir()
	id := recordSession(t, src, "What is 12 * (7 + 5)?")
	code, export, errs := replay(t, "export", id, "--data", src)
	if code != 0 {
		t.Fatalf("export: %d %s", code, errs)
	}
	file := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(file, []byte(export), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"--unfinished", "refuse"}, {"--unfinished", "park"}, {"--unfinished", "resume"}} {
		dir := t.TempDir()
		code, out, errs := replay(t, append([]string{"import", file, "--data", dir}, args...)...)
		if code != 0 || !strings.HasPrefix(out, "imported session "+id+" (") || strings.Contains(out, "cancelled") || strings.Contains(errs, "warning") {
			t.Fatalf("import %v: %d %s %s", args, code, out, errs)
		}
		if code, got, errs := replay(t, "export", id, "--data", dir); code != 0 || got != export {
			t.Fatalf("import %v: the session exports as %d %q (%s), want the export read", args, code, got, errs)
		}
	}
	if code, _, errs := replay(t, "import", file, "--data", t.TempDir(), "--unfinished", "skip"); code != 2 || !strings.Contains(errs, "want refuse, park or resume") {
		t.Fatalf("--unfinished skip: %d %s", code, errs)
	}
}

// A plan-and-execute session (with delegations to sub-agents) cut after each of
// its events, as an export made while it ran: each cut imports --unfinished park
// with no task left running, and verifies.
func TestImportParkedAtEveryEventOfAPlan(t *testing.T) {
	data, agentsPath, _ := planFixture(t)
	code, export, errs := replay(t, "export", "plan", "--data", data)
	if code != 0 {
		t.Fatalf("export: %d %s", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(export, "\n"), "\n")
	var h exportHeader
	if err := json.Unmarshal([]byte(lines[0]), &h); err != nil {
		t.Fatal(err)
	}
	events, configs := lines[1:1+h.Events], lines[1+h.Events:]
	t.Logf("%d events, %d configurations", h.Events, h.Configs)
	for at := 1; at < h.Events; at++ {
		cut := h
		cut.Events = at
		head, err := json.Marshal(cut)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "cut.jsonl")
		content := strings.Join(slices.Concat([]string{string(head)}, events[:at], configs), "\n") + "\n"
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		code, out, errs := replay(t, "import", file, "--data", dir, "--unfinished", "park")
		if code != 0 {
			t.Fatalf("import of the cut at %d: %d %s %s", at, code, out, errs)
		}
		if code, out, errs := replay(t, "list", "--data", dir, "--json"); code != 0 || strings.Contains(out, `"running"`) {
			t.Errorf("the cut at %d imported parked is listed %d %s %s", at, code, out, errs)
		}
		if code, out, errs := replay(t, "verify", "plan", "--data", dir, "--agents", agentsPath); code != 0 || !strings.Contains(out, "deterministic") {
			t.Errorf("verify the cut at %d, parked: exit %d\n%s%s", at, code, out, errs)
		}
	}
}
