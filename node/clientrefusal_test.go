package node_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// refusedRecord is a record of the tasks topic that the node refuses for its
// headers, the way a librdkafka client writes it, and what its rejected result
// must say.
type refusedRecord struct {
	session string
	task    string
	headers [][2]string
	body    string
	says    string
}

// refusedRecords are the refusals of headers a user's client can write: a
// mistyped type, the type header given twice, type headers in two cases that
// disagree. Each body says where its client waits (a task_id), so each is answered.
func refusedRecords(prefix string) []refusedRecord {
	rec := func(name string, headers [][2]string, says string) refusedRecord {
		return refusedRecord{prefix + "-" + name, "q-" + name, headers, `{"input":"echo never run","task_id":"q-` + name + `"}`, says}
	}
	return []refusedRecord{
		rec("typo", [][2]string{{"type", "task.cancle"}}, `unknown type "task.cancle"`),
		rec("twice", [][2]string{{"type", "task.submitted"}, {"type", "task.cancel"}}, `more than one value to the header "type"`),
		rec("cases", [][2]string{{"Type", "task.cancel"}, {"type", "task.submitted"}}, "type headers disagree"),
	}
}

// checkRefusalsAnswered waits for the rejected result of each refused record and
// for the result of the task written after them, keyed after (the partitions
// moved on), and checks them.
func checkRefusalsAnswered(t *testing.T, k kafkaEnv, recs []refusedRecord, after string) {
	t.Helper()
	res := waitResults(t, k, 90*time.Second, "the refusals' results and the task after them", func(res map[string]messages.TaskResult) bool {
		for _, r := range recs {
			if _, ok := res[r.session]; !ok {
				return false
			}
		}
		_, ok := res[after]
		return ok
	})
	for _, r := range recs {
		got := res[r.session]
		if got.Status != messages.StatusFailed || got.Reason != messages.ReasonRejected || !strings.HasPrefix(got.Error, node.ErrBadTask.Error()) ||
			!strings.Contains(got.Error, r.says) || got.TaskID != r.task {
			t.Errorf("%s (headers %v): %+v; want task %s failed, rejected, its error saying %s", r.session, r.headers, got, r.task, r.says)
		}
	}
	if got := res[after]; got.Status != messages.StatusCompleted || got.Output != "after the refusals" {
		t.Errorf("the task after the refusals: %+v", got)
	}
}

// kcat, in its default settings, writes records the node refuses for their
// headers (kcat -H, given twice for one name, sends both): its user reads a
// rejected result saying why from troupe.results, not silence, and a task
// written after them runs.
func TestKcatRefusedRecordsAreAnswered(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (.ci/run installs it from Debian's kcat package)")
	}
	k := newKafkaEnv(t)
	k.node(t)
	prefix := "kcat-refused-" + time.Now().Format("150405.000000")
	recs := refusedRecords(prefix)
	for _, r := range recs {
		args := []string{"-k", r.session}
		for _, h := range r.headers {
			args = append(args, "-H", h[0]+"="+h[1])
		}
		kcatProduce(t, kcat, k, args, r.body)
	}
	after := prefix + "-after"
	kcatProduce(t, kcat, k, []string{"-k", after}, `{"input":"echo after the refusals"}`)
	checkRefusalsAnswered(t, k, recs, after)
}

// The same with PyPI's confluent-kafka Producer in its default settings, headers
// given as a list (a name may repeat).
func TestConfluentKafkaRefusedRecordsAreAnswered(t *testing.T) {
	py := testPython(t)
	k := newKafkaEnv(t)
	k.node(t)
	prefix := "py-refused-" + time.Now().Format("150405.000000")
	recs := refusedRecords(prefix)
	type record struct {
		Key     string      `json:"key"`
		Value   string      `json:"value"`
		Headers [][2]string `json:"headers,omitempty"`
	}
	var lines []string
	for _, r := range recs {
		b, _ := json.Marshal(record{r.session, r.body, r.headers})
		lines = append(lines, string(b))
	}
	after := prefix + "-after"
	b, _ := json.Marshal(record{Key: after, Value: `{"input":"echo after the refusals"}`})
	lines = append(lines, string(b))
	script, err := filepath.Abs(filepath.Join("testdata", "produce_headers.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script, strings.Join(k.brokers, ","), k.topic(messages.TopicTasks))
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("confluent-kafka producer: %v\n%s", err, out)
	}
	checkRefusalsAnswered(t, k, recs, after)
}
