package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// events reads a session's events through the child's HTTP API (nil before it has any).
func (c *child) events(t *testing.T, id string) []messages.Envelope {
	t.Helper()
	resp, err := http.Get("http://" + c.addr + "/v1/sessions/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	var evs []messages.Envelope
	if err := json.NewDecoder(resp.Body).Decode(&evs); err != nil {
		t.Fatalf("GET events of %s: %d: %v", id, resp.StatusCode, err)
	}
	return evs
}

// tasksOf returns a session's task IDs in submission order and the tasks that ended,
// in the order they ended, with their outputs; it fails on a task that ended twice
// or failed.
func tasksOf(t *testing.T, evs []messages.Envelope) (submitted, ended []string, outputs map[string]string) {
	t.Helper()
	outputs = map[string]string{}
	for _, e := range evs {
		switch e.Type {
		case messages.TypeTaskSubmitted:
			submitted = append(submitted, e.ID)
		case messages.TypeTaskCompleted, messages.TypeTaskFailed:
			if _, dup := outputs[e.CorrelationID]; dup {
				t.Fatalf("task %s ended twice (again at seq %d)", e.CorrelationID, e.Seq)
			}
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			done, ok := p.(*messages.TaskCompleted)
			if !ok {
				t.Fatalf("task %s failed at seq %d: %s", e.CorrelationID, e.Seq, e.Payload)
			}
			outputs[e.CorrelationID] = done.Output
			ended = append(ended, e.CorrelationID)
		}
	}
	return submitted, ended, outputs
}

// The user's repro: 40 tasks posted at once to one session of a node whose model is
// slow, kill -9 while they run, start the node again. Every task that got a 202
// completes exactly once, in the order accepted, with each side effect once, and a
// tool or model call whose result the log held at the kill is not made again. The
// first node also passivates a finished session (idle timeout 200ms) while the
// queued session is mid-call, which must not disturb it.
func TestKillNineWithTasksQueuedOnOneSession(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[
		{"tool_calls":[{"id":"a","name":"record","arguments":"{}"}]},
		{"content":"recorded"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	records, modelLog := filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt")
	env := []string{"TROUPE_MODEL_DELAY=30ms"}
	const tasks, hot, side = 40, "hot7", "side"

	first := startChildWith(t, dir, script, records, modelLog, env, "--idle-timeout", "200ms", "-v")
	first.post(t, `{"input":"side task","session_id":"`+side+`"}`)
	var wg sync.WaitGroup
	refused := make(chan string, tasks)
	for i := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post("http://"+first.addr+"/v1/tasks", "application/json", strings.NewReader(fmt.Sprintf(`{"input":"t%d","session_id":"%s"}`, i, hot)))
			if err != nil {
				refused <- err.Error()
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				b, _ := io.ReadAll(resp.Body)
				refused <- fmt.Sprintf("%d %s", resp.StatusCode, b)
			}
		}()
	}
	wg.Wait()
	close(refused)
	for r := range refused {
		t.Fatalf("a task was not accepted: %s", r)
	}
	// Kill once the side session passivated and several queued tasks ended.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, ended, _ := tasksOf(t, first.events(t, hot))
		passivated := strings.Contains(first.stderr.String(), `msg="session passivated" session=`+side)
		if len(ended) >= 5 && passivated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 30 s, %d tasks ended (want 5) and the side session passivated: %v", len(ended), passivated)
		}
		time.Sleep(20 * time.Millisecond)
	}
	first.kill9(t)
	if log := first.stderr.String(); strings.Contains(log, "Recovering") || strings.Contains(log, "session host failed") {
		t.Fatalf("the session host failed before the kill:\n%s", log)
	}

	ctx := context.Background()
	lg := openDataReadOnly(t, dir)
	defer lg.Close()
	evs, err := lg.Read(ctx, hot, 1)
	if err != nil {
		t.Fatal(err)
	}
	submitted, ended, _ := tasksOf(t, evs)
	if len(submitted) != tasks {
		t.Fatalf("%d of %d accepted tasks are in the log", len(submitted), tasks)
	}
	if len(ended) == tasks {
		t.Fatal("every task ended before the kill; the test proves nothing")
	}
	running, err := lg.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true})
	if err != nil || len(running) != 1 || running[0].ID != hot {
		t.Fatalf("running sessions at the kill: %+v, %v; want %s", running, err, hot)
	}
	modelDone, toolDone, _ := recordedIn(t, lg, []string{hot, side})
	t.Logf("killed with %d of %d tasks ended", len(ended), tasks)

	second := startChildWith(t, dir, script, records, modelLog, env)
	defer func() {
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		_ = second.cmd.Wait()
	}()
	deadline = time.Now().Add(90 * time.Second)
	var outputs map[string]string
	for {
		submitted, ended, outputs = tasksOf(t, second.events(t, hot))
		if len(ended) == tasks {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart %d of %d accepted tasks ended; status %+v", len(ended), tasks, second.status(t, hot))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range submitted {
		if ended[i] != submitted[i] || outputs[ended[i]] != "recorded" {
			t.Fatalf("task %d to end was %s (output %q), want %s (the order accepted)", i+1, ended[i], outputs[ended[i]], submitted[i])
		}
	}
	if st := second.status(t, hot); st.Status != messages.StatusCompleted {
		t.Fatalf("status after every task ended: %+v", st)
	}
	modelCalls, toolCalls, effects := countLines(t, modelLog, ""), countLines(t, records, "call "), countLines(t, records, "effect ")
	if len(effects) != tasks+1 {
		t.Errorf("%d distinct side effects, want %d (one per task)", len(effects), tasks+1)
	}
	for key, n := range effects {
		if n != 1 {
			t.Errorf("side effect %s happened %d times", key, n)
		}
	}
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
	assertGapFree(t, lg, []string{hot, side})
}
