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
	"unsafe"
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
// there is nothing to replace, and never modifies b.
func (r *Redactor) Bytes(b []byte) []byte {
	out := b
	for _, s := range r.list() {
		if s.in(out) {
			out = bytes.ReplaceAll(out, s.value, redacted)
		}
	}
	return redactShapes(out)
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
func (s secret) in(b []byte) bool {
	v, p := s.value, s.anchor
	last := len(b) - len(v) + p // the last index the anchor can have
	for i := p; i <= last; i++ {
		j := bytes.IndexByte(b[i:last+1], v[p])
		if j < 0 {
			return false
		}
		i += j
		if bytes.Equal(b[i-p:i-p+len(v)], v) {
			return true
		}
	}
	return false
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
// hex digest) that a match counts only
// when it starts a token: at the start, after a byte that is not a letter or digit,
// or after an escape (\n in JSON, %0A in a URL); the fixed-length ones must also end
// one.
func redactShapes(b []byte) []byte {
	if !mayHoldShape(b) {
		return b
	}
	matches := shapes.FindAllIndex(b, -1)
	if matches == nil {
		return b
	}
	var out []byte
	last := 0
	for _, m := range matches {
		start, end := m[0], m[1]
		if bounded, fixed := boundedShape(b[start:end]); bounded &&
			(!startsToken(b, start) || (fixed && end < len(b) && isAlnum(b[end]))) {
			continue
		}
		out = append(out, b[last:start]...)
		out = append(out, redacted...)
		last = end
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
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
	case i == 0 || !isAlnum(b[i-1]):
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
