package node_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

// replyResults returns the results on the Troupe topic name keyed by session.
func replyResults(t *testing.T, k kafkaEnv, name, session string) []messages.TaskResult {
	t.Helper()
	var out []messages.TaskResult
	for _, m := range topicRecords(t, k, name, session) {
		var res messages.TaskResult
		if err := json.Unmarshal(m.Value, &res); err != nil {
			t.Errorf("a record on %s that is no result: %q", name, m.Value)
			continue
		}
		out = append(out, res)
	}
	return out
}

// waitReply waits up to d for the result of task taskID of session on the
// Troupe topic name (a reply topic).
func waitReply(t *testing.T, k kafkaEnv, name, session, taskID string, d time.Duration) (messages.TaskResult, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, res := range replyResults(t, k, name, session) {
			if res.TaskID == taskID {
				return res, true
			}
		}
		if time.Now().After(deadline) {
			return messages.TaskResult{}, false
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// A task on troupe.tasks that the node refuses as bad (max_steps -1 here) went
// to troupe.poison and nowhere else: its client, waiting on its reply_topic for
// a result naming its task_id, waited until its own timeout and never learnt
// why (over HTTP the same task is a 400 at once). It gets a failed result with
// reason "rejected" and the refusal as its error, on its reply topic and on
// troupe.results; the record is poisoned once, as before, and the session's log
// holds nothing of it. A task without a task_id is named by its record's ID,
// kafka:<topic>/<partition>/<offset>@<timestamp>, as a result names it.
func TestRefusedKafkaTaskGetsARejectedResult(t *testing.T) {
	k := newKafkaEnv(t)
	n := k.node(t)
	stamp := time.Now().Format("150405.000000")
	session, unnamed, replies := "rejected-"+stamp, "rejected-unnamed-"+stamp, "replies.rejected"
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo one","task_id":"bad","max_steps":-1,"reply_topic":"` + replies + `"}`)},
		kgo.Message{Key: []byte(unnamed), Value: []byte(`{"input":"echo two","max_steps":-1}`)},
	)
	res, ok := waitReply(t, k, replies, session, "bad", 30*time.Second)
	if !ok {
		t.Fatalf("no result of task bad on its reply topic %s", replies)
	}
	check := func(where string, res messages.TaskResult, session string) {
		t.Helper()
		if res.SessionID != session || res.Status != messages.StatusFailed || res.Reason != messages.ReasonRejected || !strings.Contains(res.Error, "max_steps") {
			t.Errorf("%s: %+v; want session %s failed, reason %s, an error naming max_steps", where, res, session, messages.ReasonRejected)
		}
	}
	check(replies, res, session)
	res, ok = waitTaskResult(t, k, session, "bad", 30*time.Second)
	if !ok {
		t.Fatalf("no result of task bad on %s", messages.TopicResults)
	}
	check(messages.TopicResults, res, session)
	deadline := time.Now().Add(30 * time.Second)
	var got []messages.TaskResult
	for len(got) == 0 && time.Now().Before(deadline) {
		got = replyResults(t, k, messages.TopicResults, unnamed)
		time.Sleep(300 * time.Millisecond)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0].TaskID, "kafka:"+k.topic(messages.TopicTasks)+"/") || !strings.Contains(got[0].TaskID, "@") {
		t.Errorf("results of the unnamed task: %+v; want one, naming it by its record's ID", got)
	} else {
		check(messages.TopicResults, got[0], unnamed)
	}
	if reasons := poisonReasons(t, k, session, unnamed); len(reasons) != 2 {
		t.Errorf("poisoned with %q; want each record once", reasons)
	}
	for _, s := range []string{session, unnamed} {
		events, err := n.Log().Read(context.Background(), s, 1)
		if err != nil || len(events) != 0 {
			t.Errorf("session %s's log: %d events (%v); want none: a refused task never existed there", s, len(events), err)
		}
	}
}

// A refused task whose task_id is a task's of its session (a named task sent
// again with a body the rules refuse; a record whose _watermill_message_uuid
// header is a recorded task's ID, which names that task's result) gets no
// result: one with that task_id would be taken for that task's, which ran. As
// before, it goes to troupe.poison only.
func TestRefusedKafkaTaskNamedAsARecordedTaskGetsNoResult(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	stamp := time.Now().Format("150405.000000")
	session, id, replies := "rejected-taken-"+stamp, "req-"+stamp, "replies.taken"
	uuid := []kgo.Header{{Key: kafka.HeaderUUID, Value: []byte(id)}}
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo one","task_id":"named"}`)},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo two"}`), Headers: uuid},
	)
	for _, name := range []string{"named", id} {
		if res, ok := waitTaskResult(t, k, session, name, 30*time.Second); !ok || res.Status != messages.StatusCompleted {
			t.Fatalf("task %s: %+v (found %v), want it completed", name, res, ok)
		}
	}
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo one","task_id":"named","max_steps":-1,"reply_topic":"` + replies + `"}`)},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo two","max_steps":-1,"reply_topic":"` + replies + `"}`), Headers: uuid},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	)
	if res, ok := waitTaskResult(t, k, session, "next", 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	if reasons := poisonReasons(t, k, session); len(reasons) != 2 {
		t.Errorf("poisoned with %q; want both refused records", reasons)
	}
	// Published (if at all) before the records were poisoned, and "next" was read after them.
	for _, res := range replyResults(t, k, messages.TopicResults, session) {
		if res.Status != messages.StatusCompleted {
			t.Errorf("a result on %s: %+v; want only the completed tasks'", messages.TopicResults, res)
		}
	}
	if got := replyResults(t, k, replies, session); len(got) != 0 {
		t.Errorf("results on %s: %+v; want none", replies, got)
	}
}

