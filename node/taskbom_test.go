package node_test

import (
	"net/http"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// bom is the UTF-8 byte order mark that editors and Windows tools write before a
// file's text, and that a task sent from such a file begins with.
const bom = "\ufeff"

// A task whose JSON begins with a byte order mark (written from a file an editor
// saved with one: kcat -P -l task.json) was poisoned as "malformed JSON: invalid
// character 'ï'", naming a character its sender never wrote, and, its body read as
// no JSON, got no result: its client waited for ever. JSON's RFC lets a reader skip
// the mark, and POST /v1/memories does: the task runs, keyed or named by its
// session_id.
func TestKafkaTaskAfterAByteOrderMarkRuns(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	prefix := "bom-" + time.Now().Format("150405.000000")
	keyed, named := prefix+"-keyed", prefix+"-named"
	k.produce(t,
		kgo.Message{Key: []byte(keyed), Value: []byte(bom + `{"input":"echo keyed","task_id":"t-1"}`)},
		kgo.Message{Value: []byte(bom + ` {"input":"echo named","session_id":"` + named + `","task_id":"t-2"}`)})
	res := waitResults(t, k, 60*time.Second, "the results of the tasks after a byte order mark", func(res map[string]messages.TaskResult) bool {
		_, a := res[keyed]
		_, b := res[named]
		return a && b
	})
	if r := res[keyed]; r.Status != messages.StatusCompleted || r.Output != "keyed" || r.TaskID != "t-1" {
		t.Errorf("the keyed task: %+v", r)
	}
	if r := res[named]; r.Status != messages.StatusCompleted || r.Output != "named" || r.TaskID != "t-2" {
		t.Errorf("the task named by its session_id: %+v", r)
	}
}

// POST /v1/tasks takes a body that begins with a byte order mark, as POST
// /v1/memories does; before, it answered 400 "invalid character 'ï'".
func TestPostTaskAfterAByteOrderMark(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{})
	code, msg := postAs(t, base+"/v1/tasks", "application/json", bom+`{"input":"echo marked","session_id":"bom-http"}`)
	if code != http.StatusAccepted {
		t.Fatalf("a task after a byte order mark: %d %s", code, msg)
	}
	if r := waitDone(t, base, "bom-http"); r.Status != messages.StatusCompleted || r.Output != "marked" {
		t.Fatalf("a task after a byte order mark: %+v", r)
	}
}
