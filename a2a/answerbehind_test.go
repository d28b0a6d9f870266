package a2a

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// sendingHandler is an a2asrv.RequestHandler that takes every message sent
// (message/send) and counts them.
type sendingHandler struct {
	a2asrv.RequestHandler
	sent int
}

func (h *sendingHandler) OnSendMessage(_ context.Context, p *sdk.MessageSendParams) (sdk.SendMessageResult, error) {
	h.sent++
	return &sdk.Task{ID: p.Message.TaskID, Status: sdk.TaskStatus{State: sdk.TaskStateWorking}}, nil
}

// An answer to a task whose session waits for approval reaches the SDK while
// the execution this process runs has yet to report the task input-required
// (its last save says working): in a cluster that execution hears of the call
// over the bus, after the log has it, and tasks/get on another node answers
// from the log, so a client polling through a load balancer answers at once.
// It was refused (-32602, "task is working") though the SDK, which waits for
// the execution to end (whileExecuting), took it before that check. A message
// that is no answer is still refused, saying what the task takes, and one to a
// task whose session runs it, as the task is working.
func TestAnswerToATaskWhoseExecutionIsBehindItsSessionIsTaken(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	record := func(session string, seq uint64, p messages.Payload, id string) {
		t.Helper()
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq, e.TS = session, seq, int64(1_800_000_000_000_000+seq)
		e.ID = cmp.Or(id, fmt.Sprintf("%s-%d", session, seq))
		e.CorrelationID = EnvelopeID(session, "m-"+session)
		if err := l.Append(ctx, []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	store := NewTaskStore(&logBackend{log: l})
	h := &sendingHandler{}
	d := NewDedupe(h, NewExecutor(&silentBackend{}, ""), store)
	working := func(session string) sdk.TaskID {
		t.Helper()
		id := TaskIDFor(session, "m-"+session)
		record(session, 1, &messages.TaskSubmitted{Input: "mail bob"}, EnvelopeID(session, "m-"+session))
		if err := store.Save(ctx, &sdk.Task{ID: id, ContextID: session, Status: sdk.TaskStatus{State: sdk.TaskStateWorking}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	send := func(id sdk.TaskID, text string) error {
		m := sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: text})
		m.TaskID = id
		_, err := d.OnSendMessage(ctx, &sdk.MessageSendParams{Message: m})
		return err
	}

	waits := working("waits")
	record("waits", 2, &messages.ApprovalRequested{Key: "k1", CallID: "c1", Tool: "send_email", Arguments: `{"to":"bob"}`}, "")
	if err := send(waits, "approve"); err != nil || h.sent != 1 {
		t.Fatalf("an answer to a task whose session waits for approval: %v (%d sent); want it taken", err, h.sent)
	}
	if err := send(waits, "what would it send?"); !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), `"approve"`) || h.sent != 1 {
		t.Fatalf("a message that is no answer: %v (%d sent); want invalid params saying what the task takes", err, h.sent)
	}
	runs := working("runs")
	if err := send(runs, "approve"); !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), "input-required") || h.sent != 1 {
		t.Fatalf("a message to a task its session runs: %v (%d sent); want invalid params saying it takes none", err, h.sent)
	}
}
