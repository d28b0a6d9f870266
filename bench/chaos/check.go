package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

type event struct {
	Seq     uint64          `json:"seq"`
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

// apiEvents reads a session's events from some live node.
func (c *cluster) apiEvents(session string) ([]event, int, error) {
	var last error
	for t := 0; t < 5; t++ {
		base := c.anyNode()
		r, err := httpc.Get(base + "/v1/sessions/" + session + "/events")
		if err != nil {
			last = err
			time.Sleep(time.Second)
			continue
		}
		defer r.Body.Close()
		if r.StatusCode == 404 {
			return nil, 404, nil
		}
		if r.StatusCode != 200 {
			last = fmt.Errorf("status %d", r.StatusCode)
			time.Sleep(time.Second)
			continue
		}
		var ev []event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			return nil, 0, err
		}
		return ev, 200, nil
	}
	return nil, 0, last
}

type tally struct {
	submitted, completed, failed int
	seqBad                       string
	failReasons                  []string
}

func summarize(ev []event) tally {
	var t tally
	ids := map[string]bool{}
	for i, e := range ev {
		if e.Seq != uint64(i+1) && t.seqBad == "" {
			t.seqBad = fmt.Sprintf("event %d has seq %d", i+1, e.Seq)
		}
		switch e.Type {
		case "task.submitted":
			if !ids[e.ID] {
				t.submitted++
			}
			ids[e.ID] = true
		case "task.completed":
			t.completed++
		case "task.failed":
			t.failed++
			t.failReasons = append(t.failReasons, string(e.Payload))
		}
	}
	return t
}

// noteSession is the session a note's call key counts for: the key is
// "<session>/<seq>", and a child session of a delegate call ("<parent>.sub<seq>",
// lead's) counts for its parent.
func noteSession(key string) string {
	s := key
	if i := strings.LastIndex(s, "/"); i > 0 {
		s = s[:i]
	}
	for {
		i := strings.LastIndex(s, ".sub")
		if i <= 0 || i+4 == len(s) || strings.Trim(s[i+4:], "0123456789") != "" {
			return s
		}
		s = s[:i]
	}
}

func ch(o options, q string) (string, error) {
	b, err := exec.Command("clickhouse-client", "--host", strings.Split(o.clickhouse, ":")[0], "--port", strings.Split(o.clickhouse, ":")[1],
		"--database", o.db, "--query", q).CombinedOutput()
	return strings.TrimSpace(string(b)), err
}

