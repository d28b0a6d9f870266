package a2a

import (
	"strings"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"
)

func TestParseAnswer(t *testing.T) {
	for _, c := range []struct {
		parts   []sdk.Part
		approve bool
		reason  string
		err     string
	}{
		{parts: []sdk.Part{sdk.TextPart{Text: "approve"}}, approve: true},
		{parts: []sdk.Part{sdk.TextPart{Text: "Yes, go ahead"}}, approve: true, reason: "go ahead"},
		{parts: []sdk.Part{sdk.TextPart{Text: "reject: wrong recipient"}}, reason: "wrong recipient"},
		{parts: []sdk.Part{sdk.DataPart{Data: map[string]any{"approve": false, "reason": "no"}}}, reason: "no"},
		{parts: []sdk.Part{sdk.DataPart{Data: map[string]any{"approve": "yes"}}}, err: `boolean "approve"`},
		{parts: []sdk.Part{sdk.TextPart{Text: "maybe later"}}, err: `answer "approve" or "reject"`},
	} {
		approve, reason, err := parseAnswer(sdk.NewMessage(sdk.MessageRoleUser, c.parts...))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: err %v, want %q", c.parts, err, c.err)
			}
			continue
		}
		if err != nil || approve != c.approve || reason != c.reason {
			t.Errorf("%v: %v %q %v, want %v %q", c.parts, approve, reason, err, c.approve, c.reason)
		}
	}
}

func TestIDsAreStableAndValidSessionIDs(t *testing.T) {
	if EnvelopeID("m1") != EnvelopeID("m1") || EnvelopeID("m1") == EnvelopeID("m2") || ContextFor("m1") == EnvelopeID("m1") {
		t.Fatal("IDs must be a function of the message ID, one per use")
	}
	if id := ContextFor(strings.Repeat("x", 10000)); len(id) != 36 || !strings.HasPrefix(id, "a2a-") {
		t.Fatalf("context id %q", id)
	}
}

func TestTaskIDsNameTheirSessionAndEnvelope(t *testing.T) {
	id := TaskIDFor("user:alice.1", "m1")
	session, env, ok := ParseTaskID(id)
	if !ok || session != "user:alice.1" || env != EnvelopeID("m1") {
		t.Fatalf("%s: %q %q %v", id, session, env, ok)
	}
	if TaskIDFor("s", "m1") == TaskIDFor("s", "m2") || TaskIDFor("s1", "m1") == TaskIDFor("s2", "m1") {
		t.Fatal("a task ID must be one per context and message")
	}
	for _, bad := range []string{"", "~0123456789abcdef0123456789abcdef", "s~short", "0199a0b2-uuid-like", "s~0123456789abcdef0123456789abcdef0"} {
		if _, _, ok := ParseTaskID(sdk.TaskID(bad)); ok {
			t.Errorf("%q parsed as a task ID", bad)
		}
	}
}
