package main

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// A node stopped with SIGTERM mid-work (a rolling restart) lets the model and tool
// calls in flight answer and records them before it exits: started again on the
// same directory, it finishes every session without making any call a second
// time. A kill -9 cannot avoid issuing again what had no answer
// (TestKillNineMidSessionResumesWithoutRepeatingEffects); a graceful stop can.
// Before, the stop cut the calls in flight, and the restarted node made them again.
func TestSigtermMidSessionRepeatsNoCall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops node processes")
	}
	dir := t.TempDir()
	script, records, modelLog := threeRecordsScript(t, dir)
	const sessions = 12

	first := startChild(t, dir, script, records, modelLog)
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = first.post(t, fmt.Sprintf(`{"input":"record three things","session_id":"term-%02d"}`, i))
	}
	// Stop once the work is well under way: every session's first tool calls ran
	// and some second-step calls are running (each takes 150 ms).
	deadline := time.Now().Add(20 * time.Second)
	for len(countLines(t, records, "effect ")) < 2*sessions+sessions/2 {
		if time.Now().After(deadline) {
			t.Fatalf("tools never ran:\n%s", first.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.sigterm(t, time.Minute)

	lg := openDataReadOnly(t, dir)
	defer lg.Close()
	modelDone, toolDone, unfinished := recordedIn(t, lg, ids)
	if unfinished == 0 {
		t.Fatal("the stop landed after every session had finished; the test proves nothing")
	}
	t.Logf("stopped with %d of %d sessions unfinished; %d model answers and %d tool results recorded", unfinished, sessions, len(modelDone), len(toolDone))

	second := startChild(t, dir, script, records, modelLog)
	defer func() {
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		_ = second.cmd.Wait()
	}()
	waitCompleted(t, second, ids, "all recorded", 30*time.Second)

	r := checkAfterKill(t, records, modelLog, modelDone, toolDone, 3*sessions)
	if r.reissuedModel > 0 || r.reissuedTool > 0 {
		t.Errorf("after a graceful stop, %d model calls and %d tool calls were made again; want none", r.reissuedModel, r.reissuedTool)
	}
	assertGapFree(t, lg, ids)
}
