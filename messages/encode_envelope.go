package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// AppendEnvelope appends the encoding of e to dst and returns the extended buffer:
// the bytes of json.Marshal(e), without reflection. Like json.Marshal, it writes
// the payload compacted (whitespace between tokens dropped) and HTML-safe ('<', '>',
// '&', U+2028 and U+2029 escaped inside its strings), and it checks the payload in
// the same pass: an envelope that Marshal refuses (a missing ID, session or type, a
// payload that is not one JSON value) is refused with ErrCorrupt, and dst comes
// back unchanged. The payloads NewEnvelope makes are compact and HTML-safe
// already: for them the payload is validated and copied in one pass.
func AppendEnvelope(dst []byte, e Envelope) ([]byte, error) {
	if err := e.validateFields(); err != nil {
		return dst, err
	}
	n := len(dst)
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, e.ID)
	dst = append(dst, `,"session_id":`...)
	dst = appendJSONString(dst, e.SessionID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, e.Seq, 10)
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, string(e.Type))
	dst = append(dst, `,"v":`...)
	dst = strconv.AppendInt(dst, int64(e.Version), 10)
	if e.CausationID != "" {
		dst = append(dst, `,"causation_id":`...)
		dst = appendJSONString(dst, e.CausationID)
	}
	if e.CorrelationID != "" {
		dst = append(dst, `,"correlation_id":`...)
		dst = appendJSONString(dst, e.CorrelationID)
	}
	dst = append(dst, `,"ts":`...)
	dst = strconv.AppendInt(dst, e.TS, 10)
	dst = append(dst, `,"actor":`...)
	dst = appendJSONString(dst, e.Actor)
	dst = append(dst, `,"payload":`...)
	out, ok := appendPayloadJSON(dst, e.Payload)
	if !ok {
		return dst[:n], e.errPayload()
	}
	return append(out, '}'), nil
}

// SizeHint is about the length of e's encoding, at least it when the payload is
// compact and no string needs an escape: the room to reserve for AppendEnvelope.
func (e Envelope) SizeHint() int {
	const keys = len(`{"id":"","session_id":"","seq":,"type":"","v":,"causation_id":"","correlation_id":"","ts":,"actor":"","payload":}`)
	const numbers = 20 + 20 + 20 // seq, v and ts, at most
	return keys + numbers + len(e.ID) + len(e.SessionID) + len(e.Type) + len(e.CausationID) + len(e.CorrelationID) + len(e.Actor) + len(e.Payload)
}

// appendPayloadJSON appends p as json.Marshal writes a json.RawMessage: compacted,
// with '<', '>', '&', U+2028 and U+2029 escaped (encoding/json's appendCompact with
// HTML escaping). ok is false, and dst is returned unchanged, when p is not
// exactly one JSON value (json.Valid). One scan validates p and tells whether it
// is compact and HTML-safe already, as NewEnvelope's payloads are: those are
// copied as they are. Others are compacted by json.Compact, and escaped where one
// of those bytes occurs (in a string, the only place valid JSON can hold them,
// where compacting changed nothing).
func appendPayloadJSON(dst, p []byte) ([]byte, bool) {
	valid, verbatim := scanJSON(p)
	switch {
	case !valid:
		return dst, false
	case verbatim:
		return append(dst, p...), true
	}
	n := len(dst)
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, p); err != nil {
		return dst, false
	}
	out := buf.Bytes()
	if !needsHTMLEscape(out[n:]) {
		return out, true
	}
	compact := bytes.Clone(out[n:])
	return appendHTMLEscape(out[:n], compact), true
}

// needsHTMLEscape reports whether b holds '<', '>', '&' or the UTF-8 encoding of
// U+2028 or U+2029 (E2 80 A8, E2 80 A9).
func needsHTMLEscape(b []byte) bool {
	if bytes.IndexByte(b, '<') >= 0 || bytes.IndexByte(b, '>') >= 0 || bytes.IndexByte(b, '&') >= 0 {
		return true
	}
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], 0xE2)
		if j < 0 {
			return false
		}
		i += j
		if i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8 {
			return true
		}
		i++
	}
}

// appendHTMLEscape appends src with '<', '>', '&', U+2028 and U+2029 escaped as
// encoding/json escapes them (\u003c, \u003e, \u0026, \u2028, \u2029).
func appendHTMLEscape(dst, src []byte) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c == '<' || c == '>' || c == '&' {
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		}
		if c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8 {
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[src[i+2]&0xF])
			start = i + 3
		}
	}
	return append(dst, src[start:]...)
}

// validateFields checks the fields every envelope must have, all but the payload.
func (e *Envelope) validateFields() error {
	switch {
	case e.ID == "":
		return fmt.Errorf("%w: missing id", ErrCorrupt)
	case e.SessionID == "":
		return fmt.Errorf("%w: message %s: missing session_id", ErrCorrupt, e.ID)
	case e.Type == "":
		return fmt.Errorf("%w: message %s: missing type", ErrCorrupt, e.ID)
	}
	return nil
}

func (e *Envelope) errPayload() error {
	return fmt.Errorf("%w: session %s seq %d: payload is not valid JSON", ErrCorrupt, e.SessionID, e.Seq)
}
