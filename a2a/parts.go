package a2a

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/troupe-run/troupe/internal/jsonkeys"
)

// What the A2A specification makes invalid in a message, which the SDK's decoding
// lets through, is refused with -32602 invalid params naming the field:
//
//   - an empty messageId: 0.3 and 1.0 both require it (the sender's identifier of
//     the message; the task's idempotency rests on it);
//   - a role other than "user" and "agent" (0.3's two; 1.0's ROLE_USER and
//     ROLE_AGENT, which v1ToMessage checks);
//   - a part that carries the content of more than one kind: in 1.0 a part's
//     text, raw, url and data are a oneof (exactly one); in 0.3 a part is a
//     union discriminated by its kind, whose content member is text, file or
//     data: a text part with a data member too would have the data dropped
//     unseen. Members that are no kind's content (an extension's) are let be;
//   - file bytes that are not base64: 0.3's file.bytes is "base64-encoded
//     content" and 1.0's raw is proto bytes, base64 in JSON. Both alphabets
//     (standard, URL-safe), padded or not, are accepted, as proto-JSON parsers do.

// partContent is the content member each 0.3 part kind carries.
var partContent = map[string]string{"text": "text", "file": "file", "data": "data"}

// MaxMessageID bounds a message's messageId, in bytes, as the task API bounds its
// Idempotency-Key: the ID is recorded in the session's events (their causation)
// and names the task's envelope.
const MaxMessageID = 200

// checkMessageID refuses a messageId longer than MaxMessageID.
func checkMessageID(id string) error {
	if len(id) > MaxMessageID {
		return fmt.Errorf(`"message.messageId" is %d bytes long: at most %d`, len(id), MaxMessageID)
	}
	return nil
}

// checkMessageV03 checks the message of the params of a 0.3 message/send or
// message/stream (the SDK decoded them already: the shape is right).
func checkMessageV03(params json.RawMessage) error {
	var p struct {
		Message struct {
			MessageID string                       `json:"messageId"`
			Role      string                       `json:"role"`
			Parts     []map[string]json.RawMessage `json:"parts"`
		} `json:"message"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil // the SDK's decoding said what is wrong
	}
	if p.Message.MessageID == "" {
		return errors.New(`"message.messageId" is required: the sender's identifier of the message, not empty`)
	}
	if err := checkMessageID(p.Message.MessageID); err != nil {
		return err
	}
	if r := p.Message.Role; r != "user" && r != "agent" {
		return fmt.Errorf(`"message.role" %q: want "user" or "agent"`, r)
	}
	for i, part := range p.Message.Parts {
		if k, want, ok := miscasedMember(part); ok {
			return fmt.Errorf(`"message.parts[%d]" has a member %q: the name is %q (a member named otherwise would be read as another part than the one sent)`, i, k, want)
		}
		var kind string
		_ = json.Unmarshal(part["kind"], &kind)
		var others []string
		for _, member := range partContent {
			if _, ok := part[member]; ok && member != partContent[kind] {
				others = append(others, member)
			}
		}
		if len(others) > 0 {
			sort.Strings(others)
			return fmt.Errorf(`"message.parts[%d]" is a %s part with %s too: a part carries one kind of content, the one its kind names`, i, kind, quoteJoin(others))
		}
		if kind == "file" {
			var f struct {
				Bytes *string `json:"bytes"`
			}
			_ = json.Unmarshal(part["file"], &f)
			if f.Bytes != nil && !isBase64(*f.Bytes) {
				return fmt.Errorf(`"message.parts[%d].file.bytes" is not valid base64`, i)
			}
		}
	}
	return nil
}

// checkPartKindsV03 checks that each part of the message of the params of a 0.3
// message/send or message/stream names its kind, one of 0.3's, before the SDK
// decodes them: it says of a part without one, or with another, "unknown part
// kind " (an empty name for a missing kind) or a Go decoding error.
func checkPartKindsV03(params json.RawMessage) error {
	var p struct {
		Message struct {
			Parts []json.RawMessage `json:"parts"`
		} `json:"message"`
	}
	if json.Unmarshal(params, &p) != nil {
		return nil // the SDK's decoding says what is wrong
	}
	for i, raw := range p.Message.Parts {
		var part map[string]json.RawMessage
		if json.Unmarshal(raw, &part) != nil || part == nil {
			return fmt.Errorf(`"message.parts[%d]" is not an object: a part is {"kind": "text", "text": "..."}, or a "file" or "data" part`, i)
		}
		k, ok := part["kind"]
		if !ok {
			return fmt.Errorf(`"message.parts[%d]" has no "kind": want "text", "file" or "data"`, i)
		}
		var kind string
		if json.Unmarshal(k, &kind) != nil || partContent[kind] == "" {
			return fmt.Errorf(`"message.parts[%d].kind" is %.40s: want "text", "file" or "data"`, i, bytes.TrimSpace(k))
		}
	}
	return nil
}

