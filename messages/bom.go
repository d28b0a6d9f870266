package messages

import "bytes"

// byteOrderMark is the UTF-8 byte order mark (U+FEFF) that editors and Windows
// tools write before a file's text.
var byteOrderMark = []byte("\ufeff")

// TrimByteOrderMark is b without a leading UTF-8 byte order mark: the one rule
// by which every reader of JSON a user sends (a task or a command on the tasks
// topic, the bodies of the HTTP API, A2A's and MCP's JSON-RPC, a memory or a
// knowledge upload, a configuration or agents file, an export that replay
// import reads) skips the mark that a file saved by some editors begins with.
// RFC 8259 lets a reader skip it; encoding/json does not, and refused the JSON
// as "invalid character 'ï'", a character its sender never wrote. The mark is no
// part of the content: a body with it and the same body without it are one
// request (an Idempotency-Key's task is keyed by what is left).
func TrimByteOrderMark(b []byte) []byte {
	return bytes.TrimPrefix(b, byteOrderMark)
}
