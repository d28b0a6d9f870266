package actors

import (
	"testing"
	"unsafe"
)

// Every new session allocates a SessionState: it stays within the 1536-byte size
// class of Go's allocator (the next is 1792), which a few more bytes of fields
// would leave.
func TestSessionStateFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(SessionState{}); n > 1536 {
		t.Fatalf("SessionState is %d bytes, past the 1536-byte size class", n)
	}
}
