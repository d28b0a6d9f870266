package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// TestClusterAnswerLargerThanAKafkaMessage runs two `node serve` processes on Kafka
// (a real broker, with its default limit of 1 MiB a message, when
// TROUPE_TEST_KAFKA is set) over one log (ClickHouse when TROUPE_TEST_CLICKHOUSE is
// set): n1 runs the sessions, n2 the model calls, and the model answers 2 MiB. The
// answer cannot go back to n1 on troupe.replies as it is: n2 stores it in the log
// (bus/reply/<key>) and sends a reference, and the task completes with the whole answer.
// Before, n2 retried the refused reply forever and the session never ended.
func TestClusterAnswerLargerThanAKafkaMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	answer := strings.Repeat("a long answer, line after line.\n", (2<<20)/32)
	script := writeScript(t, llm.ScriptStep{Content: answer})
	records, modelLog := filepath.Join(dir, "records"), filepath.Join(dir, "models")
	sessions := startClusterNode(t, env, "n1", "sessions,tools", script, records, modelLog)
	models := startClusterNode(t, env, "n2", "models", script, records, modelLog)
	waitOwned(t, sessions)
	for start := time.Now(); !strings.Contains(models.stderr.String(), "subscriber_name=model-requests"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("n2 never read troupe.model.requests:\n%s", tail(models.stderr.String(), 4000))
		}
	}

	id := sessions.post(t, fmt.Sprintf(`{"input":"answer at length","session_id":"big-%d"}`, time.Now().UnixNano()))
	// Past the model timeout (2 minutes), after which a lost request is issued
	// again: the deadline is only for a hang.
	deadline := time.Now().Add(200 * time.Second)
	for {
		st := sessions.status(t, id)
		if st.Status == messages.StatusCompleted {
			if st.Output != answer {
				t.Fatalf("session %s completed with %d bytes, want %d", id, len(st.Output), len(answer))
			}
			break
		}
		if st.Status == messages.StatusFailed || time.Now().After(deadline) {
			t.Fatalf("session %s did not complete: status %q, error %q", id, st.Status, st.Error)
		}
		time.Sleep(50 * time.Millisecond)
	}
	log := env.openLog(t)
	defer log.Close()
	stream := messages.EffectStream(messages.BusStoredReply, messages.EffectKey{SessionID: id, Seq: 2})
	events, err := log.Read(context.Background(), stream, 1)
	if err != nil || len(events) != 1 || events[0].Type != messages.TypeBusStored {
		t.Fatalf("stream %s: %d events (err %v), want its one %s", stream, len(events), err, messages.TypeBusStored)
	}
	// The model was called once: the answer was kept and sent again, not asked again.
	calls := countLines(t, modelLog, "")
	if key := (messages.EffectKey{SessionID: id, Seq: 2}).String(); len(calls) != 1 || calls[key] != 1 {
		t.Errorf("model calls by key: %v, want %s once", calls, key)
	}
}
