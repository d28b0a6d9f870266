package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/troupe-run/troupe/internal/cliflags"
	"github.com/troupe-run/troupe/messages"
)

// Asker answers the approvals that the session a command line runs asks for (a
// tool declared "approval: required" in the agents file): node run's, replay
// fork's.
//
//   - with a terminal (in is one), it prints the tool and its arguments and asks
//     "approve? [y/N]", then a reason (optional); the answer is recorded "by
//     terminal";
//   - without one, on a cluster, it waits: the cluster's nodes serve, so an answer
//     comes over HTTP or Kafka (or the approval's timeout rejects the call);
//   - without one, on an embedded node, nobody else can answer (the command serves
//     no API), so it rejects the call at once, saying why, and the model reads that.
type Asker struct {
	n        *Node
	program  string // the command, for the rejection's reason: "node run"
	session  string
	terminal bool
	cluster  bool
	in       *bufio.Reader
	tty      *os.File      // in, when it is a terminal: its input typed ahead is discarded
	reading  chan lineRead // the read under way, whose prompt went unanswered (ctx ended); nil when none is
	ended    bool          // in ended
	out      io.Writer
}

// lineRead is a line read from an Asker's in: ok is false at its end, and end
// says whether in ended after the line.
type lineRead struct {
	line    string
	ok, end bool
}

// NewAsker returns the asker of program (its name, "node run") for session on
// n: terminal says whether in is a terminal, cluster whether n serves a
// cluster; it prints to out.
//
// An answer on a terminal is one typed after its question was shown: a line typed
// ahead while the agent worked, or pasted past the reason, would otherwise answer
// the next call, which the user never saw. So when in is a terminal file (stdin
// on a tty), what was typed and not yet read is discarded before each y/N
// question; in is read only while a question waits. Another reader given as the
// terminal (a script of answers) is read in order, every line an answer.
func NewAsker(n *Node, program, session string, in io.Reader, terminal, cluster bool, out io.Writer) *Asker {
	a := &Asker{n: n, program: program, session: session, terminal: terminal, cluster: cluster, out: out}
	if terminal {
		a.in = bufio.NewReader(in)
		if f, ok := in.(*os.File); ok && cliflags.IsTerminal(f) {
			a.tty = f
		}
	}
	return a
}

// Follow prints the session's live events (PrintStep) until tasks tasks finished,
// answering each approval the session asks for; it returns the exit code (1 if a
// task failed) or an error when ctx ends or the feed closes first. Approvals
// asked for before the feed began are Answer's.
func (a *Asker) Follow(ctx context.Context, live <-chan messages.Envelope, tasks int) (int, error) {
	return FollowEach(ctx, a.out, live, tasks, func(e messages.Envelope) error {
		if e.Type != messages.TypeApprovalRequested {
			return nil
		}
		p, err := e.Decode()
		if err != nil {
			return err
		}
		return a.Answer(ctx, p.(*messages.ApprovalRequested))
	})
}

// Answer answers one approval, as Asker's doc says.
func (a *Asker) Answer(ctx context.Context, r *messages.ApprovalRequested) error {
	if !a.terminal {
		if a.cluster {
			fmt.Fprintf(a.out, "  waiting for an answer: POST /v1/sessions/%s/approvals/%s on a node of the cluster, or a %s message on %s\n",
				url.PathEscape(a.session), url.PathEscape(approvalRef(r)), messages.TypeApprovalAnswer, messages.TopicTasks)
			return nil
		}
		why := a.program + " has no terminal to ask on and serves no API (run the task on node serve to answer it over HTTP or Kafka)"
		fmt.Fprintf(a.out, "  no terminal: the call of %s is rejected: %s\n", r.Tool, why)
		return a.send(ctx, r, false, why, messages.ApprovedByAPI)
	}
	a.discardTypedAhead()
	fmt.Fprintf(a.out, "  approve the call of %s with %s? [y/N] ", EscapeControls(r.Tool), EscapeControls(r.Arguments))
	yes, ok, err := a.readLine(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return a.send(ctx, r, false, "the terminal closed before anyone answered", messages.ApprovedByTerminal)
	}
	approve := strings.EqualFold(strings.TrimSpace(yes), "y") || strings.EqualFold(strings.TrimSpace(yes), "yes")
	fmt.Fprint(a.out, "  reason (optional): ")
	reason, _, err := a.readLine(ctx)
	if err != nil {
		return err
	}
	reason, changed := terminalReason(strings.TrimSpace(reason))
	if changed {
		fmt.Fprintf(a.out, "  (the reason is recorded as UTF-8, bytes that are not shown as U+FFFD, and cut to %d bytes)\n", maxApprovalReason)
	}
	return a.send(ctx, r, approve, reason, messages.ApprovedByTerminal)
}

