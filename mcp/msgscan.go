package mcp

import (
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// maxScannedID bounds the id msgScan finds, in bytes.
const maxScannedID = 256

// maxScannedKey bounds what msgScan keeps of a member's name: enough to tell
// "id" and "method" from longer names.
const maxScannedKey = 8

// msgScan follows one JSON-RPC message (a JSON value) a byte at a time, in
// constant memory, wherever it is cut: its strings and nesting, so where it ends,
// and, when it is an object, its own members' names: whether it has a "method",
// and its "id", the first whose value accept takes (the value's bytes, white space
// outside strings left out). It lets the server answer a request line too long to
// read whole with the id of its request (readLine), which its client waits for
// (the Python SDK's call for ever), wherever the id stands (the Python SDK writes
// it first, the TypeScript SDK last); and the client answer a server's answer too
// long to pass with an error to its id (jsonLines), which fails its call alone.
type msgScan struct {
	accept func(v []byte) bool

	depth     int
	ended     bool // the value ended
	inStr     bool
	esc       bool
	object    bool   // the value is an object (not a batch)
	phase     int    // of the member being read at depth 1: scanKey, inKey, scanColon, inValue
	key       []byte // the member's name, up to maxScannedKey bytes
	isID      bool   // the member is "id"
	value     []byte // the value of "id", up to maxScannedID+1 bytes
	hasMethod bool
	id        json.RawMessage
}

const (
	scanKey = iota
	inKey
	scanColon
	inValue
)

// reset makes s ready for the next value, keeping its buffers.
func (s *msgScan) reset() {
	*s = msgScan{accept: s.accept, key: s.key[:0], value: s.value[:0]}
}

// open reports whether the value started and has not ended.
func (s *msgScan) open() bool { return s.depth > 0 }

// write follows the bytes of p, up to the value's end.
func (s *msgScan) write(p []byte) {
	for _, c := range p {
		if s.ended {
			return
		}
		s.step(c)
	}
}

// step follows one byte. Before the value, only a '{' or '[' (its start) counts;
// after its end, nothing.
func (s *msgScan) step(c byte) {
	if s.ended {
		return
	}
	if s.depth == 0 {
		if c == '{' || c == '[' {
			s.depth, s.object, s.phase = 1, c == '{', scanKey
		}
		return
	}
	own := s.object && s.depth == 1 // c is not inside a member's object or array
	if s.inStr {
		closing := !s.esc && c == '"'
		s.esc = !s.esc && c == '\\'
		s.inStr = !closing
		if own && s.phase == inKey {
			if closing {
				s.phase, s.isID = scanColon, string(s.key) == "id"
				s.hasMethod = s.hasMethod || string(s.key) == "method"
			} else if len(s.key) < maxScannedKey {
				s.key = append(s.key, c)
			}
			return
		}
		s.keep(c)
		return
	}
	switch c {
	case ' ', '\t', '\r', '\n':
		return
	case '{', '[':
		s.keep(c)
		s.depth++
		return
	case '}', ']':
		if s.depth--; s.depth == 0 {
			s.endMember()
			s.ended = true
			return
		}
	case '"':
		s.inStr = true
		if own && s.phase == scanKey {
			s.phase, s.key = inKey, s.key[:0]
			return
		}
	case ':':
		if own && s.phase == scanColon {
			s.phase, s.value = inValue, s.value[:0]
			return
		}
	case ',':
		if own {
			s.endMember()
			s.phase = scanKey
			return
		}
	}
	s.keep(c)
}

// plainString reports whether the next bytes, up to a quote or a backslash, lie
// inside a string and change nothing s keeps: not an escaped byte, not a member's
// name at depth 1, not the value of "id".
func (s *msgScan) plainString() bool {
	if !s.inStr || s.esc || s.ended {
		return false
	}
	own := s.object && s.depth == 1
	return !(own && s.phase == inKey) && !(s.object && s.phase == inValue && s.isID)
}

// keep adds c to the value of the "id" member being read.
func (s *msgScan) keep(c byte) {
	if s.object && s.phase == inValue && s.isID && len(s.value) <= maxScannedID {
		s.value = append(s.value, c)
	}
}

// endMember ends the member being read at depth 1: the first "id" whose value
// accept takes is the message's.
func (s *msgScan) endMember() {
	if s.id != nil || s.phase != inValue || !s.isID || len(s.value) == 0 || len(s.value) > maxScannedID {
		return
	}
	if s.accept == nil || s.accept(s.value) {
		s.id = json.RawMessage(slices.Clone(s.value))
	}
}

// result returns the id found, nil for none.
func (s *msgScan) result() json.RawMessage { return s.id }

// newRequestIDScan is a msgScan of a request's id: a string or a number.
func newRequestIDScan() *msgScan {
	return &msgScan{accept: func(v []byte) bool {
		return (v[0] == '"' || v[0] == '-' || v[0] >= '0' && v[0] <= '9') && json.Valid(v) && utf8.Valid(v)
	}}
}
