// Package jsonesc reads JSON's \uXXXX escapes where a package scans raw JSON text
// itself (the redactor, a stop condition's argument hashing, the checks of the
// node's and the memory API's bodies, the model client's stream).
package jsonesc

import "bytes"

// Hex4 decodes the four hexadecimal digits b starts with (the XXXX of \uXXXX);
// false when b is shorter or one of them is no hexadecimal digit.
func Hex4[T string | []byte](b T) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for i := range 4 {
		c := b[i]
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// LoneSurrogateAt returns the offset in b (valid JSON) of the first \u escape of
// a UTF-16 surrogate that is not one half of a pair (a high one followed by the
// escape of a low one), or -1. Such an escape is valid JSON but no character:
// encoding/json decodes it as U+FFFD, so a body that carries one would be read
// as another text than the one sent, as with a byte that is not UTF-8.
func LoneSurrogateAt(b []byte) int {
	// In valid JSON a backslash stands only in a string, and starts an escape.
	for i := 0; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return -1
		}
		i += j
		if i+1 >= len(b) || b[i+1] != 'u' {
			i++ // a two-byte escape, \\ among them
			continue
		}
		r, ok := Hex4(b[i+2:])
		switch {
		case !ok:
			i++ // malformed: not valid JSON
		case r >= 0xDC00 && r <= 0xDFFF:
			return i
		case r >= 0xD800 && r <= 0xDBFF:
			if low, ok := escapeAt(b, i+6); !ok || low < 0xDC00 || low > 0xDFFF {
				return i
			}
			i += 11 // the pair
		default:
			i += 5
		}
	}
	return -1
}

// escapeAt reads the \uXXXX escape at b[i:].
func escapeAt(b []byte, i int) (rune, bool) {
	if i+2 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	return Hex4(b[i+2:])
}
