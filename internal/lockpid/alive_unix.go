//go:build unix

package lockpid

import (
	"errors"
	"syscall"
)

// alive reports whether a process pid exists in this pid namespace.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
