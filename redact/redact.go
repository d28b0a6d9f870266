package redact

import (
	"bytes"
	"cmp"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/troupe-run/troupe/internal/jsonesc"
)

// Redacted replaces a secret.
const Redacted = "[REDACTED]"

// MinSecretLen is the shortest secret value a Redactor replaces.
const MinSecretLen = 8

var redacted = []byte(Redacted)

// Redactor replaces known secret values and credential-shaped strings with
// Redacted. Its methods are safe for concurrent use; a nil *Redactor replaces only
// credential-shaped strings.
//
// It learns secrets for as long as it lives (Add): a node learns some at run time
// (the API tokens of a reloaded tokens file, an MCP server's OAuth tokens), and
// every user of the Redactor (the events, the log handler) replaces them from then
// on. It never forgets one: a secret that is no longer in use is still a secret.
type Redactor struct {
	secrets atomic.Pointer[[]secret] // longest first; replaced whole by Add
	adding  sync.Mutex               // serializes Add
}

// secret is one value to replace, and the index of its byte least likely in ordinary
// text: Bytes looks for that byte (bytes.IndexByte is vectorized) and compares the
// whole value only where it occurs.
type secret struct {
	value  []byte
	anchor int
}

// New returns a Redactor for these secret values (Add).
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	r.Add(secrets...)
	return r
}

// Add makes r replace these secret values too, from now on. Empty, known and short
// (under MinSecretLen bytes) values are ignored. A value that JSON would escape (a
// quote, a backslash, <, >, &, a control character) is also replaced in its escaped
// form, as it appears inside a JSON payload. Add on a nil Redactor does nothing.
func (r *Redactor) Add(secrets ...string) {
	if r == nil || !slices.ContainsFunc(secrets, func(s string) bool { return len(s) >= MinSecretLen && !r.knows(s) }) {
		return // nothing new: a token source adds its token at every request
	}
	r.adding.Lock()
	defer r.adding.Unlock()
	list := slices.Clone(r.list())
	n := len(list)
	add := func(s string) {
		if !slices.ContainsFunc(list, func(x secret) bool { return string(x.value) == s }) {
			list = append(list, secret{value: []byte(s), anchor: rarest(s)})
		}
	}
	for _, s := range secrets {
		if len(s) < MinSecretLen {
			continue
		}
		add(s)
		if q, _ := json.Marshal(s); string(q[1:len(q)-1]) != s {
			add(string(q[1 : len(q)-1]))
		}
	}
	if len(list) == n {
		return // nothing new
	}
	slices.SortStableFunc(list, func(a, b secret) int { return cmp.Compare(len(b.value), len(a.value)) })
	r.secrets.Store(&list)
}

// knows reports whether r replaces the value s.
func (r *Redactor) knows(s string) bool {
	return slices.ContainsFunc(r.list(), func(x secret) bool { return string(x.value) == s })
}

// list is r's secrets, longest first.
func (r *Redactor) list() []secret {
	if r == nil {
		return nil
	}
	if p := r.secrets.Load(); p != nil {
		return *p
	}
	return nil
}

// Bytes returns b with every secret replaced by Redacted. It returns b itself when
// there is nothing to replace, and never modifies b. Of valid UTF-8 it returns
// valid UTF-8: a secret that is not (a configured value's stray byte) can match
// inside a character, whose bytes left beside Redacted become U+FFFD here, not
// wherever the text is next encoded (JSON), so that what is written and what is
// used are the same text.
func (r *Redactor) Bytes(b []byte) []byte {
	out := b
	list := r.list()
	for _, s := range list {
		if s.in(out) {
			out = bytes.ReplaceAll(out, s.value, redacted)
		}
	}
	out = redactEscaped(redactShapes(out), list)
	if len(out) > 0 && (len(b) == 0 || &out[0] != &b[0] || len(out) != len(b)) && !utf8.Valid(out) && utf8.Valid(b) {
		out = bytes.ToValidUTF8(out, []byte("\uFFFD"))
	}
	return out
}

