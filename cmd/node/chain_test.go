package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// The chains section is checked when the file is read, and the tools its steps call
// when the node builds its tools: a bad chain stops the node (exit 2), naming the
// chain, the step and the problem.
func TestChainConfigIsValidated(t *testing.T) {
	t.Chdir(t.TempDir())
	for body, want := range map[string]string{
		`{"chains": [{"name": "c", "description": "d"}]}`: `chains: tools: bad chain "c": it has no steps`,
		`{"chains": [{"name": "c", "description": "d", "steps": [{"name": "a", "tool": "clock", "args": "{{.steps.b.output}}"}, {"name": "b", "tool": "clock"}]}]}`: `refers to step "b", which runs after it`,
		`{"chains": [{"name": "c", "description": "d", "steps": [{"name": "a", "tool": "clock", "args": "{{.args"}]}]}`:                                             `bad chain "c": step "a": args:`,
		`{"chains": [{"name": "c", "description": "d", "steps": [{"name": "a", "tool": "clock"}, {"name": "a", "tool": "clock"}]}]}`:                                `two steps are named "a"`,
		`{"chains": [{"name": "c", "description": "d", "steps": [{"name": "a", "tool": "shell"}]}]}`:                                                                `step "a" calls the tool "shell", which the agent does not have`,
		`{"chains": [{"name": "clock", "description": "d", "steps": [{"name": "a", "tool": "calculator"}]}]}`:                                                       `bad chain "clock": a tool has this name already`,
		`{"chains": [{"name": "c", "description": "d", "steps": [{"name": "a", "tool": "clock", "argz": "{}"}]}]}`:                                                  `unknown field "chains[0].steps[0].argz": a step's fields are name, tool, args`,
		`{"chains": [{"name": "c", "descripton": "d"}]}`:                                                                                                            `unknown field "chains[0].descripton": a chain's fields are name, description, input_schema, steps, output`,
	} {
		code, out, errs := nodeTools(t, options{}, "list", "--config", writeConfig(t, body))
		if code != 2 || !strings.Contains(errs, want) {
			t.Errorf("%s: exit %d %s%s; want 2 with %q", body, code, out, errs, want)
		}
	}
	// run and serve build the same chains.
	var out, errb bytes.Buffer
	cfg := writeConfig(t, `{"chains": [{"name": "c", "description": "d", "steps": [{"name": "a", "tool": "shell"}]}]}`)
	if code := run(context.Background(), []string{"run", "--config", cfg, "--model", "offline", "1+1"}, &out, &errb, options{}); code != 2 ||
		!strings.Contains(errb.String(), `calls the tool "shell"`) {
		t.Errorf("run with a chain calling an unknown tool: %d %s", code, errb.String())
	}
}

// chainConfig is a chain of three record calls, each given what the one before it
// answered; the chain's result names all three.
const chainConfig = `{"chains": [{
	"name": "record_chain",
	"description": "Records three things in order.",
	"input_schema": {"type": "object", "properties": {"n": {"type": "string"}}, "required": ["n"]},
	"steps": [
		{"name": "one", "tool": "record", "args": "{\"n\": {{json .args.n}}}"},
		{"name": "two", "tool": "record", "args": "{\"after\": {{json .steps.one.output}}}"},
		{"name": "three", "tool": "record", "args": "{\"after\": {{json .steps.two.output}}}"}],
	"output": "chain of {{.args.n}}: {{.steps.three.output}}"}]}`

func TestToolsListAndCallAChain(t *testing.T) {
	t.Chdir(t.TempDir())
	cfg := writeConfig(t, `{"chains": [{"name": "twice", "description": "Doubles a number twice.",
		"steps": [{"name": "a", "tool": "calculator", "args": "{\"expression\": \"{{.args.x}} * 2\"}"},
		          {"name": "b", "tool": "calculator", "args": "{\"expression\": \"{{.steps.a.output}} * 2\"}"}]}]}`)
	code, out, errs := nodeTools(t, options{}, "list", "--config", cfg)
	if code != 0 || !strings.Contains(out, "\ntwice ") || !strings.Contains(out, "Doubles a number twice.") {
		t.Fatalf("list: %d\n%s%s", code, out, errs)
	}
	code, out, errs = nodeTools(t, options{}, "call", "--config", cfg, "twice", `{"x": 5}`)
	if code != 0 || strings.TrimSpace(out) != "20" {
		t.Fatalf("call: %d %q %s", code, out, errs)
	}
}

