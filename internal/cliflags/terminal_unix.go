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

// FlushInput discards what was typed on the terminal f and not yet read, so that
// the next line read from it is one typed after the call.
func FlushInput(f *os.File) error {
	c, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := c.Control(func(fd uintptr) { ferr = flushInput(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
