//go:build unix

package sqlite_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// wantLocked checks that err wraps ErrLocked and says every one of want.
func wantLocked(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, eventlog.ErrLocked) {
		t.Fatalf("%s = %v, want ErrLocked", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not say %q", what, err, w)
		}
	}
}

// TestSharedLockInProcess: Logs opened with Shared coexist on one directory and see
// each other's commits; one opened without Shared is refused while they hold it, and
// refuses them while it holds it. flock conflicts within one process as across
// processes (see TestSharedLockAcrossProcesses).
func TestSharedLockInProcess(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	a := open(t, sqlite.Config{Dir: dir, Shared: true})
	b := open(t, sqlite.Config{Dir: dir, Shared: true})
	appendSeqs(t, a, "s", 1, 3)
	appendSeqs(t, b, "s", 4, 5)
	wantEvents(t, a, "s", 5)
	wantEvents(t, b, "s", 5)

	_, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	wantLocked(t, "Open without Shared beside shared Logs", err, dir, "Config.Shared", "stop the other nodes")
	openReadOnly(t, dir) // a read-only Log takes no lock at all

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = sqlite.Open(ctx, sqlite.Config{Dir: dir})
	wantLocked(t, "Open without Shared beside one shared Log", err, dir, "Config.Shared")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	x := open(t, sqlite.Config{Dir: dir})
	_, err = sqlite.Open(ctx, sqlite.Config{Dir: dir, Shared: true})
	wantLocked(t, "shared Open beside a Log opened without Shared", err,
		dir, fmt.Sprintf("pid %d", os.Getpid()), "without Config.Shared", "stop the other node")
	wantEvents(t, x, "s", 5) // the refused Open left it working
	appendSeqs(t, x, "s", 6, 6)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, open(t, sqlite.Config{Dir: dir, Shared: true}), "s", 6)
}

// TestSharedOpenFresh opens one fresh directory with Shared from several goroutines
// at once: each Open sets WAL mode and migrates under SQLite's write lock, so all of
// them succeed and the schema is created once.
func TestSharedOpenFresh(t *testing.T) {
	dir := t.TempDir()
	const openers = 8
	var (
		wg   sync.WaitGroup
		logs = make([]*sqlite.Log, openers)
		errs = make([]error, openers)
	)
	for i := range openers {
		wg.Go(func() { logs[i], errs[i] = sqlite.Open(testCtx(t), sqlite.Config{Dir: dir, Shared: true}) })
	}
	waitGroup(t, &wg, time.Minute)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d of %d at once: %v", i, openers, err)
		}
		t.Cleanup(func() { _ = logs[i].Close() })
	}
	for i, l := range logs {
		appendSeqs(t, l, "s", uint64(i+1), uint64(i+1))
	}
	wantEvents(t, logs[0], "s", openers)
	var v int
	if err := rawDB(t, dir).QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != sqlite.SchemaVersion {
		t.Fatalf("user_version = %d, %v; want %d", v, err, sqlite.SchemaVersion)
	}
}