// A chain's step can call the notes: node tools call runs it on the data
// directory's notes, and node run builds the same chain. A step naming the tool of
// an MCP server the file does not configure is refused as a tool the agent lacks.
func TestChainOfTheNotesThroughTheCLI(t *testing.T) {
	clearLLMEnv(t)
	t.Setenv("TROUPE_CLICKHOUSE", "")
	t.Chdir(t.TempDir())
	data := filepath.Join(t.TempDir(), "data")
	cfg := writeConfig(t, `{"tools": {"notes": {}}, "chains": [{"name": "remember", "description": "Notes a fact, then counts the notes.",
		"steps": [{"name": "add", "tool": "notes", "args": "{\"op\": \"add\", \"args\": {\"body\": {{json .args.fact}}}}"},
		          {"name": "count", "tool": "notes", "args": "{\"op\": \"list\"}"}],
		"output": "{{.steps.add.json.id}} of {{.steps.count.json.matched}}"}]}`)
	if code, out, errs := nodeTools(t, options{}, "list", "--config", cfg); code != 0 || !strings.Contains(out, "\nremember ") {
		t.Fatalf("list: %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{"n1 of 1", "n2 of 2"} {
		if code, out, errs := nodeTools(t, options{}, "call", "--config", cfg, "--data", data, "remember", `{"fact": "aisle seats"}`); code != 0 || strings.TrimSpace(out) != want {
			t.Fatalf("call: %d %q %s; want %q", code, out, errs, want)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"run", "--config", cfg, "--data", data, "--model", "offline", "hello"}, &out, &errb, options{}); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out.String(), errb.String())
	}

	bad := writeConfig(t, `{"chains": [{"name": "c", "description": "d", "steps": [{"name": "a", "tool": "sky__forecast"}]}]}`)
	if code, _, errs := nodeTools(t, options{}, "list", "--config", bad); code != 2 || !strings.Contains(errs, `step "a" calls the tool "sky__forecast", which the agent does not have`) {
		t.Errorf("tools list with a step on an unconfigured server: %d %s", code, errs)
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"run", "--config", bad, "--data", data, "--model", "offline", "hello"}, &out, &errb, options{}); code != 2 ||
		!strings.Contains(errb.String(), `calls the tool "sky__forecast"`) {
		t.Errorf("run with a step on an unconfigured server: %d %s", code, errb.String())
	}
}

// chainsIn reads what the log holds of the sessions' chains: the keys of the steps
// whose results are recorded and of those requested and not answered, and the
// number of step requests per chain call and step name (more than one would be a
// step decided twice).
func chainsIn(t *testing.T, log eventlog.Log, ids []string) (done, unanswered map[string]bool, requests map[string]int) {
	t.Helper()
	done, unanswered, requests = map[string]bool{}, map[string]bool{}, map[string]int{}
	for _, id := range ids {
		evs, err := log.Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		steps := map[string]bool{}
		for _, e := range evs {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			switch p := p.(type) {
			case *messages.ToolCallRequested:
				if p.Chain != "" {
					steps[p.Key] = true
					requests[p.Chain+" "+p.ChainStep]++
				}
			case *messages.ToolCallCompleted:
				if steps[p.Key] {
					done[p.Key] = true
				}
			}
		}
		for k := range steps {
			if !done[k] {
				unanswered[k] = true
			}
		}
	}
	return done, unanswered, requests
}

