package actors

import (
	"bytes"
	"regexp"
)

// Redacted replaces a secret in recorded events.
const Redacted = "[REDACTED]"

// SecretRedactor removes secrets from event payloads before a session applies,
// records or publishes them: the configured secrets verbatim, and strings shaped like
// API keys and bearer tokens. It works on the JSON bytes of a payload; the
// replacement contains no character JSON would escape, so the payload stays valid.
type SecretRedactor struct {
	secrets [][]byte
}

// tokenShapes match credentials by their form: OpenAI-style keys, bearer tokens,
// AWS access key IDs, GitHub tokens.
var tokenShapes = regexp.MustCompile(`sk-[A-Za-z0-9_\-]{16,}|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{16,}=*|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}`)

// NewSecretRedactor returns a redactor for these secrets (those shorter than 8 bytes
// are ignored: too likely to match ordinary text).
func NewSecretRedactor(secrets ...string) *SecretRedactor {
	r := &SecretRedactor{}
	for _, s := range secrets {
		if len(s) >= 8 {
			r.secrets = append(r.secrets, []byte(s))
		}
	}
	return r
}

// Redact returns payload with every secret replaced by Redacted. It returns payload
// itself when there is nothing to replace.
func (r *SecretRedactor) Redact(payload []byte) []byte {
	if r == nil {
		return payload
	}
	out := payload
	for _, s := range r.secrets {
		if bytes.Contains(out, s) {
			out = bytes.ReplaceAll(out, s, []byte(Redacted))
		}
	}
	if mayHoldToken(out) && tokenShapes.Match(out) {
		out = tokenShapes.ReplaceAll(out, []byte(Redacted))
	}
	return out
}

// mayHoldToken reports whether b holds the start of any of tokenShapes' forms ("sk-",
// "bearer" in any case, "AKIA", "gh" and one of p, o, u, s, r and "_"). It is a scan
// of the bytes, much cheaper than the regular expression, which runs only when it
// reports true: most payloads hold no token.
func mayHoldToken(b []byte) bool {
	for i := 0; i+3 <= len(b); i++ {
		switch c := b[i]; {
		case c == 's' && b[i+1] == 'k' && b[i+2] == '-':
			return true
		case c == 'A' && i+4 <= len(b) && b[i+1] == 'K' && b[i+2] == 'I' && b[i+3] == 'A':
			return true
		case c == 'g' && b[i+1] == 'h' && b[i+2] != 0 && i+4 <= len(b) && bytes.IndexByte([]byte("pousr"), b[i+2]) >= 0 && b[i+3] == '_':
			return true
		case c|0x20 == 'b' && i+6 <= len(b) && b[i+1]|0x20 == 'e' && b[i+2]|0x20 == 'a' && b[i+3]|0x20 == 'r' && b[i+4]|0x20 == 'e' && b[i+5]|0x20 == 'r':
			return true
		}
	}
	return false
}
