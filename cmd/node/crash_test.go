package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// The crash test runs real node processes: this test binary re-executed with
// TROUPE_CRASH_CHILD=1 is `node serve` plus a recording tool and a model that logs its
// calls, so the parent can kill it with SIGKILL and count what happened.
func TestMain(m *testing.M) {
	// The tests choose their own log, bus and model: settings in the environment (a
	// developer's, or those deploy/services.sh exports) must not redirect them.
	for _, v := range []string{"TROUPE_KAFKA", "TROUPE_CLICKHOUSE", "TROUPE_CLICKHOUSE_DATABASE", "TROUPE_DATA",
		"TROUPE_MODEL", "TROUPE_FALLBACK", "TROUPE_HTTP_ADDR", "TROUPE_LLM_PROVIDER"} {
		os.Unsetenv(v)
	}
	if os.Getenv("TROUPE_CRASH_CHILD") == "1" {
		// A cluster test names its own ClickHouse database for its nodes.
		if db := os.Getenv("TROUPE_CHILD_CLICKHOUSE_DATABASE"); db != "" {
			os.Setenv("TROUPE_CLICKHOUSE_DATABASE", db)
		}
		ctx, stop := signalContext()
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, options{
			extraTools: []tools.Tool{&recordTool{path: os.Getenv("TROUPE_RECORD_FILE")}},
			wrapModel: func(m llm.Model) llm.Model {
				// TROUPE_MODEL_DELAY slows every call down, so that tasks queue up.
				delay, _ := time.ParseDuration(os.Getenv("TROUPE_MODEL_DELAY"))
				// TROUPE_AGENT_DELAYS ("agent=2s,other=1s") slows the calls of some agents.
				delays := map[string]time.Duration{}
				for _, kv := range strings.Split(os.Getenv("TROUPE_AGENT_DELAYS"), ",") {
					if agent, d, ok := strings.Cut(kv, "="); ok {
						delays[agent], _ = time.ParseDuration(d)
					}
				}
				return &loggedModel{Model: m, path: os.Getenv("TROUPE_MODEL_LOG"), delay: delay, delays: delays}
			},
		})
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// recordTool performs a side effect once per idempotency key: it appends
// "effect <key>" to a file the first time it sees a key, and "call <key>" on every
// invocation, then takes a while to answer (so a kill can land mid-call).
type recordTool struct {
	path string
	mu   sync.Mutex
}

func (r *recordTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "record", Description: "records a side effect once per key"}
}

