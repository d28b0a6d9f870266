package node

import (
	"testing"
	"unsafe"
)

// Every Watch allocates a watcher (a task's waiter has one): its flags share one
// word, and it stays within the 128-byte size class of Go's allocator (the next is
// 144), which a flag placed apart from the others would leave.
func TestWatcherFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(watcher{}); n > 128 {
		t.Fatalf("watcher is %d bytes, past the 128-byte size class", n)
	}
}
