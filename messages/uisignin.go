package messages

// The events of a dashboard sign-in (package node: POST /v1/auth/login). Each
// sign-in is a stream of its own, "ui/signin/<hex SHA-256 of the session cookie's
// ID>" (eventlog.UISignInStreamPrefix: not a session, no task runs there), so that
// it outlives the node that made it and every node over the same log honours it.
// Neither the cookie's value nor the token signed in with is in them: a node given
// the cookie finds the stream by the cookie's hash and which of its tokens signed in
// by TokenMAC.

// UISignedIn records a dashboard sign-in.
type UISignedIn struct {
	// TokenMAC is the HMAC-SHA256, keyed by the session cookie's ID, of the SHA-256
	// of the token signed in with, in hex: it names the token to whoever holds the
	// cookie, and nothing to a reader of the log.
	TokenMAC string `json:"token_mac"`
	// CSRFHash is the SHA-256 of the sign-in's CSRF value, in hex.
	CSRFHash string `json:"csrf_hash"`
	// ExpiresUS is when the sign-in ends, in Unix microseconds.
	ExpiresUS int64 `json:"expires_us"`
}

// UISignedOut records that a dashboard sign-in ended before it expired.
type UISignedOut struct {
	// Reason is "logout" (POST /v1/auth/logout) or "replaced" (a new login from
	// the same browser).
	Reason string `json:"reason"`
}

// MessageType implements Payload.
func (*UISignedIn) MessageType() Type { return TypeUISignedIn }

// MessageType implements Payload.
func (*UISignedOut) MessageType() Type { return TypeUISignedOut }
