package a2a

import (
	"encoding/json"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"
)

// A part whose members are named twice, once miscased ("kind" and "Kind"), is
// read by the SDK's decoding (encoding/json: a member's name matched without
// case, the last one taken) as another part than the one guard checked (a map:
// names as written): a data part with a text member too, the data dropped
// unseen, passed as a text part. It must be refused as guard refuses the same
// part written plainly.
func TestAPartWithMiscasedMembersIsRefused(t *testing.T) {
	plain := `{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"data","data":{"keep":"me"},"text":"hi"}]}}`
	if checkMessageV03(json.RawMessage(plain)) == nil {
		t.Fatal("the plain part with two contents passed")
	}
	for _, params := range []string{
		`{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"data","data":{"keep":"me"},"Kind":"text","Text":"hi"}]}}`,
		`{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi","Kind":"file","File":{"bytes":"not base64!"}}]}}`,
	} {
		var p sdk.MessageSendParams
		if err := json.Unmarshal([]byte(params), &p); err != nil {
			t.Fatal(err)
		}
		if err := checkMessageV03(json.RawMessage(params)); err == nil {
			t.Errorf("%s passed; the SDK reads its part as %T", params, p.Message.Parts[0])
		}
	}
}
