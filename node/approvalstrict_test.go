package node_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node/nodetest"
)

// An approval body whose "approve" is given twice, or miscased, is refused, as a
// task body with a duplicate or miscased key is: encoding/json would take the last
// one, matched without regard to case, so {"approve":false,"Approve":true} approved
// the call. A reason that is not UTF-8 is refused, as on Kafka, rather than recorded
// with U+FFFD in place of its bytes. Nothing is recorded for any of them.
func TestApprovalBodyWithDuplicateOrMiscasedKeysIsRefused(t *testing.T) {
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)
	for i, body := range []string{
		`{"approve":false,"Approve":true}`,
		`{"APPROVE":true}`,
		`{"approve":false,"approve":true}`,
		`{"approve":false,"reason":"no","reason":"fine"}`,
		"{\"approve\":false,\"reason\":\"no \xff\"}",
	} {
		session := "ap-strict-" + string(rune('a'+i))
		if code, out := post(t, api.URL+"/v1/tasks", `{"input":"mail bob","session_id":"`+session+`","agent":"mailer"}`); code != http.StatusAccepted {
			t.Fatalf("POST /v1/tasks: %d %v", code, out)
		}
		waitApproval(t, n, session)
		if code, msg := postJSON(t, api.URL+"/v1/sessions/"+session+"/approvals/call_mail", body); code != http.StatusBadRequest {
			t.Errorf("%q: %d %s, want 400", body, code, msg)
		}
		events, err := n.Log().Read(context.Background(), session, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Type == messages.TypeApprovalResolved {
				t.Errorf("%q: recorded %s", body, e.Payload)
			}
		}
	}
}