// String returns s with every secret replaced by Redacted.
func (r *Redactor) String(s string) string {
	// Bytes never modifies its input: s's bytes are read in place, not copied.
	in := unsafe.Slice(unsafe.StringData(s), len(s))
	out := r.Bytes(in)
	if len(out) == len(in) && (len(in) == 0 || &out[0] == &in[0]) {
		return s // nothing redacted
	}
	return string(out)
}

// in reports whether b contains s; it is bytes.Contains, anchored on s's rarest byte.
func (s secret) in(b []byte) bool { return s.index(b) >= 0 }

// index is bytes.Index of s in b, anchored on s's rarest byte.
func (s secret) index(b []byte) int {
	v, p := s.value, s.anchor
	last := len(b) - len(v) + p // the last index the anchor can have
	for i := p; i <= last; i++ {
		j := bytes.IndexByte(b[i:last+1], v[p])
		if j < 0 {
			return -1
		}
		i += j
		if bytes.Equal(b[i-p:i-p+len(v)], v) {
			return i - p
		}
	}
	return -1
}

// rarest returns the index of the byte of s least frequent in ordinary text and JSON,
// by a fixed ranking: rare punctuation, then upper-case letters and digits, then the
// rarer lower-case letters; the first such byte wins.
func rarest(s string) int {
	best, bestRank := 0, len(byRarity)
	for i := 0; i < len(s); i++ {
		r := strings.IndexByte(byRarity, s[i])
		if r < 0 {
			return i // not in the ranking at all: rarer still
		}
		if r < bestRank {
			best, bestRank = i, r
		}
	}
	return best
}

// byRarity ranks bytes from rarest to commonest in English prose and JSON.
const byRarity = "~^|`@$%#!+=*;&?<>[]QZXJKVWYUGBFPHMDCLNORSITEA9876" + "543210qzjxkvbpgywfmculdrhsnioate_-/.,:'(){}\" \n\t"

// shapes match credentials by their form. The ones marked in bounded must start (and,
// for the fixed-length ones, end) at a token boundary; see redactShapes.
var shapes = regexp.MustCompile(`` +
	`sk-[A-Za-z0-9_\-]{16,}` + // OpenAI (sk-, sk-proj-), DeepSeek, DashScope, Moonshot, SiliconFlow, Anthropic (sk-ant-)
	`|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{16,}=*` + // bearer tokens
	`|AKIA[0-9A-Z]{16}` + // AWS access key IDs
	`|AIza[0-9A-Za-z_\-]{35}` + // Google API keys
	`|gh[pousr]_[A-Za-z0-9]{30,}` + // GitHub tokens
	`|github_pat_[A-Za-z0-9_]{22,}` + // GitHub fine-grained tokens
	`|ms-[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}` + // ModelScope
	`|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*` + // JWTs (base64url JSON header, payload, signature)
	`|(?:xox[a-z]|xapp)(?:\.xox[a-z])?-[A-Za-z0-9\-]{10,}` + // Slack tokens (xoxb-, xoxp-, xoxe.xoxp-, xapp-, ...)
	`|[A-Za-z0-9]{32}\.[A-Za-z0-9]{16}`) // Zhipu: a 32-character id, a dot, a 16-character secret

// redactShapes replaces credential-shaped strings in b. A cheap byte scan
// (mayHoldShape) rules most text out before the regular expression runs.
//
// The "sk-" keys and the shapes of ModelScope, JWTs, Slack and Zhipu are common enough
// inside ordinary identifiers ("desk-support-ticket-1234567", "items-<uuid>", a long
// hex digest, a tool "ml__sk-learn-fit") that a match counts only when it starts a
// token: at the start, after a byte that is not a letter or digit (nor the MCP
// separator "__"; a single underscore starts one: "token_sk-…"), or after an escape (\n in JSON, %0A in a URL); the fixed-length ones must also end
// one.
func redactShapes(b []byte) []byte {
	spans := shapeSpans(b, nil)
	if spans == nil {
		return b
	}
	return replaceSpans(b, spans)
}

