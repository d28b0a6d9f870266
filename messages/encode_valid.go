package messages

import "unicode/utf8"

// ValidJSON reports whether b is exactly one JSON value (with whitespace around it
// allowed): json.Valid's answer, with its nesting limit (10,000 open objects and
// arrays), in about a third of its time. Like json.Valid, it accepts any byte from
// 0x20 up in a string, valid UTF-8 or not. encode_valid_test.go checks it against
// json.Valid, and FuzzValidJSON keeps doing so.
func ValidJSON(b []byte) bool {
	ok, _ := scanJSON(b)
	return ok
}

// maxJSONDepth is encoding/json's nesting limit (its maxNestingDepth).
const maxJSONDepth = 10000

// scanJSON reports whether b is one JSON value (ValidJSON), and whether json.Marshal
// would copy it, as a json.RawMessage, byte for byte: no whitespace outside its
// strings and none around it, and no '<', '>', '&', U+2028 or U+2029 in its strings.
func scanJSON(b []byte) (valid, verbatim bool) {
	var open openContainers
	depth := 0
	verbatim = true
	i := skipSpace(b, 0)
	if i > 0 {
		verbatim = false
	}
	n := len(b)
value: // b[i] starts a value
	for {
		if i >= n {
			return false, false
		}
		switch c := b[i]; c {
		case '{', '[':
			if depth == maxJSONDepth {
				return false, false
			}
			open.set(depth, c == '{')
			depth++
			j := skipSpace(b, i+1)
			if j > i+1 {
				verbatim = false
			}
			i = j
			if i < n && b[i] == c+2 { // '}' or ']': empty
				i++
				depth--
				break
			}
			if c == '{' {
				var ok bool
				if i, ok = scanKey(b, i, &verbatim); !ok {
					return false, false
				}
			}
			continue value
		case '"':
			var ok bool
			if i, ok = scanString(b, i, &verbatim); !ok {
				return false, false
			}
		case 't':
			if !hasPrefix(b[i:], "true") {
				return false, false
			}
			i += 4
		case 'f':
			if !hasPrefix(b[i:], "false") {
				return false, false
			}
			i += 5
		case 'n':
			if !hasPrefix(b[i:], "null") {
				return false, false
			}
			i += 4
		default:
			var ok bool
			if i, ok = scanNumber(b, i); !ok {
				return false, false
			}
		}
		// A value ended at i: close what it ends, until a ',' opens the next one.
		for {
			j := skipSpace(b, i)
			if j > i {
				verbatim = false
			}
			i = j
			if depth == 0 {
				return i == n, verbatim && i == n
			}
			if i >= n {
				return false, false
			}
			inObject := open.isObject(depth - 1)
			switch c := b[i]; {
			case c == ',':
				j := skipSpace(b, i+1)
				if j > i+1 {
					verbatim = false
				}
				i = j
				if inObject {
					var ok bool
					if i, ok = scanKey(b, i, &verbatim); !ok {
						return false, false
					}
				}
				continue value
			case c == '}' && inObject, c == ']' && !inObject:
				i++
				depth--
			default:
				return false, false
			}
		}
	}
}

// openContainers holds a bit per open object (1) or array (0) by depth: the first
// 64 in a word, deeper ones, rare, in words allocated when needed.
type openContainers struct {
	first uint64
	more  []uint64
}

func (o *openContainers) set(depth int, object bool) {
	w := &o.first
	if depth >= 64 {
		i := depth/64 - 1
		if i == len(o.more) {
			o.more = append(o.more, 0)
		}
		w = &o.more[i]
	}
	if bit := uint64(1) << (depth % 64); object {
		*w |= bit
	} else {
		*w &^= bit
	}
}

func (o *openContainers) isObject(depth int) bool {
	w := o.first
	if depth >= 64 {
		w = o.more[depth/64-1]
	}
	return w&(1<<(depth%64)) != 0
}

// scanKey scans an object's key at b[i:], the ':' after it and the space around
// that, and returns where its value starts.
func scanKey(b []byte, i int, verbatim *bool) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, ok := scanString(b, i, verbatim)
	if !ok {
		return i, false
	}
	j := skipSpace(b, i)
	if j >= len(b) || b[j] != ':' {
		return j, false
	}
	k := skipSpace(b, j+1)
	if j > i || k > j+1 {
		*verbatim = false
	}
	return k, true
}

// jsonStringByte marks the bytes scanString stops at: the quote, the backslash,
// the control characters (invalid in a string), the HTML characters json.Marshal
// escapes, and 0xE2, the first byte of U+2028 and U+2029.
var jsonStringByte = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	for _, c := range []byte{'"', '\\', '<', '>', '&', 0xE2} {
		t[c] = true
	}
	return t
}()

// scanString scans the string that starts with the quote at b[i] and returns the
// index after its closing quote.
func scanString(b []byte, i int, verbatim *bool) (int, bool) {
	i++
	for i < len(b) {
		c := b[i]
		if !jsonStringByte[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c == 0xE2:
			if i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8 {
				*verbatim = false
			}
			i++
		default: // '<', '>', '&'
			*verbatim = false
			i++
		}
	}
	return i, false
}

// scanNumber scans the number at b[i:] (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)
// and returns the index after it.
func scanNumber(b []byte, i int) (int, bool) {
	n := len(b)
	if i < n && b[i] == '-' {
		i++
	}
	switch {
	case i < n && b[i] == '0':
		i++
	case i < n && '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return i, false
	}
	if i < n && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// skipSpace returns the index of the first byte from i that is not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func hasPrefix(b []byte, s string) bool {
	return len(b) >= len(s) && string(b[:len(s)]) == s
}

// InvalidUTF8At is the offset of the first byte of b that is not valid UTF-8
// (len(b) when there is none): where a body that must be UTF-8 (JSON) goes wrong.
func InvalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(b)
}
