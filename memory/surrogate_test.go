package memory_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/memory"
)

// A JSON escape of half a UTF-16 surrogate pair (a string cut in the middle of an
// emoji by a client counting UTF-16 units) is ASCII on the wire, yet encoding/json
// stores it as U+FFFD: a memory of another text than the one sent. It is refused
// as a byte that is not UTF-8 is, and a whole pair is the character it encodes.
func TestDecodeInputsRefusesLoneSurrogate(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"high alone", `{"namespace":"user:a","tier":"semantic","content":"smile \ud83d"}`, `\ud83d`},
		{"low alone", `{"namespace":"user:a","tier":"semantic","content":"smile \uDE00 now"}`, `\uDE00`},
		{"high then text", `{"namespace":"user:a","tier":"semantic","content":"\ud83dx"}`, `\ud83d`},
		{"high then high", `{"namespace":"user:a","tier":"semantic","content":"\ud83d\ud83d\ude00"}`, `\ud83d`},
		{"in the outcome", `{"namespace":"user:a","tier":"episodic","content":"x","outcome":"ok \udc00"}`, `\udc00`},
		{"in the metadata", `{"namespace":"user:a","tier":"semantic","content":"x","metadata":{"k":"\ud800"}}`, `\ud800`},
		{"in a metadata key", `{"namespace":"user:a","tier":"semantic","content":"x","metadata":{"\ud800":1}}`, `\ud800`},
		{"in an array", `[{"namespace":"user:a","tier":"semantic","content":"x"},{"namespace":"user:a","tier":"semantic","content":"\ud800"}]`, `\ud800`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := memory.DecodeInputs([]byte(tc.body))
			if !errors.Is(err, memory.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeInputs(%s) = %v; want ErrInvalid naming %s", tc.body, err, tc.want)
			}
			if _, err := memory.DecodeInput([]byte(tc.body)); err == nil {
				t.Fatalf("DecodeInput(%s) took it", tc.body)
			}
		})
	}
	for _, body := range []string{
		`{"namespace":"user:a","tier":"semantic","content":"smile \ud83d\ude00"}`,
		`{"namespace":"user:a","tier":"semantic","content":"a \\ud800 b \\\ud83d\ude00 \u00e9"}`,
		`{"namespace":"user:a","tier":"semantic","content":"x","metadata":{"\\ud800":"\"\\u"}}`,
	} {
		ins, err := memory.DecodeInputs([]byte(body))
		if err != nil {
			t.Fatalf("DecodeInputs(%s): %v", body, err)
		}
		if strings.ContainsRune(ins[0].Content, '\uFFFD') {
			t.Errorf("DecodeInputs(%s) content %q holds U+FFFD", body, ins[0].Content)
		}
	}
}
