package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A node killed with SIGKILL while a team fans out: two branches finished, the
// third's member still waits on its model. The next node resumes the team's
// session: the finished branches are not performed again (no model call, no tool
// call of their child sessions, no second task), the one in flight is performed
// again under its key and finds its child session, and every side effect happens
// once.
func TestKillNineDuringAFanOutRepeatsNoFinishedBranch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	dir := t.TempDir()
	// Every member: record, then answer.
	script := filepath.Join(dir, "script.json")
	steps := `{"name":"scripted","steps":[{"tool_calls":[{"id":"c1","name":"record","arguments":"{\"what\":\"mine\"}"}]},{"content":"recorded"}]}`
	agents := filepath.Join(dir, "agents.yaml")
	file := `agents:
  fast1: {tools: [record]}
  fast2: {tools: [record]}
  slow: {tools: [record]}
  agg: {tools: [record]}
teams:
  panel:
    pattern: fan_out
    members: [fast1, fast2, slow]
    aggregator: agg
`
	if err := os.WriteFile(script, []byte(steps), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agents, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	records, modelLog := filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt")

	first := startChildWith(t, dir, script, records, modelLog, []string{"TROUPE_AGENT_DELAYS=slow=30s"}, "--agents", agents)
	id := first.post(t, `{"input":"record","session_id":"team","agent":"panel"}`)
	// Kill once the team recorded the answers of two branches (its state takes
	// them once the third's is in too: decision rules 15).
	deadline := time.Now().Add(20 * time.Second)
	for {
		lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: filepath.Join(dir, "data"), ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		events, err := lg.Read(context.Background(), id, 1)
		lg.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(typesOf(events), string(messages.TypeToolCallCompleted)) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the branches never answered: %s\n%s", typesOf(events), first.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.kill9(t)

	lg := openDataReadOnly(t, dir)
	defer lg.Close()
	events, err := lg.Read(context.Background(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	children := map[string]string{} // member → child session
	for _, e := range events {
		if e.Type == messages.TypeToolCallRequested {
			p, _ := e.Decode()
			r := p.(*messages.ToolCallRequested)
			for _, m := range []string{"fast1", "fast2", "slow", "agg"} {
				if strings.Contains(r.Arguments, `"agent":"`+m+`"`) {
					children[m] = node.ChildSessionID(messages.EffectKey{SessionID: id, Seq: e.Seq})
				}
			}
		}
	}
	if len(children) != 3 || children["agg"] != "" {
		t.Fatalf("at the kill, the team's delegate calls: %v; want the three branches", children)
	}
	modelDone, toolDone, unfinished := recordedIn(t, lg, []string{children["fast1"], children["fast2"]})
	if unfinished != 0 || len(modelDone) != 4 || len(toolDone) != 2 {
		t.Fatalf("at the kill: the fast branches left %d unfinished, %d model answers, %d tool results; want 0, 4, 2", unfinished, len(modelDone), len(toolDone))
	}
	if _, _, slowUnfinished := recordedIn(t, lg, []string{children["slow"]}); slowUnfinished != 1 {
		t.Fatal("the slow branch had finished at the kill; the test proves nothing")
	}

	second := startChildWith(t, dir, script, records, modelLog, nil, "--agents", agents)
	defer func() {
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		_ = second.cmd.Wait()
	}()
	waitCompleted(t, second, []string{id}, "recorded", 30*time.Second)

	modelCalls, toolCalls, effects := countLines(t, modelLog, ""), countLines(t, records, "call "), countLines(t, records, "effect ")
	for key := range modelDone {
		if modelCalls[key] != 1 {
			t.Errorf("model call %s of a finished branch was made %d times", key, modelCalls[key])
		}
	}
	for key := range toolDone {
		if toolCalls[key] != 1 {
			t.Errorf("tool call %s of a finished branch ran %d times", key, toolCalls[key])
		}
	}
	if len(effects) != 4 {
		t.Errorf("%d distinct side effects, want 4 (a record per member)", len(effects))
	}
	for key, n := range effects {
		if n != 1 {
			t.Errorf("side effect %s happened %d times", key, n)
		}
	}
	events, err = lg.Read(context.Background(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(typesOf(events), string(messages.TypeToolCallRequested)); n != 4 {
		t.Errorf("the team requested %d delegate calls, want 4: %s", n, typesOf(events))
	}
	for m, child := range children {
		evs, err := lg.Read(context.Background(), child, 1)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(typesOf(evs), string(messages.TypeTaskSubmitted)); n != 1 {
			t.Errorf("%s's child session %s has %d tasks, want 1", m, child, n)
		}
	}
	assertGapFree(t, lg, append([]string{id}, children["fast1"], children["fast2"], children["slow"]))
}

func typesOf(events []messages.Envelope) string {
	s := make([]string, len(events))
	for i, e := range events {
		s[i] = string(e.Type)
	}
	return strings.Join(s, " ")
}
