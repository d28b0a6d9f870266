package node

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// The Kafka ways in refuse a lone surrogate escape as HTTP does
// (TestLoneSurrogateEscapesAreRefused): a task.submitted envelope a client wrote
// itself was admitted before the check and ran on U+FFFD, and a task.approval's
// reason was recorded so. Envelopes a node forwards or stores are written by
// encoding/json, which writes no surrogate escape: they are still taken.
func TestLoneSurrogateEscapesAreRefusedOnTheBus(t *testing.T) {
	in := newIngress(redact.New(), actors.SystemClock{}, actors.UUIDv7{})
	env, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "x PLACE"})
	if err != nil {
		t.Fatal(err)
	}
	env.SessionID, env.ID, env.Seq = "s-1", "e-1", 1
	good, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Decode(Arrival{Source: SourceBus, MessageID: "m-0", Key: "s-1", Payload: good}); err != nil {
		t.Fatalf("an envelope encoding/json wrote: %v", err)
	}
	bad := []byte(strings.Replace(string(good), "PLACE", `\ud800`, 1))
	if _, err := in.Decode(Arrival{Source: SourceBus, MessageID: "m-1", Key: "s-1", Payload: bad}); !errors.Is(err, ErrBadTask) || !strings.Contains(err.Error(), "surrogate") {
		t.Errorf("an envelope with a lone surrogate: %v, want ErrBadTask naming it", err)
	}
	_, err = in.DecodeApproval(Arrival{Source: SourceBus, MessageID: "m-2", Payload: []byte(`{"session_id":"s-1","call":"c1","approve":false,"reason":"no \udfff"}`)})
	if !errors.Is(err, ErrBadTask) || !strings.Contains(err.Error(), "surrogate") {
		t.Errorf("an approval with a lone surrogate: %v, want ErrBadTask naming it", err)
	}
	if _, err := in.DecodeApproval(Arrival{Source: SourceBus, MessageID: "m-3", Payload: []byte(`{"session_id":"s-1","call":"c1","approve":false,"reason":"ok \ud83d\ude00"}`)}); err != nil {
		t.Errorf("an approval with a pair: %v", err)
	}
}