// shapeSpans appends to spans the [start, end) of each credential-shaped string in b
// (redactShapes), in order.
func shapeSpans(b []byte, spans [][2]int) [][2]int {
	if !mayHoldShape(b) {
		return spans
	}
	for _, m := range shapes.FindAllIndex(b, -1) {
		start, end := m[0], m[1]
		if bounded, fixed := boundedShape(b[start:end]); bounded &&
			(!startsToken(b, start) || (fixed && end < len(b) && isAlnum(b[end]))) {
			continue
		}
		spans = append(spans, [2]int{start, end})
	}
	return spans
}

// replaceSpans returns b with each of spans, sorted by start, replaced by Redacted;
// spans that overlap are replaced as one.
func replaceSpans(b []byte, spans [][2]int) []byte {
	out := make([]byte, 0, len(b))
	last := 0
	for _, s := range spans {
		switch {
		case s[1] <= last: // within the previous one
		case s[0] < last: // overlaps the previous one: it grows
			last = s[1]
		default:
			out = append(out, b[last:s[0]]...)
			out = append(out, redacted...)
			last = s[1]
		}
	}
	return append(out, b[last:]...)
}

// maxEscapeDepth bounds the levels of JSON string escapes redactEscaped decodes: a
// tool call's arguments are JSON text inside a JSON payload (two levels), a JSON
// document inside one of its strings a third. Each level costs a pass over the text,
// and a hostile text can nest escapes about as deep as it is long.
const maxEscapeDepth = 6

// redactEscaped replaces the secrets (list) and credential-shaped strings that b
// holds written with JSON string escapes ("\u0073k-…", "tok\/…"), decoded at any
// of up to maxEscapeDepth levels (a tool call's arguments, JSON text inside a JSON
// string, escape their own strings once more: "\\u0073k-…" in the payload). Each
// is replaced whole, its escapes with it, by Redacted, so a JSON document stays
// valid at every level. It returns b itself when there is nothing to replace.
//
// The escapes that can hide a secret from the search of b as it is are \uXXXX,
// \/ and, a level deeper, \\: b without any of them is returned at once.
func redactEscaped(b []byte, list []secret) []byte {
	if !mayHideEscaped(b) {
		return b
	}
	var spans [][2]int
	levels := make([][]escape, 0, maxEscapeDepth) // levels[k] maps level k+1's offsets to level k's; level 0 is b
	buf := make([]byte, 2*len(b))                 // the levels' texts, taking turns: a level is no longer than the one it decodes
	bufs := [2][]byte{buf[:0:len(b)], buf[len(b):len(b)]}
	text := b
	for depth := 0; depth < maxEscapeDepth && mayHideEscaped(text); depth++ {
		var esc []escape
		text, esc = unescape(bufs[depth%2][:0], text)
		bufs[depth%2] = text
		levels = append(levels, esc)
		found := shapeSpans(text, nil)
		for _, s := range list {
			for off := 0; ; {
				j := s.index(text[off:])
				if j < 0 {
					break
				}
				off += j
				found = append(found, [2]int{off, off + len(s.value)})
				off += len(s.value)
			}
		}
		for _, f := range found {
			start, end := f[0], f[1]
			for k := len(levels) - 1; k >= 0; k-- {
				start, end = unitStart(levels[k], start), unitEnd(levels[k], end)
			}
			spans = append(spans, [2]int{start, end})
		}
	}
	if spans == nil {
		return b
	}
	slices.SortFunc(spans, func(x, y [2]int) int { return cmp.Compare(x[0], y[0]) })
	return replaceSpans(b, spans)
}

// escape is one escape unescape decoded: n bytes at src of the encoded text became
// m bytes at dec of the decoded text.
type escape struct{ dec, src, m, n int }

// unit returns the escape of esc (in order of dec) that holds or last precedes
// decoded offset d, and false if none does.
func unit(esc []escape, d int) (escape, bool) {
	i, _ := slices.BinarySearchFunc(esc, d, func(e escape, d int) int { return cmp.Compare(e.dec, d) })
	if i < len(esc) && esc[i].dec == d {
		return esc[i], true
	}
	if i == 0 {
		return escape{}, false
	}
	return esc[i-1], true
}