func (r *recordTool) Call(ctx context.Context, c tools.Call) (string, error) {
	r.mu.Lock()
	b, err := os.ReadFile(r.path)
	if err != nil && !os.IsNotExist(err) {
		r.mu.Unlock()
		return "", err
	}
	line := "call " + c.Key + "\n"
	if !bytes.Contains(b, []byte("effect "+c.Key+"\n")) {
		line += "effect " + c.Key + "\n"
	}
	err = appendLine(r.path, line)
	r.mu.Unlock()
	if err != nil {
		return "", err
	}
	select {
	case <-time.After(150 * time.Millisecond):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return "recorded " + c.Arguments, nil
}

// loggedModel appends "<key>" to a file before each model call, then answers after
// delay.
type loggedModel struct {
	llm.Model
	path  string
	delay time.Duration
	// delays replace delay for the calls of these agents (llm.Scope.Agent).
	delays map[string]time.Duration
	mu     sync.Mutex
}

func (m *loggedModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	if err := m.before(ctx, r); err != nil {
		return llm.Response{}, err
	}
	return m.Model.Generate(ctx, r)
}

// Stream is Generate for a call that streams, when the model streams (a script's
// stream_chunk): the wrapper must not hide its llm.Streamer.
func (m *loggedModel) Stream(ctx context.Context, r llm.Request, onDelta func(llm.Delta) error) (llm.Response, error) {
	s, ok := m.Model.(llm.Streamer)
	if !ok {
		return m.Generate(ctx, r)
	}
	if err := m.before(ctx, r); err != nil {
		return llm.Response{}, err
	}
	return s.Stream(ctx, r, onDelta)
}

// before logs the call and waits out its delay.
func (m *loggedModel) before(ctx context.Context, r llm.Request) error {
	m.mu.Lock()
	err := appendLine(m.path, r.Key+"\n")
	m.mu.Unlock()
	if err != nil {
		return err
	}
	delay := m.delay
	if d, ok := m.delays[r.Scope.Agent]; ok {
		delay = d
	}
	select {
	case <-time.After(delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func appendLine(path, s string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type child struct {
	cmd    *exec.Cmd
	addr   string
	stderr fmt.Stringer // safe to read while the child runs when it is a *syncBuffer
}

func startChild(t *testing.T, dir, script, records, modelLog string) *child {
	t.Helper()
	return startChildWith(t, dir, script, records, modelLog, nil)
}

// startChildWith starts a child with more environment variables and serve flags.
func startChildWith(t *testing.T, dir, script, records, modelLog string, env []string, flags ...string) *child {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--data", filepath.Join(dir, "data"), "--http", addr, "--model", "scripted:" + script}, flags...)...)
	cmd.Env = append(append(os.Environ(), "TROUPE_CRASH_CHILD=1", "TROUPE_RECORD_FILE="+records, "TROUPE_MODEL_LOG="+modelLog), env...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, addr: addr, stderr: stderr}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			if err = startingAnswer(resp); err == nil {
				return c
			}
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("node did not come up: %v\n%s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill9 kills the child with SIGKILL and waits for it to be gone.
func (c *child) kill9(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
}

// sigterm stops the child with SIGTERM, as a deploy does, and fails unless it exits
// 0 within budget (a node's stop is bounded: 10 s for the HTTP server, then
// node.Config.StopTimeout, 30 s, for its sessions; budget bounds a hang).
func (c *child) sigterm(t *testing.T, budget time.Duration) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the node exited with %v after SIGTERM:\n%s", err, tail(c.stderr.String(), 8000))
		}
	case <-time.After(budget):
		_ = c.cmd.Process.Kill()
		<-exited
		t.Fatalf("the node did not exit within %s of SIGTERM:\n%s", budget, tail(c.stderr.String(), 8000))
	}
}

// openDataReadOnly opens, read-only, the event log children started on dir
// keep in dir/data.
func openDataReadOnly(t *testing.T, dir string) *sqlite.Log {
	t.Helper()
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: filepath.Join(dir, "data"), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

// syncBuffer collects a child's output; String may be called while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (c *child) post(t *testing.T, body string) string {
	t.Helper()
	resp, err := http.Post("http://"+c.addr+"/v1/tasks", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		SessionID string `json:"session_id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.NewDecoder(resp.Body).Decode(&out) != nil {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /v1/tasks: %d %s", resp.StatusCode, b)
	}
	return out.SessionID
}

func (c *child) status(t *testing.T, id string) messages.TaskResult {
	t.Helper()
	resp, err := http.Get("http://" + c.addr + "/v1/sessions/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r messages.TaskResult
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return r
}

func countLines(t *testing.T, path, prefix string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			out[k]++
		}
	}
	return out
}

// recordedIn returns the keys of model calls and tool calls whose results the log
// records for the sessions, and how many of them are unfinished.
func recordedIn(t *testing.T, log eventlog.Log, ids []string) (model, tool map[string]bool, unfinished int) {
	t.Helper()
	model, tool = map[string]bool{}, map[string]bool{}
	for _, id := range ids {
		evs, err := log.Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			unfinished++
			continue
		}
		if last := evs[len(evs)-1].Type; last != messages.TypeTaskCompleted && last != messages.TypeTaskFailed {
			unfinished++
		}
		for _, e := range evs {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			switch p := p.(type) {
			case *messages.ModelResponded:
				model[p.Key] = true
			case *messages.ToolCallCompleted:
				tool[p.Key] = true
			}
		}
	}
	return model, tool, unfinished
}

// assertGapFree fails unless every session's seqs run 1, 2, 3, … in the log.
func assertGapFree(t *testing.T, log eventlog.Log, ids []string) {
	t.Helper()
	for _, id := range ids {
		evs, err := log.Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range evs {
			if e.Seq != uint64(i+1) {
				t.Fatalf("session %s: seq %d at position %d", id, e.Seq, i+1)
			}
		}
	}
}

// waitCompleted polls c until every session completed with output.
func waitCompleted(t *testing.T, c *child, ids []string, output string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, id := range ids {
		for {
			st := c.status(t, id)
			if st.Status == messages.StatusCompleted {
				if st.Output != output {
					t.Fatalf("session %s: %+v", id, st)
				}
				break
			}
			if st.Status == messages.StatusFailed || time.Now().After(deadline) {
				t.Fatalf("session %s did not complete: %+v", id, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// afterKill is what the record files say once every session completed.
type afterKill struct {
	effects, duplicates, reissuedModel, reissuedTool int
}

// checkAfterKill fails if a model or tool call whose result the log held at the kill
// (modelDone, toolDone) was made again, or if the calls and side effects are not
// want distinct ones each, every side effect once.
func checkAfterKill(t *testing.T, records, modelLog string, modelDone, toolDone map[string]bool, want int) afterKill {
	t.Helper()
	modelCalls := countLines(t, modelLog, "")
	toolCalls := countLines(t, records, "call ")
	effects := countLines(t, records, "effect ")
	for key := range modelDone {
		if modelCalls[key] != 1 {
			t.Errorf("model call %s had a recorded answer before the kill but was made %d times", key, modelCalls[key])
		}
	}
	for key := range toolDone {
		if toolCalls[key] != 1 {
			t.Errorf("tool call %s had a recorded result before the kill but ran %d times", key, toolCalls[key])
		}
	}
	if len(effects) != want {
		t.Errorf("%d distinct tool side effects, want %d", len(effects), want)
	}
	if len(modelCalls) != want {
		t.Errorf("%d distinct model calls, want %d", len(modelCalls), want)
	}
	r := afterKill{effects: len(effects)}
	for key, n := range effects {
		if n != 1 {
			r.duplicates += n - 1
			t.Errorf("side effect %s happened %d times", key, n)
		}
	}
	for _, n := range modelCalls {
		r.reissuedModel += n - 1
	}
	for _, n := range toolCalls {
		r.reissuedTool += n - 1
	}
	return r
}

// threeRecordsScript writes the crash tests' model script into dir: three calls of the
// record tool over two steps, then the answer "all recorded". It returns the script
// and the paths of the record tool's file and the model's call log.
func threeRecordsScript(t *testing.T, dir string) (script, records, modelLog string) {
	t.Helper()
	script = filepath.Join(dir, "script.json")
	steps := `{"name":"scripted","steps":[
		{"tool_calls":[{"id":"a","name":"record","arguments":"{\"n\":1}"},{"id":"b","name":"record","arguments":"{\"n\":2}"}]},
		{"tool_calls":[{"id":"c","name":"record","arguments":"{\"n\":3}"}]},
		{"content":"all recorded"}]}`
	if err := os.WriteFile(script, []byte(steps), 0o644); err != nil {
		t.Fatal(err)
	}
	return script, filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt")
}

func TestKillNineMidSessionResumesWithoutRepeatingEffects(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	dir := t.TempDir()
	script, records, modelLog := threeRecordsScript(t, dir)
	const sessions = 12

	first := startChild(t, dir, script, records, modelLog)
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = first.post(t, fmt.Sprintf(`{"input":"record three things","session_id":"crash-%02d"}`, i))
	}
	// Kill once the work is well under way: every session's first tool calls ran and
	// some second-step calls are running, so results are recorded for some calls and
	// missing for others.
	deadline := time.Now().Add(20 * time.Second)
	for len(countLines(t, records, "effect ")) < 2*sessions+sessions/2 {
		if time.Now().After(deadline) {
			t.Fatalf("tools never ran:\n%s", first.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.kill9(t)

	lg := openDataReadOnly(t, dir)
	defer lg.Close()
	modelDone, toolDone, unfinished := recordedIn(t, lg, ids)
	if unfinished == 0 {
		t.Fatal("the kill landed after every session had finished; the test proves nothing")
	}
	t.Logf("killed with %d of %d sessions unfinished; %d model answers and %d tool results recorded", unfinished, sessions, len(modelDone), len(toolDone))

	second := startChild(t, dir, script, records, modelLog)
	defer func() {
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		_ = second.cmd.Wait()
	}()
	waitCompleted(t, second, ids, "all recorded", 30*time.Second)

	r := checkAfterKill(t, records, modelLog, modelDone, toolDone, 3*sessions)
	t.Logf("after restart: %d model calls re-issued, %d tool calls re-issued (all unanswered at the kill, same keys)", r.reissuedModel, r.reissuedTool)
	assertGapFree(t, lg, ids)
}

// startingAnswer reads and closes resp, an answer of a node's /healthz, and
// returns an error holding its body when it is the answer of a node that is
// starting (node.StartingHandler: the port answers before the node serves), nil
// for the answer of a node that serves, whatever its health.
func startingAnswer(resp *http.Response) error {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "the node is starting") {
		return errors.New(string(b))
	}
	return nil
}
