package mcp

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// A session's run_task call is remembered however many calls of other tools the
// client makes after it: were it pushed out, the call sent again (after a cut)
// would run its task a second time.
func TestSessionStateKeepsTaskCallsPastToolCalls(t *testing.T) {
	var st sessionState
	call := func(seq uint64, p *messages.MCPCallStarted) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq = "mcp/session/s", seq
		st.apply(e)
	}
	call(1, &messages.MCPCallStarted{RequestID: "1", Stream: "run", TaskSession: "s-task", TaskID: "t1"})
	for i := range 3 * maxCalls {
		call(uint64(i+2), &messages.MCPCallStarted{RequestID: fmt.Sprint(i + 2), Stream: fmt.Sprint("tool", i), ArgsHash: "h"})
	}
	if c, ok := st.call("1", ""); !ok || c.TaskID != "t1" {
		t.Fatalf("the run_task call is gone after %d calls of other tools", 3*maxCalls)
	}
	if _, ok := st.call(fmt.Sprint(3*maxCalls+1), ""); !ok {
		t.Error("the latest tool call is gone")
	}
	if len(st.calls) != 1+maxToolCalls {
		t.Errorf("%d calls remembered; want the task's and the latest %d others", len(st.calls), maxToolCalls)
	}
	for i := range maxCalls + 5 {
		call(uint64(10000+i), &messages.MCPCallStarted{RequestID: fmt.Sprint("r", i), Stream: fmt.Sprint("run", i), TaskSession: fmt.Sprint("s", i)})
	}
	if _, ok := st.call("1", ""); ok {
		t.Error("the oldest run_task call outlived maxCalls newer ones")
	}
	if _, ok := st.call(fmt.Sprint("r", maxCalls+4), ""); !ok {
		t.Error("the latest run_task call is gone")
	}
}
