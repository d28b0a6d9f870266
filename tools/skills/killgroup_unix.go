//go:build unix

package skills

import (
	"os/exec"
	"syscall"
)

// nonBlock opens files without blocking, so that opening a named pipe returns at once.
const nonBlock = syscall.O_NONBLOCK

// killGroup runs cmd in a process group of its own and makes its cancellation kill
// the whole group, so that a script's children do not outlive its timeout.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// stopGroup kills what is left of the process group of cmd, started with
// killGroup, once its script has ended: the children it left behind.
func stopGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
