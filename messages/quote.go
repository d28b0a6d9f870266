package messages

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// QuoteHead quotes s (%q) for an error, its first 64 bytes and their length when
// longer: a huge value sent back whole would make the error as large as it.
func QuoteHead(s string) string {
	const head = 64
	if len(s) <= head {
		return strconv.Quote(s)
	}
	cut := head
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}