// A refused task whose reply_topic is one the rules refuse (the node's own
// namespace: Kafka takes troupe_mine for troupe.mine) gets its rejected result
// on troupe.results only: the node never writes a topic its rules refuse, also
// when the task was refused for another rule first (max_steps).
func TestRefusedKafkaTaskWithAnIllegalReplyTopicIsToldOnResultsOnly(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	stamp := time.Now().Format("150405.000000")
	session, illegal := "rejected-reply-"+stamp, "troupe_mine"
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo one","task_id":"topic","reply_topic":"` + illegal + `"}`)},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo two","task_id":"steps","max_steps":-1,"reply_topic":"` + illegal + `"}`)},
	)
	for name, want := range map[string]string{"topic": "reply_topic", "steps": "max_steps"} {
		res, ok := waitTaskResult(t, k, session, name, 30*time.Second)
		if !ok || res.Status != messages.StatusFailed || res.Reason != messages.ReasonRejected || !strings.Contains(res.Error, want) {
			t.Errorf("task %s: %+v (found %v); want it rejected, its error naming %s", name, res, ok, want)
		}
	}
	var on []kgo.Message
	eachRecord(t, k, illegal, func(m kgo.Message) { on = append(on, m) })
	if len(on) != 0 {
		t.Errorf("%d records on the refused reply topic %s; want none", len(on), illegal)
	}
}

// A record refused for its headers before it is decoded (kcat -H type=… given
// twice with different values, a typo in its type) went to troupe.poison only:
// its client, waiting on its reply_topic for its task_id's result, waited for
// ever. It gets the rejected result a task refused for its body gets, on its
// reply topic and on troupe.results, as the poisoned record's reason says why;
// one whose key and session_id header name different sessions, with no
// session_id in its body, gets none (its session is in doubt, and a task of its
// task_id may run in either). Each record is poisoned once; the partition moves.
func TestKafkaTaskRefusedForItsHeadersGetsARejectedResult(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	stamp := time.Now().Format("150405.000000")
	session, other, replies := "headers-"+stamp, "header-other-"+stamp, "replies.headers"
	typ := func(v string) kgo.Header { return kgo.Header{Key: messages.MetaType, Value: []byte(v)} }
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo one","task_id":"twice","reply_topic":"` + replies + `"}`),
			Headers: []kgo.Header{typ(string(messages.TypeTaskSubmitted)), typ(string(messages.TypeCancelRequested))}},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo two","task_id":"typo","reply_topic":"` + replies + `"}`),
			Headers: []kgo.Header{typ("task.submited")}},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo three","task_id":"doubt"}`),
			Headers: []kgo.Header{{Key: messages.MetaSessionID, Value: []byte(other)}}},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	)
	if res, ok := waitTaskResult(t, k, session, "next", 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	for name, want := range map[string]string{"twice": `more than one value to the header "type"`, "typo": `unknown type "task.submited"`} {
		for _, topic := range []string{replies, messages.TopicResults} {
			res, ok := waitReply(t, k, topic, session, name, 30*time.Second)
			if !ok || res.Status != messages.StatusFailed || res.Reason != messages.ReasonRejected || !strings.Contains(res.Error, want) {
				t.Errorf("task %s on %s: %+v (found %v); want it rejected, its error saying %s", name, topic, res, ok, want)
			}
		}
	}
	for _, s := range []string{session, other} {
		if res, ok := waitTaskResult(t, k, s, "doubt", time.Second); ok {
			t.Errorf("task doubt: %+v; want no result, its session in doubt", res)
		}
	}
	if reasons := poisonReasons(t, k, session, other); len(reasons) != 3 {
		t.Errorf("poisoned with %q; want each refused record once", reasons)
	}
}

// A kcat client sends a task without a task_id (its result names it by its
// record's coordinates, which the client cannot know: it waits for the result
// of its session), then a cancellation with a typo in its type header and the
// shortest body a cancellation takes, {"session_id":…}; another sends a named
// task and a cancellation of it whose type header is in another case. Each
// cancellation was answered as a task refused for its headers: troupe.results
// got a failed "rejected" result of the session, before the running task's
// own, which a client took for its task's. Each is poisoned and answered by
// nothing: the session's results are its tasks', all completed.
func TestKafkaCommandWithAMistypedTypeGetsNoTaskResult(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	session := "mistyped-" + time.Now().Format("150405.000000")
	cancel := func(body, header, typ string) kgo.Message {
		return kgo.Message{Key: []byte(session), Value: []byte(body), Headers: []kgo.Header{{Key: header, Value: []byte(typ)}}}
	}
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo one"}`)},
		cancel(`{"session_id":"`+session+`"}`, messages.MetaType, "task.cancle"),
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo two","task_id":"two"}`)},
		cancel(`{"session_id":"`+session+`","task_id":"two"}`, "Type", "Task.Cancel"),
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	)
	if res, ok := waitTaskResult(t, k, session, "next", 45*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	deadline := time.Now().Add(30 * time.Second)
	var got []messages.TaskResult
	for {
		got = replyResults(t, k, messages.TopicResults, session)
		if len(got) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if len(got) != 3 {
		t.Errorf("%d results of session %s: %+v; want its three tasks'", len(got), session, got)
	}
	for _, res := range got {
		if res.Status != messages.StatusCompleted {
			t.Errorf("a result of session %s: %+v; want only its tasks', completed (a cancellation is no task)", session, res)
		}
	}
	if reasons := poisonReasons(t, k, session); len(reasons) != 2 {
		t.Errorf("poisoned with %q; want both cancellations", reasons)
	}
}