// unitStart maps decoded offset d to the start, in the encoded text, of the escape
// or byte it comes from.
func unitStart(esc []escape, d int) int {
	e, ok := unit(esc, d)
	switch {
	case !ok:
		return d
	case d < e.dec+e.m:
		return e.src // within the bytes of a character decoded from \uXXXX
	}
	return e.src + e.n + d - (e.dec + e.m)
}

// unitEnd maps decoded offset d (d > 0), the end of a span, to the end, in the
// encoded text, of the escape or byte that byte d-1 comes from.
func unitEnd(esc []escape, d int) int {
	e, ok := unit(esc, d-1)
	if ok && d-1 < e.dec+e.m {
		return e.src + e.n
	}
	return unitStart(esc, d-1) + 1
}

// mayHideEscaped reports whether b holds a backslash followed by 'u', '/' or a
// backslash: an escape under which a secret may go unseen.
func mayHideEscaped(b []byte) bool {
	for i := 0; i < len(b)-1; i++ {
		j := bytes.IndexByte(b[i:len(b)-1], '\\')
		if j < 0 {
			return false
		}
		i += j
		if c := b[i+1]; c == 'u' || c == '/' || c == '\\' {
			return true
		}
		i++ // the escaped byte
	}
	return false
}

// unescape decodes the JSON string escapes in b, wherever they are (outside a JSON
// document's strings, valid JSON has no backslash); a backslash that starts no valid
// escape is kept as it is. It appends the decoded text to dec; esc lists the escapes
// decoded, in order.
func unescape(dec, b []byte) ([]byte, []escape) {
	esc := make([]escape, 0, bytes.Count(b, []byte{'\\'}))
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return append(dec, b[i:]...), esc
		}
		dec = append(dec, b[i:i+j]...)
		i += j
		c := byte(0) // what a two-byte escape stands for; 0: none
		if i+1 < len(b) {
			switch e := b[i+1]; e {
			case '"', '\\', '/':
				c = e
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'u':
				r, ok := jsonesc.Hex4(b[i+2:])
				if !ok {
					break
				}
				n := 6
				if utf16.IsSurrogate(r) {
					r2, ok := rune(0), false
					if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
						r2, ok = jsonesc.Hex4(b[i+8:])
					}
					if r = utf16.DecodeRune(r, r2); ok && r != utf8.RuneError {
						n = 12
					}
				}
				esc = append(esc, escape{dec: len(dec), src: i, m: utf8.RuneLen(r), n: n})
				dec = utf8.AppendRune(dec, r)
				i += n
				continue
			}
		}
		if c == 0 { // no escape: the backslash stays
			dec = append(dec, '\\')
			i++
			continue
		}
		esc = append(esc, escape{dec: len(dec), src: i, m: 1, n: 2})
		dec = append(dec, c)
		i += 2
	}
	return dec, esc
}

// boundedShape reports whether a match is of a shape that must start a token, and
// whether it is of fixed length (and so must end one too).
func boundedShape(m []byte) (bounded, fixed bool) {
	switch {
	case bytes.HasPrefix(m, []byte("sk-")):
		return true, false // not inside a word: "desk-support-ticket-1234567" is no key
	case bytes.HasPrefix(m, []byte("ms-")):
		return true, true
	case bytes.HasPrefix(m, []byte("eyJ")), bytes.HasPrefix(m, []byte("xox")), bytes.HasPrefix(m, []byte("xapp")):
		return true, false
	case len(m) == 49 && m[32] == '.':
		return true, true // Zhipu
	}
	return false, false
}

// startsToken reports whether a token may start at b[i].
func startsToken(b []byte, i int) bool {
	switch {
	case i == 0 || !isAlnum(b[i-1]) && !(i >= 2 && b[i-1] == '_' && b[i-2] == '_'):
		// The MCP separator "__" joins a tool's name to its server's
		// ("<server>__<tool>"), as letters and digits join words; a single
		// underscore does not ("token_sk-…" is a key).
		return true
	case i >= 2 && b[i-2] == '\\': // \n, \t, \r, \b, \f
		return true
	case i >= 3 && b[i-3] == '%' && isHex(b[i-2]) && isHex(b[i-1]): // %0A
		return true
	case i >= 6 && b[i-6] == '\\' && b[i-5] == 'u' && isHex(b[i-4]) && isHex(b[i-3]) && isHex(b[i-2]) && isHex(b[i-1]): // \u000a
		return true
	}
	return false
}

