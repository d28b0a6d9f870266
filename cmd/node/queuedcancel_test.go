package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// postTaskID posts a task and returns its task_id from the 202.
func (c *child) postTaskID(t *testing.T, body string) string {
	t.Helper()
	resp, err := http.Post("http://"+c.addr+"/v1/tasks", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		TaskID string `json:"task_id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &out) != nil || out.TaskID == "" {
		t.Fatalf("POST /v1/tasks: %d %s", resp.StatusCode, b)
	}
	return out.TaskID
}

// cancelTask posts a cancellation with body to the session and returns its status
// and answer.
func (c *child) cancelTask(t *testing.T, session, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+c.addr+"/v1/sessions/"+session+"/cancel", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// endsOf returns, for each task of the session's events, how it ended: the output
// of a completed task, "failed <reason>" of a failed one; and the tasks in the
// order they ended, each once (it fails on a task that ended twice).
func endsOf(t *testing.T, evs []messages.Envelope) (ends map[string]string, order []string) {
	t.Helper()
	ends = map[string]string{}
	for _, e := range evs {
		if e.Type != messages.TypeTaskCompleted && e.Type != messages.TypeTaskFailed {
			continue
		}
		if _, dup := ends[e.CorrelationID]; dup {
			t.Fatalf("task %s ended twice (again at seq %d)", e.CorrelationID, e.Seq)
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *messages.TaskCompleted:
			ends[e.CorrelationID] = p.Output
		case *messages.TaskFailed:
			ends[e.CorrelationID] = "failed " + p.Reason
		}
		order = append(order, e.CorrelationID)
	}
	return ends, order
}

// A user queues tasks on one session, then cancels one still waiting its turn by
// its task_id (the body of POST /v1/sessions/{id}/cancel): that task, not the
// running one, ends cancelled. Before, the body was ignored and the request
// cancelled the running task, and the named one ran. After a kill -9 mid-queue and
// a restart, the cancelled task stays cancelled and the others run, in order, each
// side effect once. A body that names no task the session has running or waiting
// is 409, a malformed one 400, and neither cancels anything.
func TestCancelAQueuedTaskByIDSurvivesKillNine(t *testing.T) {
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
	env := []string{"TROUPE_MODEL_DELAY=100ms"}
	const tasks, hot = 12, "queue"

	first := startChildWith(t, dir, script, records, modelLog, env)
	ids := make([]string, tasks)
	for i := range ids {
		ids[i] = first.postTaskID(t, fmt.Sprintf(`{"input":"t%d","session_id":"%s"}`, i, hot))
	}
	for _, bad := range []string{`{"task_id":"` + ids[6] + `","extra":1}`, `{"Task_ID":"` + ids[6] + `"}`, `[1]`} {
		if code, b := first.cancelTask(t, hot, bad); code != http.StatusBadRequest {
			t.Fatalf("cancel with body %s: %d %s, want 400", bad, code, b)
		}
	}
	if code, b := first.cancelTask(t, hot, `{"task_id":"no-such-task"}`); code != http.StatusConflict {
		t.Fatalf("cancel of an unknown task: %d %s, want 409", code, b)
	}
	victim := ids[6]
	if code, b := first.cancelTask(t, hot, `{"task_id":"`+victim+`","reason":"not needed"}`); code != http.StatusAccepted {
		t.Fatalf("cancel of queued task %s: %d %s", victim, code, b)
	}
	ends, _ := endsOf(t, first.events(t, hot))
	if ends[victim] != "failed "+messages.ReasonCancelled {
		t.Fatalf("the queued task %s did not end cancelled: ends %v", victim, ends)
	}
	for _, id := range ids[:6] {
		if strings.HasPrefix(ends[id], "failed") {
			t.Fatalf("task %s ended %q: the cancellation named %s", id, ends[id], victim)
		}
	}
	// Kill mid-queue: some tasks ended, the ones after the cancelled one did not.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ends, _ = endsOf(t, first.events(t, hot))
		if len(ends) >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 30 s only %d tasks ended", len(ends))
		}
		time.Sleep(20 * time.Millisecond)
	}
	first.kill9(t)
	if ends, _ = endsOf(t, openEvents(t, dir, hot)); len(ends) == tasks {
		t.Fatal("every task ended before the kill; the test proves nothing")
	}

	second := startChildWith(t, dir, script, records, modelLog, env)
	defer func() {
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		_ = second.cmd.Wait()
	}()
	var order []string
	deadline = time.Now().Add(60 * time.Second)
	for {
		ends, order = endsOf(t, second.events(t, hot))
		if len(ends) == tasks {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart %d of %d tasks ended", len(ends), tasks)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ends[victim] != "failed "+messages.ReasonCancelled {
		t.Fatalf("the cancelled task %s ended %q after the restart", victim, ends[victim])
	}
	var ran []string
	for _, id := range order {
		if id != victim {
			ran = append(ran, id)
			if ends[id] != "recorded" {
				t.Errorf("task %s ended %q", id, ends[id])
			}
		}
	}
	want := append(append([]string{}, ids[:6]...), ids[7:]...)
	if strings.Join(ran, ",") != strings.Join(want, ",") {
		t.Errorf("tasks ended in the order %v, want %v", ran, want)
	}
	effects := countLines(t, records, "effect ")
	if len(effects) != tasks-1 {
		t.Errorf("%d distinct side effects, want %d (one per task that ran)", len(effects), tasks-1)
	}
	for key, n := range effects {
		if n != 1 {
			t.Errorf("side effect %s happened %d times", key, n)
		}
	}
}

// openEvents reads a session's events from the log children started on dir keep.
func openEvents(t *testing.T, dir, session string) []messages.Envelope {
	t.Helper()
	lg := openDataReadOnly(t, dir)
	defer lg.Close()
	evs, err := lg.Read(t.Context(), session, 1)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
