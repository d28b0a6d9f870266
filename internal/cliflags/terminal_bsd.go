//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package cliflags

import "golang.org/x/sys/unix"

// ioctlGetTermios is the request that reads a terminal's attributes.
const ioctlGetTermios = unix.TIOCGETA
