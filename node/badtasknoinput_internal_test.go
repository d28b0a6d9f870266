package node

import (
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
)

// A genuine task whose input key is wrong (case, a typo, null) is refused by
// decode; its client waits on its task_id and should be told.
func TestBadTaskWithoutInputIsAnswered(t *testing.T) {
	n, pub, _ := refusingNode(t, "")
	for i, c := range []struct{ typ, body string }{
		{"", `{"session_id":"s-1","task_id":"t-3","input":null,"reply_topic":"my.replies"}`},
		{"", `{"session_id":"s-1","task_id":"t-5","agent":"default","deadline_ms":5000}`},
		{"", `{"task_id":"t-6","reply_topic":"my.replies","max_steps":3}`},
		{"Task.Submitted", `{"session_id":"s-1","task_id":"t-4","agent":"default","input":"hi"}`},
		{"Task.Submitted", `{"session_id":"s-1","task_id":"t-7","agent":"default"}`},
		{"task.cancle", `{"session_id":"s-1","task_id":"t-8","reply_topic":"my.replies"}`},
	} {
		m := message.NewMessage("kafka:troupe.tasks/0/9@"+string(rune('1'+i)), []byte(c.body))
		m.Metadata.Set(messages.MetaSessionID, "s-1")
		if c.typ != "" {
			m.Metadata.Set(messages.MetaType, c.typ)
		}
		if err := n.handleTask(m); !errors.Is(err, errPermanent) {
			t.Errorf("%s: %v; want poisoned", c.body, err)
		}
		if outs := pub.take(); len(outs) != 1 {
			t.Errorf("type=%q %s: published %d results; want its rejected result (t-* is a task's name, no command has Input/prompt/agent/inputs)", c.typ, c.body, len(outs))
		}
	}
}
