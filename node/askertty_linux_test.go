package node_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// TestAskerOnATerminalTakesNoAnswerTypedBeforeItsQuestion: on a terminal (a
// pseudo-terminal here), the user pastes "y\nreason\ny\n" at the first call's
// question: y and a reason answer it, and the last "y" was left queued. The next
// call's question took it as its answer, approving a call the user had never been
// shown. What was typed before a question shows is now discarded: the second call
// is asked, and the user's "n" rejects it. Raw: the terminal out of canonical
// mode, where one read returns the whole paste and the Asker's own buffer kept the
// "y".
func TestAskerOnATerminalTakesNoAnswerTypedBeforeItsQuestion(t *testing.T) {
	for _, raw := range []bool{false, true} {
		t.Run(map[bool]string{false: "canonical", true: "raw"}[raw], func(t *testing.T) {
			master, tty := openPTY(t)
			if raw {
				makeRaw(t, tty)
			}
			model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
				{ToolCalls: []messages.ToolCall{{ID: "call_1", Name: "send_email", Arguments: `{"to":"bob@example.com"}`}}},
				{ToolCalls: []messages.ToolCall{{ID: "call_2", Name: "send_email", Arguments: `{"to":"carol@example.com"}`}}},
				{Content: "handled"},
			}})
			if err != nil {
				t.Fatal(err)
			}
			var sent atomic.Int64
			n := nodetest.Start(t, node.Config{Model: model, Tools: []tools.Tool{emailTool{&sent}},
				Agents: []node.NamedAgent{{Name: "mailer", Tools: []string{"send_email"}, Approvals: []string{"send_email"}}}})
			const session = "asker-tty"
			if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob and carol", SessionID: session, Agent: "mailer"}); err != nil {
				t.Fatal(err)
			}
			var out syncBuffer
			a := node.NewAsker(n, "node run", session, tty, true, false, &out)
			// answer asks for p, and types typed once the question about whom shows.
			answer := func(p node.PendingApproval, whom, typed string) {
				t.Helper()
				done := make(chan error, 1)
				go func() {
					done <- a.Answer(context.Background(), &messages.ApprovalRequested{Key: p.Key, CallID: p.Call, Tool: p.Tool, Arguments: p.Arguments})
				}()
				waitFor(t, 10*time.Second, "the question about "+whom, func() bool {
					i := strings.Index(out.String(), whom)
					return i >= 0 && strings.Contains(out.String()[i:], "[y/N]")
				})
				if _, err := master.WriteString(typed); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("the answer %q to the question about %s was not taken: %q", typed, whom, out.String())
				}
			}
			first := waitApproval(t, n, session)
			answer(first, "bob@", "y\nreason\ny\n")
			var second node.PendingApproval
			waitFor(t, 30*time.Second, "the second approval", func() bool {
				second = waitApproval(t, n, session)
				return second.Key != first.Key
			})
			answer(second, "carol@", "n\nno\n")

			var got []string
			for _, e := range waitEnded(t, n, session) {
				if e.Type == messages.TypeApprovalResolved {
					p, err := e.Decode()
					if err != nil {
						t.Fatal(err)
					}
					r := p.(*messages.ApprovalResolved)
					got = append(got, fmt.Sprintf("%v %q", r.Approve, r.Reason))
				}
			}
			want := []string{`true "reason"`, `false "no"`}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("the calls were answered %s; want %s (the second asked, not answered by the \"y\" left from the first): %q", got, want, out.String())
			}
			if sent.Load() != 1 {
				t.Errorf("the tool ran %d times, want 1", sent.Load())
			}
		})
	}
}

// openPTY opens a pseudo-terminal: master is the side a terminal emulator writes
// what is typed to, tty the terminal a program reads.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	var num uint32
	control(t, master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil { // unlockpt
			return err
		}
		num, err = unix.IoctlGetUint32(fd, unix.TIOCGPTN) // ptsname
		return err
	})
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", num), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

// makeRaw takes tty out of canonical mode: a read returns what was typed, lines
// and all, as soon as there is some.
func makeRaw(t *testing.T, tty *os.File) {
	t.Helper()
	control(t, tty, func(fd int) error {
		tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return err
		}
		tio.Lflag &^= unix.ICANON | unix.ECHO
		tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
		return unix.IoctlSetTermios(fd, unix.TCSETS, tio)
	})
}

func control(t *testing.T, f *os.File, do func(fd int) error) {
	t.Helper()
	c, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var derr error
	if err := c.Control(func(fd uintptr) { derr = do(int(fd)) }); err != nil {
		t.Fatal(err)
	}
	if derr != nil {
		t.Fatal(derr)
	}
}