// TestSharedLockAcrossProcesses runs nodes opened with Shared as child processes on
// one data directory: they coexist with each other and with this process's shared
// Log, which reads what they committed, while an Open without Shared is refused.
// The children are killed with SIGKILL: the kernel releases their locks, and what
// they appended is durable. An Open without Shared then succeeds, and while it holds
// the directory a shared node in another process is refused, naming its pid.
func TestSharedLockAcrossProcesses(t *testing.T) {
	if os.Getenv(helperEnv) != "" || os.Getenv(raceEnv) != "" {
		t.Skip("running as a helper process")
	}
	const events = 20
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var helpers []*exec.Cmd
	for _, session := range []string{"a", "b"} {
		cmd, err := spawnHelper(ctx, t, dir, helper{events: events, session: session, shared: true})
		if err != nil {
			t.Fatalf("shared node %s beside other shared nodes: %v", session, err)
		}
		helpers = append(helpers, cmd)
	}
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: dir, Shared: true})
	if err != nil {
		t.Fatalf("shared Open beside two shared nodes in other processes: %v", err)
	}
	defer l.Close()
	for _, session := range []string{"a", "b"} {
		if got, err := l.Read(ctx, session, 0); err != nil || len(got) != events {
			t.Fatalf("Read of session %s, written by another process = %d events, %v; want %d", session, len(got), err, events)
		}
	}
	appendSeqs(t, l, "parent", 1, 3)
	_, err = sqlite.Open(ctx, sqlite.Config{Dir: dir})
	wantLocked(t, "Open without Shared beside shared nodes", err, dir, "Config.Shared", "stop the other nodes")

	for _, cmd := range helpers {
		if err := cmd.Process.Kill(); err != nil { // SIGKILL: no Close
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
	_, err = sqlite.Open(ctx, sqlite.Config{Dir: dir})
	wantLocked(t, "Open without Shared beside this process's shared Log", err, dir, "Config.Shared")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	x := open(t, sqlite.Config{Dir: dir})
	for session, n := range map[string]int{"a": events, "b": events, "parent": 3} {
		if got, err := x.Read(ctx, session, 0); err != nil || len(got) != n {
			t.Fatalf("after kill -9, Read of session %s = %d events, %v; want %d", session, len(got), err, n)
		}
	}
	_, err = spawnHelper(ctx, t, dir, helper{session: "c", shared: true})
	if err == nil {
		t.Fatal("a shared node started while this process holds the directory without Shared")
	}
	for _, want := range []string{"helper: locked", dir, fmt.Sprintf("pid %d", os.Getpid()), "without Config.Shared"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refused shared node said %q, want it to say %q", err, want)
		}
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := spawnHelper(ctx, t, dir, helper{events: 1, session: "c", shared: true}); err != nil {
		t.Fatalf("shared node after the exclusive Log closed: %v", err)
	}
}

// The workload of TestSharedAppendAcrossProcesses.
const (
	raceEnv         = "TROUPE_EVENTLOG_SQLITE_RACE_DIR" // tells the test binary to act as TestSharedRaceHelper
	raceProcs       = 3                                 // processes sharing the log
	raceOwnSessions = 4                                 // sessions of each process alone
	raceOwnEvents   = 120                               // events of each of them
	raceSessions    = 4                                 // sessions every process writes
	raceSlots       = 50                                // seqs of each, raced for by every process
)

// raceReport is what a TestSharedRaceHelper process saw, printed as JSON.
type raceReport struct {
	Proc int
	// Won and Lost list, per raced session, the seqs at which this process's
	// Append succeeded and those at which it failed with ErrSeqConflict.
	Won, Lost map[string][]uint64
	Busy      int64    // appends retried after ErrBusy
	Errors    []string // anything unexpected
}

// TestSharedRaceHelper is not a test: TestSharedAppendAcrossProcesses runs the test
// binary again with raceEnv set, and this function then plays one node. It opens
// the log with Shared, runs raceWorkload, closes the log and prints its raceReport.
// At each barrier of the workload it says "race: wait" and waits for a line on
// stdin, which the parent sends once every process waits.
func TestSharedRaceHelper(t *testing.T) {
	dir := os.Getenv(raceEnv)
	if dir == "" {
		t.Skip("helper process of TestSharedAppendAcrossProcesses")
	}
	proc, _ := strconv.Atoi(os.Getenv(raceEnv + "_PROC"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: dir, Shared: true})
	if err != nil {
		fmt.Println("race: open:", err)
		os.Exit(2)
	}
	stdin := bufio.NewReader(os.Stdin)
	rep := raceWorkload(ctx, t, l, proc, func() error {
		fmt.Println("race: wait")
		_, err := stdin.ReadString('\n')
		return err
	})
	if err := l.Close(); err != nil {
		rep.Errors = append(rep.Errors, "close: "+err.Error())
	}
	b, err := json.Marshal(rep)
	if err != nil {
		fmt.Println("race: report:", err)
		os.Exit(2)
	}
	fmt.Println("race: report " + string(b))
}

// raceWorkload appends, all at once: raceOwnSessions sessions of this process alone,
// in batches of 1 to 4 events, some delivered twice; and every seq of raceSessions
// sessions that the other processes race for, each with an event ID of its own. The
// raced seqs go in rounds, one seq of every raced session each, and every round
// starts with barrier, which returns once every process is there: so they really
// race for each seq, instead of one running ahead and taking them all unopposed.
// After its append, each process reads the event stored at the seq, which may come
// from another process, and appends it again, a no-op, and appends its own again: a
// no-op for the winner, ErrSeqConflict still for a loser. An append that fails with
// ErrBusy is retried, as a node retries an outage.
func raceWorkload(ctx context.Context, t *testing.T, l *sqlite.Log, proc int, barrier func() error) raceReport {
	var (
		mu   sync.Mutex
		rep  = raceReport{Proc: proc, Won: map[string][]uint64{}, Lost: map[string][]uint64{}}
		busy atomic.Int64
		wg   sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		rep.Errors = append(rep.Errors, fmt.Sprintf(format, args...))
	}
	appendRetry := func(events []messages.Envelope) error {
		for {
			err := l.Append(ctx, events)
			if !errors.Is(err, sqlite.ErrBusy) {
				return err
			}
			if errors.Is(err, eventlog.ErrSeqConflict) || errors.Is(err, eventlog.ErrInvalidEvent) {
				return fmt.Errorf("ErrBusy marked as a refusal too: %w", err)
			}
			busy.Add(1)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return err
			}
		}
	}
	// Events are built before the goroutines start: event may call t.Fatal.
	own := make([][]messages.Envelope, raceOwnSessions)
	for j := range own {
		for seq := uint64(1); seq <= raceOwnEvents; seq++ {
			own[j] = append(own[j], event(t, fmt.Sprintf("own-%d-%d", proc, j), seq))
		}
	}
	raced := make([][]messages.Envelope, raceSessions)
	for k := range raced {
		session := fmt.Sprintf("race-%d", k)
		for seq := uint64(1); seq <= raceSlots; seq++ {
			e := event(t, session, seq)
			e.ID = raceID(session, seq, proc)
			raced[k] = append(raced[k], e)
		}
	}
	won := make([][]uint64, raceSessions)
	lost := make([][]uint64, raceSessions)
	race := func(k int, mine messages.Envelope) {
		session, seq := mine.SessionID, mine.Seq
		err := appendRetry([]messages.Envelope{mine})
		switch {
		case err == nil:
			won[k] = append(won[k], seq)
		case errors.Is(err, eventlog.ErrSeqConflict):
			lost[k] = append(lost[k], seq)
		default:
			fail("%s seq %d: %v, want nil or ErrSeqConflict", session, seq, err)
			return
		}
		got, rerr := l.Read(ctx, session, seq)
		if rerr != nil || len(got) == 0 || got[0].Seq != seq || (got[0].ID == mine.ID) != (err == nil) {
			fail("%s seq %d: Append = %v, but Read from it = %s, %v", session, seq, err, describeIDs(got), rerr)
			return
		}
		if err := appendRetry(got[:1]); err != nil {
			fail("%s seq %d: appending the stored %s again = %v, want nil", session, seq, got[0].ID, err)
		}
		if again := appendRetry([]messages.Envelope{mine}); (err == nil) != (again == nil) || (again != nil && !errors.Is(again, eventlog.ErrSeqConflict)) {
			fail("%s seq %d: Append = %v, then appending %s again = %v", session, seq, err, mine.ID, again)
		}
	}
	for round := range raceSlots {
		if err := barrier(); err != nil {
			fail("round %d: barrier: %v", round, err)
			break
		}
		if round == 0 {
			for _, events := range own {
				wg.Go(func() {
					for i, size := 0, 1; i < len(events); i, size = i+size, size%4+1 {
						batch := events[i:min(i+size, len(events))]
						if err := appendRetry(batch); err != nil {
							fail("%s seq %d: %v", batch[0].SessionID, batch[0].Seq, err)
							return
						}
						if i%5 == 0 { // delivered again
							if err := appendRetry(batch); err != nil {
								fail("%s seq %d, delivered again: %v, want nil", batch[0].SessionID, batch[0].Seq, err)
								return
							}
						}
					}
				})
			}
		}
		var racers sync.WaitGroup
		for k := range raced {
			racers.Go(func() { race(k, raced[k][round]) })
		}
		racers.Wait()
	}
	wg.Wait()
	for k := range raceSessions {
		session := fmt.Sprintf("race-%d", k)
		rep.Won[session], rep.Lost[session] = won[k], lost[k]
	}
	rep.Busy = busy.Load()
	return rep
}

