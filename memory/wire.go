package memory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/troupe-run/troupe/internal/jsonesc"
	"github.com/troupe-run/troupe/messages"
)

// Input is one memory as a caller writes it: an object of POST /v1/memories (one,
// or an array of them) and a line of `node memory import FILE.jsonl`.
type Input struct {
	Namespace string `json:"namespace"`
	Tier      string `json:"tier"`
	Content   string `json:"content"`
	// Importance is in [0, 1] (default 0.5).
	Importance *float64 `json:"importance,omitempty"`
	// Timestamp is when the remembered thing happened, RFC 3339 (default: now).
	Timestamp string `json:"timestamp,omitempty"`
	// Metadata is a JSON object, kept through updates and merges.
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	Participants []string        `json:"participants,omitempty"`
	Outcome      string          `json:"outcome,omitempty"`
	// Modality (text, image, audio) and URI describe a perceptual memory.
	Modality string `json:"modality,omitempty"`
	URI      string `json:"uri,omitempty"`
}

// MaxInputs bounds the memories of one request or one import batch.
const MaxInputs = 10_000

// checkUTF8 refuses JSON that is not UTF-8: encoding/json would store each bad
// byte as U+FFFD, a memory of another text than the one sent.
func checkUTF8(b []byte) error {
	at := messages.InvalidUTF8At(b)
	if at == len(b) {
		return nil
	}
	return fmt.Errorf("%w: the JSON is not valid UTF-8 (byte %d, 0x%02x): send text as UTF-8; nothing was written", ErrInvalid, at, b[at])
}

// checkSurrogates refuses JSON (valid UTF-8) holding a \u escape of half a UTF-16
// surrogate pair, a high one not followed by the escape of a low one or a low one
// alone (a string cut in the middle of an emoji by a client counting UTF-16 units):
// encoding/json would store it as U+FFFD, another text than the one sent.
func checkSurrogates(b []byte) error {
	if at := jsonesc.LoneSurrogateAt(b); at >= 0 && json.Valid(b) { // malformed JSON: the decoder says so
		return surrogateError(b, at)
	}
	return nil
}

func surrogateError(b []byte, at int) error {
	return fmt.Errorf("%w: the JSON holds %s at byte %d, half of a UTF-16 surrogate pair, not a character: send whole characters (a text cut in the middle of one?); nothing was written", ErrInvalid, b[at:at+6], at)
}

// DecodeInputs reads one Input object or an array of them (after a byte order
// mark, if the body begins with one), strictly: keys spelled
// exactly as Input's (encoding/json alone would take "CONTENT" for "content") and each
// given once, values of the right types, nothing after the JSON value. Each input is
// then checked (Input.Check). Errors wrap ErrInvalid and name the input's index in an
// array.
func DecodeInputs(body []byte) ([]Input, error) {
	// The byte order mark some editors begin a file with (a body sent from one),
	// as node memory import reads a file.
	body = bytes.TrimSpace(messages.TrimByteOrderMark(body))
	if len(body) == 0 {
		return nil, fmt.Errorf("%w: empty body: want a memory object or an array of them", ErrInvalid)
	}
	if err := checkUTF8(body); err != nil {
		return nil, err
	}
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v)
		return nil, fmt.Errorf("%w: malformed JSON: %v", ErrInvalid, err)
	}
	var raws []json.RawMessage
	array := body[0] == '['
	if array {
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if len(raws) == 0 {
			return nil, fmt.Errorf("%w: empty array: want at least one memory", ErrInvalid)
		}
		if len(raws) > MaxInputs {
			return nil, fmt.Errorf("%w: %d memories in one request: at most %d", ErrInvalid, len(raws), MaxInputs)
		}
	} else {
		raws = []json.RawMessage{body}
	}
	out := make([]Input, len(raws))
	for i, raw := range raws {
		in, err := DecodeInput(raw)
		if err != nil {
			if array {
				return nil, fmt.Errorf("memory %d: %w", i, err)
			}
			return nil, err
		}
		out[i] = in
	}
	return out, nil
}

