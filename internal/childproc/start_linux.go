//go:build linux

package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// DeathSignal is the signal a child started by Start gets when the node dies:
// SIGTERM, which a wrapper (a shell, npx, uv run) passes on to the server it
// started and a server may clean up on. A child that ignores it survives.
const DeathSignal = syscall.SIGTERM

// Start starts cmd with DeathSignal as its parent-death signal.
//
// The kernel sends that signal when the thread that forked the child exits, not
// the process (prctl(2); golang.org/issue/27505). The Go runtime ends a thread
// when a goroutine that locked it returns without unlocking it, so a child forked
// from any goroutine could be signalled while the node runs on. Every child is
// therefore forked on one thread kept for it: a goroutine locked to its thread that
// never returns. That thread, and the goroutine serving it, are process-wide state
// by nature: they must live as long as the process, like the children they start.
func Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = DeathSignal
	starterOnce.Do(func() {
		starts = make(chan start)
		go startOnLockedThread(starts)
	})
	s := start{cmd: cmd, done: make(chan error, 1)}
	starts <- s
	return <-s.done
}

type start struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	starterOnce sync.Once
	starts      chan start
)

// startOnLockedThread starts each cmd it receives on its own thread, which it
// never unlocks and which therefore never exits before the process.
func startOnLockedThread(starts <-chan start) {
	runtime.LockOSThread()
	for s := range starts {
		s.done <- s.cmd.Start()
	}
}