// raceID is the ID of process proc's candidate for a raced (session, seq).
func raceID(session string, seq uint64, proc int) string {
	return fmt.Sprintf("%s/%d/p%d", session, seq, proc)
}

func describeIDs(events []messages.Envelope) string {
	ids := make([]string, 0, len(events))
	for _, e := range events {
		ids = append(ids, fmt.Sprintf("%d:%s", e.Seq, e.ID))
	}
	return "[" + strings.Join(ids, " ") + "]"
}

// raceProc is one TestSharedRaceHelper process.
type raceProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	waits  chan struct{} // one value each time it waits at a barrier
	done   chan struct{} // closed when its stdout ends; report and out are set then
	report *raceReport
	out    []string
}

func startRaceProc(ctx context.Context, t *testing.T, dir string, proc int) *raceProc {
	t.Helper()
	p := &raceProc{waits: make(chan struct{}, raceSlots), done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSharedRaceHelper$", "-test.count=1")
	p.cmd.Env = append(os.Environ(), raceEnv+"="+dir, raceEnv+"_PROC="+strconv.Itoa(proc))
	p.cmd.Stderr = os.Stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.stdin.Close(); _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "race: wait":
				p.waits <- struct{}{}
			case strings.HasPrefix(line, "race: report "):
				var r raceReport
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "race: report ")), &r); err != nil {
					p.out = append(p.out, "bad report: "+err.Error())
					continue
				}
				p.report = &r
			default:
				p.out = append(p.out, line)
			}
		}
	}()
	return p
}

