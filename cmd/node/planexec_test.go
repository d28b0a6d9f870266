package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// A node killed with SIGKILL while a plan_execute task's steps run in parallel
// resumes the task from the log: a step whose result was recorded is not performed
// again (the record tool counts its invocations per key), a step that was running is
// performed again with the key it was requested with, no step is requested twice,
// and the task completes.
func TestKillNineDuringAPlanFanOutResumesWithoutRepeatingAFinishedStep(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	const steps = 8
	dir := t.TempDir()
	var plan []string
	for i := 1; i <= steps; i++ {
		plan = append(plan, fmt.Sprintf(`{\"id\": \"s%d\", \"tool\": \"record\", \"args\": {\"n\": \"%d\"}, \"deps\": []}`, i, i))
	}
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[
		{"content":"{\"steps\": [`+strings.Join(plan, ", ")+`]}"},
		{"content":"all recorded"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	agents := filepath.Join(dir, "agents.yaml")
	if err := os.WriteFile(agents, []byte("agents:\n  planner:\n    paradigm: plan_execute\n    tools: [record]\n    settings:\n      concurrency: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	records, modelLog := filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt")

	first := startChildWith(t, dir, script, records, modelLog, nil, "--agents", agents)
	id := first.post(t, `{"input":"record eight things","session_id":"fanout","agent":"planner"}`)
	// Kill once the second wave of steps runs: the first wave's results are recorded
	// (they are durable before the next steps are issued), the second's are not.
	deadline := time.Now().Add(20 * time.Second)
	for len(countLines(t, records, "effect ")) < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("the steps never ran:\n%s", first.stderr.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	first.kill9(t)

	lg := openDataReadOnly(t, dir)
	defer lg.Close()
	doneAtKill, unansweredAtKill := stepsIn(t, lg, id)
	if len(doneAtKill) == 0 || len(unansweredAtKill) == 0 {
		t.Fatalf("the kill landed with %d steps answered and %d unanswered; the test proves nothing", len(doneAtKill), len(unansweredAtKill))
	}
	callsAtKill := countLines(t, records, "call ")

	second := startChildWith(t, dir, script, records, modelLog, nil, "--agents", agents)
	defer func() {
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		_ = second.cmd.Wait()
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		st := second.status(t, id)
		if st.Status == messages.StatusCompleted && st.Output == "all recorded" {
			break
		}
		if st.Status == messages.StatusFailed || st.Status == messages.StatusCompleted || time.Now().After(deadline) {
			t.Fatalf("session %s did not complete: %+v\n%s", id, st, second.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	done, unanswered := stepsIn(t, lg, id)
	calls := countLines(t, records, "call ")
	for key := range doneAtKill {
		if calls[key] != 1 {
			t.Errorf("step %s had a recorded result before the kill but was performed %d times", key, calls[key])
		}
	}
	reissued := 0
	for key := range unansweredAtKill {
		if !done[key] {
			t.Errorf("step %s, unanswered at the kill, has no result under its key after the restart", key)
		}
		if calls[key] > callsAtKill[key] {
			reissued++
		}
	}
	if len(done) != steps || len(unanswered) != 0 {
		t.Errorf("after the restart: %d steps answered, %d unanswered; want %d and 0", len(done), len(unanswered), steps)
	}
	t.Logf("killed with %d steps answered and %d running; after the restart %d re-issued with their recorded keys, %d performed in all",
		len(doneAtKill), len(unansweredAtKill), reissued, len(calls))
	assertGapFree(t, lg, []string{id})
}

// stepsIn reads a session's plan steps from the log: the keys of those answered and
// of those requested and unanswered. A step requested twice fails the test.
func stepsIn(t *testing.T, log interface {
	Read(context.Context, string, uint64) ([]messages.Envelope, error)
}, id string) (done, unanswered map[string]bool) {
	t.Helper()
	evs, err := log.Read(context.Background(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	requested, byCall := map[string]bool{}, map[string]int{}
	done, unanswered = map[string]bool{}, map[string]bool{}
	for _, e := range evs {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *messages.ToolCallRequested:
			if p.Purpose == "step" {
				requested[p.Key] = true
				if byCall[p.CallID]++; byCall[p.CallID] > 1 {
					t.Errorf("step %s was requested %d times", p.CallID, byCall[p.CallID])
				}
			}
		case *messages.ToolCallCompleted:
			if requested[p.Key] {
				done[p.Key] = true
			}
		}
	}
	for k := range requested {
		if !done[k] {
			unanswered[k] = true
		}
	}
	return done, unanswered
}

// examples/plan_execute.yaml runs offline: the compound question is planned as two
// calculator steps, both requested before either answers, and joined.
func TestRunPlanExecuteExample(t *testing.T) {
	t.Setenv("TROUPE_AGENTS", "")
	example := filepath.Join("..", "..", "examples", "plan_execute.yaml")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--model", "offline", "--agents", example, "--agent", "planner",
		"What is 2+3 and what is 4*5?"}, &out, &errb, options{})
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"model offline: plan, step 1", "[4] step s1: tool calculator({\"expression\":\"2+3\"})",
		"[5] step s2: tool calculator({\"expression\":\"4*5\"})", "model offline: answer, step 2", "\nanswer: 2+3 = 5 and 4*5 = 20\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("node run lacks %q:\n%s", want, out.String())
		}
	}
}
