package main

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/internal/smalldisk"
)

// TestKillNineOnAFullDiskLosesNothing: node serve runs tasks on a data directory
// whose disk fills up mid-task; a task sent then is refused (503, nothing
// recorded); the node is killed with SIGKILL while its sessions retry their
// writes, and started again once space is freed: every task it accepted completes,
// no model or tool call whose result was recorded is made again, the seqs have no
// gap and SQLite finds the database sound.
func TestKillNineOnAFullDiskLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	disk := smalldisk.Mount(t)
	dir := t.TempDir() // the script and the records, off the small disk
	script, records, modelLog := threeRecordsScript(t, dir)
	const sessions = 6
	slow := []string{"TROUPE_MODEL_DELAY=200ms"}

	first := startChildWith(t, disk, script, records, modelLog, slow)
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = first.post(t, fmt.Sprintf(`{"input":"record three things","session_id":"full-%02d"}`, i))
	}
	// Fill the disk once every session made its first model call: their answers
	// then cannot be recorded.
	deadline := time.Now().Add(20 * time.Second)
	for len(countLines(t, modelLog, "")) < sessions {
		if time.Now().After(deadline) {
			t.Fatalf("the model was not called:\n%s", first.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	free := smalldisk.Fill(t, disk)
	resp, err := http.Post("http://"+first.addr+"/v1/tasks", "application/json", strings.NewReader(`{"input":"record three things","session_id":"refused"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "disk is full") {
		t.Errorf("a task on a full disk: %d %s; want 503 saying the disk is full", resp.StatusCode, body)
	}
	for !strings.Contains(first.stderr.String(), "database or disk is full") {
		if time.Now().After(deadline) {
			t.Fatalf("no write failed on the full disk:\n%s", first.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.kill9(t)
	free()

	lg := openDataReadOnly(t, disk)
	defer lg.Close()
	modelDone, toolDone, unfinished := recordedIn(t, lg, ids)
	if unfinished == 0 {
		t.Fatal("every session finished before the disk filled; the test proves nothing")
	}
	second := startChildWith(t, disk, script, records, modelLog, nil)
	defer func() {
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		_ = second.cmd.Wait()
	}()
	waitCompleted(t, second, ids, "all recorded", 30*time.Second)
	checkAfterKill(t, records, modelLog, modelDone, toolDone, 3*sessions)
	assertGapFree(t, lg, ids)
	if evs, err := lg.Read(t.Context(), "refused", 1); err != nil || len(evs) != 0 {
		t.Errorf("the refused task's session holds %d events (%v)", len(evs), err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(disk, "data", "events.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ok string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Errorf("integrity_check: %q %v", ok, err)
	}
}
