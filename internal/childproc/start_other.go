//go:build !linux

package childproc

import "os/exec"

// Start starts cmd: without a parent-death signal on this system, a child that
// outlives a killed node ends when it notices its stdin close.
func Start(cmd *exec.Cmd) error { return cmd.Start() }