func check(c *cluster, st *stats, o options) int {
	st.mu.Lock()
	names := make([]string, 0, len(st.sessions))
	for s := range st.sessions {
		names = append(names, s)
	}
	st.mu.Unlock()
	sort.Strings(names)
	logf("settling: %d sessions", len(names))
	pending := map[string]bool{}
	for _, s := range names {
		pending[s] = true
	}
	tallies := map[string]tally{}
	deadline := time.Now().Add(o.settle)
	for len(pending) > 0 && time.Now().Before(deadline) {
		for s := range pending {
			ev, code, err := c.apiEvents(s)
			if err != nil {
				continue
			}
			x := st.sessions[s]
			if code == 404 {
				if x.accepted == 0 {
					tallies[s] = tally{}
					delete(pending, s)
				}
				continue
			}
			t := summarize(ev)
			tallies[s] = t
			if t.submitted >= x.accepted && t.completed+t.failed >= t.submitted {
				delete(pending, s)
			}
		}
		if len(pending) > 0 {
			time.Sleep(5 * time.Second)
		}
	}
	bad := 0
	var accepted, unknown, ran, lost, dup, unfinished, failed, seqBad int
	byKind := map[string][2]int{}
	for _, s := range names {
		x, t := st.sessions[s], tallies[s]
		accepted += x.accepted
		unknown += x.unknown
		ran += t.submitted
		failed += t.failed
		k := byKind[x.kind]
		k[0] += x.accepted
		k[1] += t.submitted
		byKind[x.kind] = k
		if t.submitted < x.accepted {
			lost += x.accepted - t.submitted
			fmt.Printf("LOST %s (%s): %d accepted, %d in the log\n", s, x.kind, x.accepted, t.submitted)
		}
		if t.submitted > x.accepted+x.unknown {
			dup += t.submitted - x.accepted - x.unknown
			fmt.Printf("DUPLICATE TASK %s (%s): %d submitted (+%d unknown), %d in the log\n", s, x.kind, x.accepted, x.unknown, t.submitted)
		}
		if t.completed+t.failed != t.submitted {
			unfinished++
			fmt.Printf("ENDS %s (%s): %d tasks, %d completed, %d failed\n", s, x.kind, t.submitted, t.completed, t.failed)
		}
		if t.seqBad != "" {
			seqBad++
			fmt.Printf("SEQ %s: %s\n", s, t.seqBad)
		}
		for _, r := range t.failReasons {
			fmt.Printf("FAILED %s (%s): %s\n", s, x.kind, r)
		}
	}
	bad += lost + dup + unfinished + seqBad
	st.mu.Lock()
	fmt.Printf("faults: %v; refused submissions: %v\n", st.faults, st.refused)
	st.mu.Unlock()
	fmt.Printf("sessions %d; tasks accepted %d (+%d unclear), in the log %d, failed %d; lost %d, duplicated %d, sessions with unfinished tasks %d, with bad seqs %d\n",
		len(names), accepted, unknown, ran, failed, lost, dup, unfinished, seqBad)
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Printf("  %-11s accepted %5d  in the log %5d\n", k, byKind[k][0], byKind[k][1])
	}

	// ClickHouse: two events at one seq. The events table collapses rows of one
	// (session, seq, epoch), so read the IDs of every event appended (event_ids); a
	// seq with two IDs and no fenced row is two writers at one epoch, one of them lost.
	q := `SELECT session_id, seq, uniqExact(id) AS n FROM event_ids
	  WHERE (session_id, seq) NOT IN (SELECT session_id, seq FROM fenced_events)
	  GROUP BY session_id, seq HAVING n > 1 ORDER BY session_id, seq`
	if out, err := ch(o, q); err != nil {
		fmt.Printf("clickhouse: %v %s\n", err, out)
		bad++
	} else if out != "" {
		lines := strings.Split(out, "\n")
		bad += len(lines)
		if len(lines) > 20 {
			lines = append(lines[:20], "...")
		}
		fmt.Printf("TWO EVENTS AT ONE SEQ, %d seqs (session, seq, events):\n%s\n", len(strings.Split(out, "\n")), strings.Join(lines, "\n"))
	}
	if out, err := ch(o, "SELECT count(), uniqExact(session_id) FROM fenced_events"); err == nil {
		fmt.Printf("fenced rows, sessions: %s\n", out)
	}
	// Side effects: one note per noter task, each call key once.
	out, err := ch(o, `SELECT visitParamExtractString(payload, 'key') AS k, uniqExact(id) AS n FROM events
	  WHERE session_id LIKE 'notes/%' AND type = 'note.added'
	  AND (session_id, seq, epoch) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
	  GROUP BY k ORDER BY k`)
	if err != nil {
		fmt.Printf("clickhouse notes: %v %s\n", err, out)
		bad++
	}
	notesBy := map[string]int{}
	repeated := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 2 {
			continue
		}
		if f[1] != "1" {
			repeated++
			fmt.Printf("SIDE EFFECT REPEATED: key %s %s times\n", f[0], f[1])
		}
		notesBy[noteSession(f[0])]++
	}
	wantNotes, gotNotes, noteMismatch := 0, 0, 0
	for _, s := range names {
		x := st.sessions[s]
		wantNotes += x.noter
		gotNotes += notesBy[s]
		if notesBy[s] < x.noter || notesBy[s] > x.noter+x.noterUnk {
			noteMismatch++
			fmt.Printf("NOTES %s (%s): %d noter tasks (+%d unclear), %d distinct notes\n", s, x.kind, x.noter, x.noterUnk, notesBy[s])
		}
	}
	fmt.Printf("side effects: noter tasks accepted %d, notes %d (call keys %d), keys repeated %d, sessions off %d\n", wantNotes, gotNotes, len(notesBy), repeated, noteMismatch)
	bad += repeated + noteMismatch

	// Analytics views against the sessions.
	if out, err := ch(o, "SELECT * FROM session_outcomes FORMAT TSVWithNames"); err == nil {
		fmt.Printf("session_outcomes:\n%s\n", out)
	} else {
		fmt.Printf("session_outcomes: %v %s\n", err, out)
	}
	if out, err := ch(o, "SELECT tool, calls FROM tool_usage FORMAT TSVWithNames"); err == nil {
		fmt.Printf("tool_usage:\n%s\n", out)
	}
	fmt.Printf("from the API: %d tasks completed, %d failed\n", ran-failed, failed)

	// replay verify on a sample.
	if o.replay != "" && o.verifySample > 0 {
		perm := rand.Perm(len(names))
		ok, n := 0, 0
		for _, i := range perm {
			if n == o.verifySample {
				break
			}
			s := names[i]
			if tallies[s].submitted == 0 {
				continue
			}
			n++
			cmd := exec.Command(o.replay, "verify", s, "--clickhouse", o.clickhouse, "--config", o.config, "--agents", o.agents)
			cmd.Env = append(os.Environ(), "TROUPE_CLICKHOUSE_DATABASE="+o.db)
			b, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(b), "deterministic") {
				bad++
				fmt.Printf("VERIFY %s: %v %s\n", s, err, strings.TrimSpace(string(b)))
			} else {
				ok++
			}
		}
		fmt.Printf("replay verify: %d of %d deterministic\n", ok, n)
	}
	if bad > 0 {
		fmt.Printf("FAIL: %d problems\n", bad)
		return 1
	}
	fmt.Println("OK")
	return 0
}