// TestSharedAppendAcrossProcesses runs raceProcs processes on one fresh data
// directory, each with its own Log opened with Shared, and has them append at once
// (raceWorkload): each to sessions of its own, and all of them to every seq of
// shared sessions, with different event IDs. This process holds a shared Log too,
// and lists sessions while they write. Afterwards every session holds gap-free
// seqs, every raced (session, seq) holds exactly one event, that of the one process
// whose Append succeeded, while every other process got ErrSeqConflict for it; no
// event is missing or doubled, and the summaries and analytics count them all.
func TestSharedAppendAcrossProcesses(t *testing.T) {
	if os.Getenv(helperEnv) != "" || os.Getenv(raceEnv) != "" {
		t.Skip("running as a helper process")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	procs := make([]*raceProc, raceProcs)
	for i := range procs { // they open the fresh directory at once: one migrates it
		procs[i] = startRaceProc(ctx, t, dir, i)
	}
	// Every process waits at the barrier of each round; once all do, they go on.
	var (
		l           *sqlite.Log
		start       time.Time
		stopPolling = make(chan struct{})
		polled      = make(chan error, 1)
	)
	for round := range raceSlots {
		for i, p := range procs {
			select {
			case <-p.waits:
			case <-p.done:
				t.Fatalf("process %d exited before round %d: %s", i, round, strings.Join(p.out, "\n"))
			case <-ctx.Done():
				t.Fatalf("process %d did not reach round %d in time", i, round)
			}
		}
		if round == 0 { // every process has opened the log
			l = open(t, sqlite.Config{Dir: dir, Shared: true})
			_, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
			wantLocked(t, "Open without Shared beside shared processes", err, dir, "Config.Shared")
			go pollSessions(ctx, l, stopPolling, polled)
			start = time.Now()
		}
		for _, p := range procs {
			if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			t.Fatalf("process %d did not finish in time", i)
		}
		if err := p.cmd.Wait(); err != nil || p.report == nil {
			t.Fatalf("process %d: %v, report %v: %s", i, err, p.report != nil, strings.Join(p.out, "\n"))
		}
	}
	elapsed := time.Since(start)
	close(stopPolling)
	if err := <-polled; err != nil {
		t.Error(err)
	}

	// What each process saw.
	winners := map[string]map[uint64][]int{} // raced session → seq → processes that won it
	losers := map[string]map[uint64][]int{}  // … that lost it
	for i, p := range procs {
		r := p.report
		for _, e := range r.Errors {
			t.Errorf("process %d: %s", i, e)
		}
		wins := 0
		for k := range raceSessions {
			session := fmt.Sprintf("race-%d", k)
			if winners[session] == nil {
				winners[session], losers[session] = map[uint64][]int{}, map[uint64][]int{}
			}
			for _, seq := range r.Won[session] {
				winners[session][seq] = append(winners[session][seq], i)
			}
			for _, seq := range r.Lost[session] {
				losers[session][seq] = append(losers[session][seq], i)
			}
			wins += len(r.Won[session])
			if n := len(r.Won[session]) + len(r.Lost[session]); n != raceSlots {
				t.Errorf("process %d, session %s: %d seqs won or lost, want all %d", i, session, n, raceSlots)
			}
		}
		t.Logf("process %d won %d of %d raced seqs, retried %d appends after ErrBusy", i, wins, raceSessions*raceSlots, r.Busy)
	}

	// What the log holds, read by this process.
	total := 0
	for k := range raceSessions {
		session := fmt.Sprintf("race-%d", k)
		got, err := l.Read(ctx, session, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != raceSlots {
			t.Errorf("session %s holds %d events, want %d: %s", session, len(got), raceSlots, describeIDs(got))
		}
		for i, e := range got {
			seq := uint64(i + 1)
			w := winners[session][seq]
			switch {
			case e.Seq != seq:
				t.Fatalf("session %s: event %d has seq %d: a gap", session, i, e.Seq)
			case len(w) != 1:
				t.Errorf("session %s seq %d: processes %v report winning it, want exactly one", session, seq, w)
			case e.ID != raceID(session, seq, w[0]):
				t.Errorf("session %s seq %d holds %s, but process %d won it", session, seq, e.ID, w[0])
			case len(losers[session][seq]) != raceProcs-1 || slices.Contains(losers[session][seq], w[0]):
				t.Errorf("session %s seq %d: won by %d, lost by %v; want every other process to have lost it",
					session, seq, w[0], losers[session][seq])
			}
		}
		total += len(got)
	}
	for p := range raceProcs {
		for j := range raceOwnSessions {
			session := fmt.Sprintf("own-%d-%d", p, j)
			got, err := l.Read(ctx, session, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != raceOwnEvents {
				t.Errorf("session %s holds %d events, want %d", session, len(got), raceOwnEvents)
			}
			for i, e := range got {
				if want := event(t, session, uint64(i+1)); e.Seq != want.Seq || e.ID != want.ID {
					t.Fatalf("session %s: event %d is %d:%s, want %d:%s", session, i, e.Seq, e.ID, want.Seq, want.ID)
				}
			}
			total += len(got)
		}
	}
	const want = raceProcs*raceOwnSessions*raceOwnEvents + raceSessions*raceSlots
	if total != want {
		t.Errorf("the sessions hold %d events, want %d", total, want)
	}
	var rows, ids int
	if err := rawDB(t, dir).QueryRow("SELECT count(*), count(DISTINCT id) FROM events").Scan(&rows, &ids); err != nil || rows != want || ids != want {
		t.Errorf("events table: %d rows, %d IDs, %v; want %d of each", rows, ids, err, want)
	}
	infos, err := l.Sessions(ctx, eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != raceProcs*raceOwnSessions+raceSessions {
		t.Errorf("Sessions lists %d sessions, want %d", len(infos), raceProcs*raceOwnSessions+raceSessions)
	}
	var responded int64 // event makes seq 3 of every 4 a model.responded
	for _, i := range infos {
		n := raceOwnEvents
		if strings.HasPrefix(i.ID, "race-") {
			n = raceSlots
		}
		if i.Events != n || i.LastSeq != uint64(n) {
			t.Errorf("summary of session %s: %d events, last seq %d; want %d", i.ID, i.Events, i.LastSeq, n)
		}
		responded += int64((n + 1) / 4)
	}
	st, err := l.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var calls int64
	for _, m := range st.Models {
		calls += m.Calls
	}
	if calls != responded {
		t.Errorf("Report counts %d model calls, want %d", calls, responded)
	}
	t.Logf("%d processes appended %d events in %s, the raced ones in rounds", raceProcs, want, elapsed.Round(time.Millisecond))

	// The last shared Log gone, a node without Shared may have the directory.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	x := open(t, sqlite.Config{Dir: dir})
	var check string
	if err := rawDB(t, dir).QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check = %q, %v", check, err)
	}
	if got, err := x.Read(ctx, "race-0", 0); err != nil || len(got) != raceSlots {
		t.Errorf("Read after reopening without Shared = %d events, %v", len(got), err)
	}
}

// pollSessions lists the sessions of l until stop is closed, then reports on done:
// an error of Sessions, or a session whose event count went down.
func pollSessions(ctx context.Context, l *sqlite.Log, stop <-chan struct{}, done chan<- error) {
	seen := map[string]int{}
	for {
		select {
		case <-stop:
			done <- nil
			return
		default:
		}
		infos, err := l.Sessions(ctx, eventlog.Filter{})
		if err != nil {
			done <- fmt.Errorf("Sessions while other processes write: %w", err)
			return
		}
		for _, i := range infos {
			if i.Events < seen[i.ID] {
				done <- fmt.Errorf("session %s went from %d to %d events", i.ID, seen[i.ID], i.Events)
				return
			}
			seen[i.ID] = i.Events
		}
		time.Sleep(5 * time.Millisecond)
	}
}
