//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package cliflags

import (
	"os"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether f is a terminal: it has terminal attributes (a
// character device such as /dev/null has none).
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}