// A node killed with SIGKILL in the middle of tool chains resumes them from the log:
// every chain completes, a step whose result was recorded is not run again, and a
// step that was running is run again with the key it was requested with (the record
// tool performs its side effect once per key).
func TestKillNineMidChainResumesWithoutRepeatingAFinishedStep(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[
		{"tool_calls":[{"id":"a","name":"record_chain","arguments":"{\"n\":\"x\"}"}]},
		{"content":"chain done"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "troupe.json")
	if err := os.WriteFile(cfg, []byte(chainConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	records, modelLog := filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt")
	const sessions = 8

	first := startChildWith(t, dir, script, records, modelLog, nil, "--config", cfg)
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = first.post(t, fmt.Sprintf(`{"input":"record a chain","session_id":"chain-%02d"}`, i))
	}
	// Kill once the chains are well under way (first steps answered, some third steps
	// running): some
	// steps are recorded as answered, others as requested only.
	deadline := time.Now().Add(20 * time.Second)
	for len(countLines(t, records, "effect ")) < 2*sessions+sessions/2 {
		if time.Now().After(deadline) {
			t.Fatalf("the chains never ran:\n%s", first.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.kill9(t)

	lg := openDataReadOnly(t, dir)
	defer lg.Close()
	doneAtKill, unansweredAtKill, _ := chainsIn(t, lg, ids)
	_, _, unfinished := recordedIn(t, lg, ids)
	if unfinished == 0 || len(doneAtKill) == 0 {
		t.Fatalf("the kill landed with %d sessions unfinished and %d steps answered; the test proves nothing", unfinished, len(doneAtKill))
	}
	callsAtKill := countLines(t, records, "call ")

	second := startChildWith(t, dir, script, records, modelLog, nil, "--config", cfg)
	defer func() {
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		_ = second.cmd.Wait()
	}()
	for _, id := range ids {
		deadline := time.Now().Add(30 * time.Second)
		for {
			st := second.status(t, id)
			if st.Status == messages.StatusCompleted && st.Output == "chain done" {
				break
			}
			if st.Status == messages.StatusFailed || st.Status == messages.StatusCompleted || time.Now().After(deadline) {
				t.Fatalf("session %s did not complete: %+v\n%s", id, st, second.stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	done, unanswered, requests := chainsIn(t, lg, ids)
	calls, effects := countLines(t, records, "call "), countLines(t, records, "effect ")
	for key := range doneAtKill {
		if calls[key] != 1 {
			t.Errorf("step %s had a recorded result before the kill but ran %d times", key, calls[key])
		}
	}
	reissued, running := 0, 0
	for key := range unansweredAtKill {
		if callsAtKill[key] > 0 {
			running++ // its tool had started: the kill landed mid-call
		}
		if !done[key] {
			t.Errorf("step %s, unanswered at the kill, has no result under its key after the restart", key)
		}
		if calls[key] > callsAtKill[key] {
			reissued++
		}
	}
	for step, n := range requests {
		if n != 1 {
			t.Errorf("chain step %s was requested %d times", step, n)
		}
	}
	duplicates := 0
	for key, n := range effects {
		if n != 1 {
			duplicates += n - 1
			t.Errorf("side effect %s happened %d times", key, n)
		}
	}
	if len(unanswered) != 0 || len(done) != 3*sessions || len(effects) != 3*sessions {
		t.Errorf("after the restart: %d steps answered, %d unanswered, %d distinct side effects; want %d, 0, %d", len(done), len(unanswered), len(effects), 3*sessions, 3*sessions)
	}
	t.Logf("killed with %d of %d sessions unfinished: %d chain steps answered, %d requested and unanswered (%d of them mid-call); after the restart %d steps re-issued with their recorded keys, %d duplicate side effects",
		unfinished, sessions, len(doneAtKill), len(unansweredAtKill), running, reissued, duplicates)
	assertGapFree(t, lg, ids)
}

// A step may name an MCP server's tool: it is checked against the configured servers
// when the chain is built, and looked up when the step runs, so a chain over a server
// that is down loads, and a call of it ends at that step, naming it.
func TestChainOfAnMCPServersToolThroughTheCLI(t *testing.T) {
	clearLLMEnv(t)
	t.Chdir(t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	cfg := writeConfig(t, `{"mcp_servers": {"remote": {"url": "`+down+`"}},
		"chains": [{"name": "echo_twice", "description": "Echoes twice.",
		"steps": [{"name": "first", "tool": "calculator", "args": "{\"expression\": \"1+1\"}"},
		          {"name": "say", "tool": "remote__echo", "args": "{\"message\": {{json .steps.first.output}}}"}]}]}`)
	if code, out, errs := nodeTools(t, options{}, "list", "--config", cfg); code != 0 || !strings.Contains(out, "\necho_twice ") {
		t.Fatalf("list: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := nodeTools(t, options{}, "call", "--config", cfg, "echo_twice", `{}`); code == 0 ||
		!strings.Contains(errs, `chain echo_twice stopped at step 2 of 2, "say" (remote__echo)`) {
		t.Fatalf("call with the server down: %d %q %s", code, out, errs)
	}
}
