//go:build unix

package tools

import "syscall"

// nonBlock opens files without blocking, so that opening a named pipe returns at once.
const nonBlock = syscall.O_NONBLOCK
