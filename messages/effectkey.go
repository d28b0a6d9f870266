package messages

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// EffectKey is the idempotency key of an effect: the session that requested it and
// the seq of the event that recorded the request. It is unique per session, and the
// same whenever a fold of the session's events reaches the same decision, so a call
// issued again (after a crash, a restart or a move to another node) carries the same
// key, and whoever performs it can perform it once per key.
//
// Its text form, "<session>/<seq>", is what events (ModelRequested.Key,
// ToolCallRequested.Key and their answers), commands and tools (tools.Call.Key) carry;
// String and ParseEffectKey convert, and ParseEffectKey(k.String()) == k for every
// valid key. The zero EffectKey means "no key".
type EffectKey struct {
	SessionID string
	Seq       uint64
}

// ErrBadEffectKey is wrapped by every error of ParseEffectKey.
var ErrBadEffectKey = errors.New("messages: malformed effect key")

// maxEffectKeyLen bounds the text of a key: session IDs are at most 128 characters,
// and a seq at most 20 digits; anything longer is not a key this runtime made.
const maxEffectKeyLen = 512

// String returns the key's text form, "<session>/<seq>", or "" for the zero key.
func (k EffectKey) String() string {
	if k.IsZero() {
		return ""
	}
	return k.SessionID + "/" + strconv.FormatUint(k.Seq, 10)
}

// Outward returns the name of the effect of key k for a service outside the log
// (an A2A agent's messageId, an MCP server's idempotency key): "troupe-" and 32
// hex digits, a digest of k, the task its request belongs to (the event's
// CorrelationID) and the time the session recorded that request (its TS, Unix
// microseconds). k alone is unique only within one event log: two deployments,
// or one node whose data directory was reset, reach the same session name and
// seq, and a service that dedupes by k would answer the second with the first's
// result. The task and time come from the request's event as the log holds it,
// so the name is the same whenever the call is performed again (after a crash,
// a restart, on the session's next owner), and differs in another log. "" for
// the zero key.
func (k EffectKey) Outward(task string, requestedUS int64) string {
	if k.IsZero() {
		return ""
	}
	// The digest of k.String() + "\x00" + task + "\x00" + the time in decimal,
	// written into a buffer on the stack: the name is made for every effect a
	// session issues, and allocates only the string it returns.
	var buf [192]byte
	b := append(buf[:0], k.SessionID...)
	b = append(b, '/')
	b = strconv.AppendUint(b, k.Seq, 10)
	b = append(b, 0)
	b = append(b, task...)
	b = append(b, 0)
	b = strconv.AppendInt(b, requestedUS, 10)
	sum := sha256.Sum256(b)
	var name [len(outwardPrefix) + 32]byte
	copy(name[:], outwardPrefix)
	hex.Encode(name[len(outwardPrefix):], sum[:16])
	return string(name[:])
}

// outwardPrefix begins every name of EffectKey.Outward.
const outwardPrefix = "troupe-"

// IsZero reports whether k is the zero key.
func (k EffectKey) IsZero() bool { return k == EffectKey{} }

// Valid reports whether k is a key ParseEffectKey would return: a session ID of
// printable ASCII characters other than '/', and a seq of at least 1.
func (k EffectKey) Valid() bool {
	p, err := ParseEffectKey(k.String())
	return err == nil && p == k
}

// ParseEffectKey reads the text form of a key: a non-empty session ID of printable
// ASCII characters other than '/', a '/', and the seq in canonical decimal (1 or more,
// no sign, no leading zero, at most 2^64-1).
func ParseEffectKey(s string) (EffectKey, error) {
	if len(s) > maxEffectKeyLen {
		return EffectKey{}, fmt.Errorf("%w: %d bytes long, at most %d", ErrBadEffectKey, len(s), maxEffectKeyLen)
	}
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return EffectKey{}, noSlashError{s}
	}
	session, seqText := s[:i], s[i+1:]
	if session == "" {
		return EffectKey{}, fmt.Errorf("%w: %q has no session", ErrBadEffectKey, s)
	}
	for j := 0; j < len(session); j++ {
		if c := session[j]; c <= ' ' || c >= 0x7f || c == '/' {
			return EffectKey{}, fmt.Errorf("%w: %q: session has the byte %q (only printable ASCII but '/')", ErrBadEffectKey, s, c)
		}
	}
	if seqText == "" || seqText[0] < '1' || seqText[0] > '9' {
		return EffectKey{}, fmt.Errorf("%w: %q: seq must be a decimal number from 1, without sign or leading zero", ErrBadEffectKey, s)
	}
	for j := 0; j < len(seqText); j++ {
		if c := seqText[j]; c < '0' || c > '9' {
			return EffectKey{}, fmt.Errorf("%w: %q: seq must be a decimal number from 1, without sign or leading zero", ErrBadEffectKey, s)
		}
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		return EffectKey{}, fmt.Errorf("%w: %q: seq out of range", ErrBadEffectKey, s)
	}
	return EffectKey{SessionID: session, Seq: seq}, nil
}

// MarshalText encodes the key as its text form.
func (k EffectKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText decodes the text form; "" gives the zero key.
func (k *EffectKey) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*k = EffectKey{}
		return nil
	}
	p, err := ParseEffectKey(string(b))
	if err != nil {
		return err
	}
	*k = p
	return nil
}

// noSlashError is ParseEffectKey's error for a text without a '/': the common
// case of an ID that is no key (a UUID: the ingress asks of every task's ID), so
// its text is made only when it is read, not for each ID checked.
type noSlashError struct{ s string }

func (e noSlashError) Error() string {
	return fmt.Sprintf("%s: %q has no '/' between session and seq", ErrBadEffectKey, e.s)
}

func (e noSlashError) Unwrap() error { return ErrBadEffectKey }
