// Package jsonesc reads JSON's \uXXXX escapes where a package scans raw JSON text
// itself (the redactor, a stop condition's argument hashing).
package jsonesc

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