// terminalReason makes a reason typed on a terminal one that an answer may carry
// (AdmitApproval): bytes that are not UTF-8 (a terminal in another encoding) read
// as U+FFFD, and a line past maxApprovalReason cut between characters. The
// terminal is asked once: an answer refused for its reason would leave the call
// waiting with nobody to answer it (node run serves no API). changed says whether
// the reason was changed.
func terminalReason(reason string) (string, bool) {
	valid := strings.ToValidUTF8(reason, "\uFFFD")
	if len(valid) > maxApprovalReason {
		valid = cutWithNote(valid, maxApprovalReason, "…")
	}
	return valid, valid != reason
}

// maxTerminalLine bounds what of a line of the terminal an Asker keeps (the rest
// is read and dropped): more than a reason may carry, which terminalReason cuts.
const maxTerminalLine = 64 << 10

// readTerminalLine reads a line of r, without its end ("\n" or "\r\n"), and
// keeps at most max bytes of it, however long it is: a bufio.Scanner stopped at a
// line over its buffer (64 KiB: a log pasted as a reason), and the terminal's
// lines ended there, every later call rejected as if it closed. The error is
// r's, io.EOF at its end (with the last line, if it had no end).
func readTerminalLine(r *bufio.Reader, max int) (string, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if room := max - len(line); room > 0 {
			line = append(line, frag[:min(len(frag), room)]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		return string(line), err
	}
}

// discardTypedAhead drops, on a terminal, what was typed before the question
// about to be shown: the terminal's input not yet read (tcflush), and what this
// Asker read of it and kept (its buffer's rest; a line read for a question whose
// answer went unread). Called before the question is printed, so that what is
// typed once it shows is kept.
func (a *Asker) discardTypedAhead() {
	if a.tty == nil || a.ended {
		return
	}
	_ = cliflags.FlushInput(a.tty) // on failure, as before: lines are read in order
	if a.reading != nil {
		select {
		case r := <-a.reading:
			a.reading = nil
			if r.end {
				a.ended = true
				return
			}
		default:
			// Still reading: what it reads now is typed from here on.
			return
		}
	}
	_, _ = a.in.Discard(a.in.Buffered())
}

// readLine reads a line of the terminal; ok is false at its end. in is read while
// a question waits only (NewAsker), in a goroutine so that ctx ends the wait; a
// read that ctx left is the next call's.
func (a *Asker) readLine(ctx context.Context) (line string, ok bool, err error) {
	if a.ended {
		return "", false, nil
	}
	if a.reading == nil {
		reading := make(chan lineRead, 1)
		go func() {
			line, err := readTerminalLine(a.in, maxTerminalLine)
			reading <- lineRead{line: line, ok: err == nil || (errors.Is(err, io.EOF) && line != ""), end: err != nil}
		}()
		a.reading = reading
	}
	select {
	case <-ctx.Done():
		return "", false, ctx.Err()
	case r := <-a.reading:
		a.reading = nil
		a.ended = r.end
		return r.line, r.ok, nil
	}
}

// approvalRef names a waiting call in its answer's URL: its key, unique in the
// session. Its call ID may name another call too (models reuse IDs from reply to
// reply, and an answer by an ID answered the same way before is refused), or be
// "." or "..", which a client takes for a dot segment of the path.
func approvalRef(r *messages.ApprovalRequested) string { return r.Key }

// send records an answer. One the session no longer waits for (the approval
// expired, or a node of the cluster was answered first) is reported, not fatal.
func (a *Asker) send(ctx context.Context, r *messages.ApprovalRequested, approve bool, reason, by string) error {
	err := a.n.Approve(ctx, a.session, r.Key, approve, reason, by)
	if err != nil {
		fmt.Fprintf(a.out, "  the answer was not recorded: %v\n", err)
	}
	return nil
}