// partMembers are the members of a 0.3 part the SDK decodes.
var partMembers = []string{"kind", "text", "file", "data", "metadata"}

// miscasedMember returns a member of part whose name is one of partMembers'
// but for case ("Kind"), and that name. The SDK's decoding (encoding/json) takes
// such a member for the one it names, the last one written winning, while the
// checks here read the names as written: {"kind":"data","data":…,"Kind":"text",
// "Text":"hi"} passed as a data part and was read as a text part, its data
// dropped unseen.
func miscasedMember(part map[string]json.RawMessage) (member, want string, ok bool) {
	return jsonkeys.Miscased(part, partMembers)
}

// v1PartContent are the members of a 1.0 part's content oneof.
var v1PartContent = []string{"text", "raw", "url", "data"}

// checkPartV1 checks the content oneof of a 1.0 part: exactly one member, and
// raw base64.
func checkPartV1(p map[string]any) error {
	var set []string
	for _, k := range v1PartContent {
		if _, ok := p[k]; ok {
			set = append(set, k)
		}
	}
	if len(set) > 1 {
		return fmt.Errorf(`a part has one of "text", "raw", "url" or "data", not %s`, quoteJoin(set))
	}
	if raw, ok := p["raw"]; ok {
		if s, isString := raw.(string); !isString || !isBase64(s) {
			return errors.New(`"raw" is not valid base64`)
		}
	}
	return nil
}

// isBase64 reports whether s is base64 in the standard or the URL-safe alphabet,
// padded or not (as proto-JSON reads bytes).
func isBase64(s string) bool {
	_, ok := decodeBase64(s)
	return ok
}

// decodeBase64 decodes s in either alphabet, padded or not, as a part's bytes may be.
func decodeBase64(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, true
		}
	}
	return nil, false
}

// quoteJoin is names quoted and joined with "and".
func quoteJoin(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = `"` + n + `"`
	}
	return strings.Join(q, " and ")
}

// answerMembers are the members of an approval answer's data part (parseAnswer).
var answerMembers = []string{"approve", "reason", "call"}

// checkAnswerMembers refuses a message (the params of a message/send or
// message/stream, 0.3 or 1.0: message.parts[].data) with a data part whose object
// names "approve", "reason" or "call" twice, or but for case. The SDK decodes the data
// (encoding/json) before parseAnswer reads it: the last of two members wins, so
// {"approve": false, "approve": true} approved the call, as a miscased one
// ("Approve") would have been read by a decoder that ignores case. The task API
// and task.approval messages refuse them likewise.
func checkAnswerMembers(params json.RawMessage) error {
	var p struct {
		Message struct {
			Parts []struct {
				Data json.RawMessage `json:"data"`
			} `json:"parts"`
		} `json:"message"`
	}
	if json.Unmarshal(params, &p) != nil {
		return nil // the params' decoding says what is wrong
	}
	for i, part := range p.Message.Parts {
		if k, ok := repeatedMember(part.Data, answerMembers); ok {
			return fmt.Errorf(`"message.parts[%d].data" names %q twice or but for case: an answer names "approve", "reason" and "call" once each, as written`, i, k)
		}
	}
	return nil
}

// repeatedMember returns a member of the JSON object data whose name is one of
// names but for case, or one of them a second time.
func repeatedMember(data json.RawMessage, names []string) (string, bool) {
	d := json.NewDecoder(bytes.NewReader(data))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	seen := map[string]bool{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return "", false
		}
		k, _ := tok.(string)
		for _, n := range names {
			if strings.EqualFold(k, n) {
				if k != n || seen[n] {
					return k, true
				}
				seen[n] = true
			}
		}
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}