// DecodeInput reads one Input object strictly and checks it (see DecodeInputs).
func DecodeInput(raw []byte) (Input, error) {
	if err := checkUTF8(raw); err != nil {
		return Input{}, err
	}
	if err := checkSurrogates(raw); err != nil {
		return Input{}, err
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return Input{}, fmt.Errorf("%w: want a JSON object", ErrInvalid)
	}
	seen := map[string]bool{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return Input{}, fmt.Errorf("%w: malformed JSON: %v", ErrInvalid, err)
		}
		key, _ := tok.(string)
		if !inputFields[key] {
			for name := range inputFields {
				if strings.EqualFold(name, key) {
					return Input{}, fmt.Errorf("%w: unknown field %q (field names are case-sensitive: %q)", ErrInvalid, key, name)
				}
			}
			return Input{}, fmt.Errorf("%w: unknown field %q: the fields are %s", ErrInvalid, key, inputFieldList)
		}
		if seen[key] {
			return Input{}, fmt.Errorf("%w: duplicate field %q", ErrInvalid, key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return Input{}, fmt.Errorf("%w: malformed JSON: %v", ErrInvalid, err)
		}
	}
	if _, err := d.Token(); err != nil {
		return Input{}, fmt.Errorf("%w: malformed JSON: %v", ErrInvalid, err)
	}
	if d.More() {
		return Input{}, fmt.Errorf("%w: data after the JSON object", ErrInvalid)
	}
	var in Input
	if err := json.Unmarshal(raw, &in); err != nil {
		return Input{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return in, in.Check()
}

var inputFields, inputFieldList = func() (map[string]bool, string) {
	m := map[string]bool{}
	var names []string
	t := reflect.TypeFor[Input]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		m[name] = true
		names = append(names, name)
	}
	return m, strings.Join(names, ", ")
}()

// Check reports what is wrong with an input, wrapping ErrInvalid: a bad namespace,
// an unknown tier or modality, empty content, importance outside [0, 1], a timestamp
// that is not RFC 3339, metadata that is not a JSON object.
func (in Input) Check() error {
	if err := CheckNamespace(in.Namespace); err != nil {
		return err
	}
	if in.Tier == "" {
		return fmt.Errorf("%w: no tier: want working, episodic, semantic or perceptual", ErrInvalid)
	}
	tier, err := ParseTier(in.Tier)
	if err != nil {
		return err
	}
	mod, err := ParseModality(in.Modality)
	if err != nil {
		return err
	}
	if mod != Text && tier != Perceptual {
		return fmt.Errorf("%w: modality %s is for the perceptual tier, not %s", ErrInvalid, mod, tier)
	}
	if blank(in.Content) {
		return fmt.Errorf("%w: empty content", ErrInvalid)
	}
	if in.Importance != nil {
		if err := CheckImportance(*in.Importance); err != nil {
			return err
		}
	}
	if in.Timestamp != "" {
		ts, err := time.Parse(time.RFC3339Nano, in.Timestamp)
		if err != nil {
			return fmt.Errorf("%w: timestamp %q is not RFC 3339 (like 2026-12-01T09:30:00Z)", ErrInvalid, in.Timestamp)
		}
		if err := checkTimestampYear(ts); err != nil {
			return err
		}
		if err := checkGivenTimestamp(in.Timestamp, ts); err != nil {
			return err
		}
	}
	if len(in.Metadata) > 0 {
		if t := bytes.TrimSpace(in.Metadata); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
			return fmt.Errorf("%w: metadata must be a JSON object", ErrInvalid)
		}
		if err := checkSurrogates(in.Metadata); err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
	}
	return nil
}

// checkGivenTimestamp refuses a timestamp given (raw, as written, not blank) that
// parsed (ts) to the zero time: clients send it for a time not set (.NET's
// DateTime.MinValue), and Namespace.Add reads it as now, so the memory would be
// dated the time of the write without a word. The year 1's later instants are
// kept as written. POST /v1/memories, node memory add, import and the memory
// tool's add all check it here.
func checkGivenTimestamp(raw string, ts time.Time) error {
	if strings.TrimSpace(raw) != "" && ts.IsZero() {
		return fmt.Errorf("%w: timestamp %s is the zero time, which clients send for a time not set (.NET's DateTime.MinValue): leave timestamp out for now, or give when the remembered thing happened", ErrInvalid, strings.TrimSpace(raw))
	}
	return nil
}

// Request turns a checked input into the request of Namespace.Add.
func (in Input) Request(reason string) AddRequest {
	tier, _ := ParseTier(in.Tier)
	mod, _ := ParseModality(in.Modality)
	var ts time.Time
	if in.Timestamp != "" {
		ts, _ = time.Parse(time.RFC3339Nano, in.Timestamp)
	}
	return AddRequest{Tier: tier, Content: in.Content, Importance: in.Importance, Timestamp: ts, Metadata: in.Metadata,
		Participants: in.Participants, Outcome: in.Outcome, Modality: mod, URI: in.URI, Reason: reason}
}

// Check checks in as Namespace.Add will, with these memories' limits: Input.Check,
// then the content's size (Config.MaxContentBytes) and encoding, the sizes of its
// metadata, outcome, URI and participants (each at most MaxContentBytes) and a
// timestamp at most MaxFuture ahead. A batch whose inputs all pass is written whole, whatever
// namespaces it spans: check every input before writing any.
func (m *Memories) Check(in Input) error {
	if err := in.Check(); err != nil {
		return err
	}
	switch c := strings.TrimSpace(in.Content); {
	case len(c) > m.cfg.MaxContentBytes:
		return fmt.Errorf("%w: content of %d bytes; the limit is %d", ErrInvalid, len(c), m.cfg.MaxContentBytes)
	case !utf8.ValidString(c):
		return fmt.Errorf("%w: content is not UTF-8 text", ErrInvalid)
	}
	if err := checkNUL(strings.TrimSpace(in.Content)); err != nil {
		return err
	}
	meta, err := checkMetadata(in.Metadata)
	if err != nil {
		return err
	}
	if err := checkSizes(m.cfg.MaxContentBytes, meta, in.Outcome, in.URI, in.Participants); err != nil {
		return err
	}
	if in.Timestamp != "" {
		ts, _ := time.Parse(time.RFC3339Nano, in.Timestamp) // Check parsed it
		if now := m.cfg.Now(); ts.After(now.Add(MaxFuture)) {
			return fmt.Errorf("%w: timestamp %s is more than %s in the future", ErrInvalid, ts.Format(time.RFC3339), MaxFuture)
		}
	}
	return nil
}
