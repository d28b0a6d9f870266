package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// restartableNode starts a node on dir with its HTTP API, and returns it, the
// API's URL and a func that stops both.
func restartableNode(t *testing.T, dir string) (*node.Node, string, func()) {
	t.Helper()
	n, err := node.New(context.Background(), node.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	select {
	case <-n.Running():
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("node did not start")
	}
	srv := httptest.NewServer(n.Handler())
	return n, srv.URL, func() {
		n.CloseStreams()
		srv.Close()
		cancel()
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		<-done
	}
}

// tasksNamed counts the task.submitted events of session id by their task_id
// (messages.TaskSubmitted.TaskID; "" for a task without one).
func tasksNamed(t *testing.T, n *node.Node, id string) map[string]int {
	t.Helper()
	evs, err := n.Log().Read(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]int{}
	for _, e := range evs {
		if e.Type != messages.TypeTaskSubmitted {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		named[p.(*messages.TaskSubmitted).TaskID]++
	}
	return named
}

// POST /v1/tasks answers the task's ID beside its session, and GET
// /v1/sessions/{id} says the task its status is of. A task_id in the body is the
// task's ID: sent again to the session (also after a restart) it is the same task,
// run once; on another session it is another task; without a session it runs in
// session task.<task_id>. Without task_id, the same request sent again with the same
// Idempotency-Key answers the same task ID; task_id and an Idempotency-Key together
// are refused.
func TestPostTaskAnswersItsTaskID(t *testing.T) {
	dir := t.TempDir()
	n, base, stop := restartableNode(t, dir)

	code, out := post(t, base+"/v1/tasks", `{"input":"What is 6 * 7?","session_id":"s-named","task_id":"order-1"}`)
	if code != http.StatusAccepted || out["session_id"] != "s-named" || out["task_id"] != "order-1" {
		t.Fatalf("POST with task_id: %d %v, want 202, session s-named, task order-1", code, out)
	}
	if r := waitDone(t, base, "s-named"); r.TaskID != "order-1" || r.Output != "42" {
		t.Fatalf("status of s-named: %+v, want task_id order-1 and output 42", r)
	}
	code, out = post(t, base+"/v1/tasks", `{"input":"What is 6 * 7?","session_id":"s-named","task_id":"order-1"}`)
	if code != http.StatusAccepted || out["task_id"] != "order-1" {
		t.Fatalf("the same task again: %d %v", code, out)
	}
	// Another body under the name is still the task recorded: the name is the task.
	if code, out = post(t, base+"/v1/tasks", `{"input":"What is 1 + 1?","session_id":"s-named","task_id":"order-1"}`); code != http.StatusAccepted {
		t.Fatalf("another body under the name: %d %v", code, out)
	}
	if got := tasksNamed(t, n, "s-named"); len(got) != 1 || got["order-1"] != 1 {
		t.Fatalf("s-named holds tasks %v after order-1 was sent three times, want order-1 once", got)
	}
	// The same name on another session is another task.
	if code, out = post(t, base+"/v1/tasks", `{"input":"What is 2 + 2?","session_id":"s-other","task_id":"order-1"}`); code != http.StatusAccepted || out["task_id"] != "order-1" {
		t.Fatalf("order-1 on s-other: %d %v", code, out)
	}
	if r := waitDone(t, base, "s-other"); r.TaskID != "order-1" || r.Output != "4" {
		t.Fatalf("status of s-other: %+v", r)
	}
	// No session: the task's own, named after it, so that it sent again is the same.
	for range 2 {
		if code, out = post(t, base+"/v1/tasks", `{"input":"What is 3 + 3?","task_id":"order-2"}`); code != http.StatusAccepted || out["session_id"] != "task.order-2" || out["task_id"] != "order-2" {
			t.Fatalf("order-2 without a session: %d %v, want session task.order-2", code, out)
		}
	}
	if r := waitDone(t, base, "task.order-2"); r.TaskID != "order-2" || r.Output != "6" {
		t.Fatalf("status of task.order-2: %+v", r)
	}
	if got := tasksNamed(t, n, "task.order-2"); got["order-2"] != 1 || len(got) != 1 {
		t.Fatalf("task.order-2 holds tasks %v, want order-2 once", got)
	}

	// Without task_id: the node's ID for the task, the same for the same request
	// under the same Idempotency-Key, and the one the result says.
	body := `{"input":"What is 7 * 7?"}`
	code, keyed := postKeyed(t, base, "key-1", body)
	if code != http.StatusAccepted || keyed["task_id"] == "" || keyed["session_id"] == "" {
		t.Fatalf("keyed POST: %d %v, want a task_id", code, keyed)
	}
	if r := waitDone(t, base, keyed["session_id"]); r.TaskID != keyed["task_id"] {
		t.Fatalf("status %+v, want task_id %s", r, keyed["task_id"])
	}
	if code, again := postKeyed(t, base, "key-1", body); code != http.StatusAccepted || again["task_id"] != keyed["task_id"] || again["session_id"] != keyed["session_id"] {
		t.Fatalf("the keyed request again: %d %v, want %v", code, again, keyed)
	}
	code, plain := post(t, base+"/v1/tasks", body)
	if code != http.StatusAccepted || plain["task_id"] == "" || plain["task_id"] == keyed["task_id"] {
		t.Fatalf("a request without a key: %d %v, want a new task_id", code, plain)
	}
	if r := waitDone(t, base, plain["session_id"]); r.TaskID != plain["task_id"] {
		t.Fatalf("status %+v, want task_id %s", r, plain["task_id"])
	}
	// Both names at once: refused, naming task_id, and nothing recorded.
	if code, out := postKeyed(t, base, "key-2", `{"input":"echo x","session_id":"s-both","task_id":"order-3"}`); code != http.StatusBadRequest || !strings.Contains(out["error"], "task_id") {
		t.Fatalf("task_id and an Idempotency-Key: %d %v, want 400 naming task_id", code, out)
	}
	if _, ok, err := n.Status(t.Context(), "s-both"); ok || err != nil {
		t.Fatalf("a refused task wrote session s-both (%v)", err)
	}
	stop()

	// After a restart, the named task sent again is still the one recorded.
	n, base, stop = restartableNode(t, dir)
	defer stop()
	if code, out = post(t, base+"/v1/tasks", `{"input":"What is 6 * 7?","session_id":"s-named","task_id":"order-1"}`); code != http.StatusAccepted || out["task_id"] != "order-1" {
		t.Fatalf("order-1 after a restart: %d %v", code, out)
	}
	if got := tasksNamed(t, n, "s-named"); len(got) != 1 || got["order-1"] != 1 {
		t.Fatalf("after a restart, s-named holds tasks %v, want order-1 once", got)
	}
}

// A task_id that is not 1-128 characters of letters, digits, '.', '_', ':' or '-'
// (starting with a letter or digit), not a string, or empty, is refused with 400
// naming task_id; nothing is recorded.
func TestBadTaskIDsAreRefused(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	for _, v := range []string{`"a/b"`, `"a b"`, `"` + strings.Repeat("t", 129) + `"`, `""`, `"-x"`, `"tab\t"`, `"ünï"`,
		`42`, `true`, `null`, `{"id":"x"}`, `["x"]`} {
		code, msg := postAs(t, base+"/v1/tasks", "application/json", `{"input":"echo x","session_id":"s-bad","task_id":`+v+`}`)
		if code != http.StatusBadRequest || !strings.Contains(msg, "task_id") {
			t.Errorf("task_id %s: %d %q, want 400 naming task_id", v, code, msg)
		}
	}
	noSessions(t, n)
	if code, msg := postAs(t, base+"/v1/tasks", "application/json", `{"input":"echo x","session_id":"s-ok","task_id":"`+strings.Repeat("t", 128)+`"}`); code != http.StatusAccepted {
		t.Fatalf("a task_id of 128 characters: %d %q", code, msg)
	}
	// Without a session: task.<task_id>, or task. and a hash when that is too long.
	if code, out := post(t, base+"/v1/tasks", `{"input":"echo x","task_id":"a:b.c_d-e"}`); code != http.StatusAccepted || out["session_id"] != "task.a:b.c_d-e" {
		t.Fatalf("task_id a:b.c_d-e without a session: %d %v", code, out)
	}
	long := strings.Repeat("t", 128)
	code, out := post(t, base+"/v1/tasks", `{"input":"echo x","task_id":"`+long+`"}`)
	if s := out["session_id"]; code != http.StatusAccepted || !strings.HasPrefix(s, "task.") || !node.ValidSessionID(s) || out["task_id"] != long {
		t.Fatalf("a task_id of 128 characters without a session: %d %v", code, out)
	}
}

// resultsOf returns the results on troupe.results keyed session, by task_id.
func resultsOf(t *testing.T, k kafkaEnv, session string) map[string][]messages.TaskResult {
	t.Helper()
	out := map[string][]messages.TaskResult{}
	for _, m := range topicRecords(t, k, messages.TopicResults, session) {
		var r messages.TaskResult
		if err := json.Unmarshal(m.Value, &r); err != nil {
			t.Fatalf("result %s: %v", m.Value, err)
		}
		out[r.TaskID] = append(out[r.TaskID], r)
	}
	return out
}

// A Kafka client without Troupe's headers (kcat, confluent-kafka) names its tasks
// with task_id and matches their results on troupe.results by it: two tasks on one
// session each have their result with their task_id; a record sent again (the
// producer retried) is the same task, recorded and run once, also when a node
// other than the first reads it from the same log. A task_id that breaks the rule
// goes to the poison topic with a reason naming task_id, and nothing is recorded. A
// task posted over HTTP to a node on Kafka gets its result with the task_id the
// POST answered.
func TestKafkaRecordsWithTaskIDsGetResultsNamingThem(t *testing.T) {
	k := newKafkaEnv(t)
	log := sharedLog(t)
	group := uniqueGroup(t)
	first, stopFirst := clusterNode(t, k, group, log, "first", 0, nil, nil)
	waitFor(t, 60*time.Second, "the node owns every partition", func() bool { return first.PartitionsOwned() == 6 })
	session := "tid-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	record := func(body string) kgo.Message { return kgo.Message{Key: []byte(session), Value: []byte(body)} }
	q1 := record(`{"input":"What is 6 * 7?","task_id":"q-1"}`)
	if err := w.WriteMessages(ctx, q1, record(`{"input":"What is 2 + 2?","task_id":"q-2"}`), q1,
		record(`{"input":"What is 3 + 3?","task_id":"q-3"}`)); err != nil {
		t.Fatal(err)
	}
	var results map[string][]messages.TaskResult
	waitFor(t, 60*time.Second, "the results of q-1, q-2 and q-3", func() bool {
		results = resultsOf(t, k, session)
		return len(results["q-1"]) > 0 && len(results["q-2"]) > 0 && len(results["q-3"]) > 0
	})
	for id, want := range map[string]string{"q-1": "42", "q-2": "4", "q-3": "6"} {
		for _, r := range results[id] {
			if r.Status != messages.StatusCompleted || r.Output != want || r.SessionID != session {
				t.Errorf("result of %s: %+v, want output %s", id, r, want)
			}
		}
	}
	// One session's tasks are handled in the order of their records: q-1's copy came
	// before q-3, which has its result.
	if got := tasksNamed(t, first, session); len(got) != 3 || got["q-1"] != 1 || got["q-2"] != 1 || got["q-3"] != 1 {
		t.Fatalf("the session holds tasks %v, want q-1, q-2 and q-3 once each", got)
	}
	if len(results) != 3 {
		t.Errorf("results for tasks %v, want q-1, q-2 and q-3 only", results)
	}

	// A bad task_id: poisoned with a reason naming it, nothing recorded.
	badSession := session + "-bad"
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(badSession), Value: []byte(`{"input":"echo x","task_id":"a/b"}`)}); err != nil {
		t.Fatal(err)
	}
	reason := header(findRecord(t, k, node.TopicPoison, badSession), "reason_poisoned")
	if !strings.Contains(reason, "task_id") {
		t.Errorf("poison reason %q, want one naming task_id", reason)
	}
	if _, ok, err := first.Status(t.Context(), badSession); ok || err != nil {
		t.Errorf("a task with a bad task_id wrote session %s (%v)", badSession, err)
	}
	stopFirst()

	// Another node takes the partitions over, on the same log: q-1 sent again is
	// still the task recorded; a task posted over HTTP has its result with the
	// task_id the POST answered.
	second, _ := clusterNode(t, k, group, log, "second", 0, nil, nil)
	waitFor(t, 60*time.Second, "the second node owns every partition", func() bool { return second.PartitionsOwned() == 6 })
	if err := w.WriteMessages(ctx, q1); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(second.Handler())
	defer srv.Close()
	code, out := post(t, srv.URL+"/v1/tasks", `{"input":"What is 5 + 5?","session_id":"`+session+`"}`)
	if code != http.StatusAccepted || out["task_id"] == "" {
		t.Fatalf("POST: %d %v, want 202 with a task_id", code, out)
	}
	waitFor(t, 60*time.Second, "the result of the posted task", func() bool {
		results = resultsOf(t, k, session)
		return len(results[out["task_id"]]) > 0
	})
	if r := results[out["task_id"]][0]; r.Output != "10" {
		t.Errorf("result of the posted task %s: %+v, want output 10", out["task_id"], r)
	}
	if got := tasksNamed(t, second, session); got["q-1"] != 1 || got[""] != 1 || len(got) != 4 {
		t.Fatalf("after q-1 came again to another node, the session holds tasks %v, want q-1, q-2, q-3 and the posted one once each", got)
	}
	for _, r := range results["q-1"] {
		if r != results["q-1"][0] {
			t.Errorf("results of q-1 differ: %+v and %+v", results["q-1"][0], r)
		}
	}
}