func isAlnum(c byte) bool { return c < 0x80 && alnum[c] }

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// alnum marks ASCII letters and digits.
var alnum = func() (t [128]bool) {
	for c := range t {
		t[c] = '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
	}
	return t
}()

// mayHoldShape reports whether b holds the start of any of the shapes: "sk-",
// "ms-", "xox?-" (also "xoxe.xoxp-"), "xapp-", "eyJ", "AKIA", "AIza", "gh" and one of
// p, o, u, s, r and "_", "github_pat_", "bearer" in any case, or a dot with 32
// letters or digits before it and 16 after (Zhipu). It must never report false where
// shapes matches.
//
// It is much cheaper than the regular expression, which runs only when it reports
// true (most text holds no credential): rather than look at every byte, it finds the
// few bytes every shape contains ('-', 'J', 'A', '_', 'b' or 'B', '.') with
// bytes.IndexByte, which is vectorized, and looks around each.
func mayHoldShape(b []byte) bool {
	return anyAround(b, '-', dashShape) || anyAround(b, 'J', jwtShape) || anyAround(b, 'A', googleOrAWSShape) ||
		anyAround(b, '_', gitHubShape) || anyAround(b, 'b', bearerShape) || anyAround(b, 'B', bearerShape) ||
		anyAround(b, '.', zhipuShape)
}

// anyAround reports whether shape(b, i) holds for some index i of c in b.
func anyAround(b []byte, c byte, shape func(b []byte, i int) bool) bool {
	for i := 0; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], c)
		if j < 0 {
			return false
		}
		i += j
		if shape(b, i) {
			return true
		}
	}
	return false
}

// dashShape: "sk-", "ms-", "xox?-", "xapp-" end at b[i].
func dashShape(b []byte, i int) bool {
	return i >= 2 && (b[i-2] == 's' && b[i-1] == 'k' || b[i-2] == 'm' && b[i-1] == 's') ||
		i >= 4 && (b[i-4] == 'x' && b[i-3] == 'o' && b[i-2] == 'x' || b[i-4] == 'x' && b[i-3] == 'a' && b[i-2] == 'p' && b[i-1] == 'p')
}

// jwtShape: "eyJ" ends at b[i].
func jwtShape(b []byte, i int) bool { return i >= 2 && b[i-2] == 'e' && b[i-1] == 'y' }

// googleOrAWSShape: "AKIA" or "AIza" starts at b[i].
func googleOrAWSShape(b []byte, i int) bool {
	return i+4 <= len(b) && (b[i+1] == 'K' && b[i+2] == 'I' && b[i+3] == 'A' || b[i+1] == 'I' && b[i+2] == 'z' && b[i+3] == 'a')
}

// gitHubShape: "gh?_" ends at b[i], or "github_pat_" has its first "_" there.
func gitHubShape(b []byte, i int) bool {
	if i >= 3 && b[i-3] == 'g' && b[i-2] == 'h' {
		switch b[i-1] {
		case 'p', 'o', 'u', 's', 'r':
			return true
		}
	}
	return i >= 6 && string(b[i-6:i]) == "github" && bytes.HasPrefix(b[i:], []byte("_pat_"))
}

// bearerShape: "bearer", in any case, starts at b[i].
func bearerShape(b []byte, i int) bool {
	return i+6 <= len(b) && b[i+1]|0x20 == 'e' && b[i+2]|0x20 == 'a' && b[i+3]|0x20 == 'r' && b[i+4]|0x20 == 'e' && b[i+5]|0x20 == 'r'
}

// zhipuShape: b[i] is a dot with 32 letters or digits before it and 16 after.
func zhipuShape(b []byte, i int) bool {
	return i >= 32 && i+16 < len(b) && isAlnum(b[i-1]) && isAlnum(b[i+1]) && allAlnum(b[i-32:i]) && allAlnum(b[i+1:i+17])
}

func allAlnum(b []byte) bool {
	for _, c := range b {
		if !isAlnum(c) {
			return false
		}
	}
	return true
}
