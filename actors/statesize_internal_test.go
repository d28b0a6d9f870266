package actors

import (
	"testing"
	"unsafe"
)

// Every new session allocates a SessionState: it stays within the 1024-byte size
// class of Go's allocator (the next is 1152), which a few more bytes of fields
// would leave. Its agents are shared, not copied into it.
func TestSessionStateFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(SessionState{}); n > 1024 {
		t.Fatalf("SessionState is %d bytes, past the 1024-byte size class", n)
	}
}
