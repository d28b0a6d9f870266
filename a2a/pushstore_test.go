package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// Two stores over one log (two nodes): a config one sets, the other lists once its
// fold is older than pushRefresh, without the secrets, which only the first knows
// (and posts with); a delete on either holds for both. Concurrent writers of a
// task's stream take the next seq after a conflict.
func TestPushStoreSharesConfigsOverTheLog(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	a, b := NewPushStore(log, nil, nil), NewPushStore(log, nil, nil)
	a.now, b.now = clock, clock
	const task = sdk.TaskID("s1~0123456789abcdef0123456789abcdef")

	if got, err := b.List(ctx, task); err != nil || len(got) != 0 {
		t.Fatalf("b before any config: %v, %v", got, err)
	}
	saved, err := a.Save(ctx, task, &sdk.PushConfig{URL: "https://hooks.example.com/x", Token: "tok",
		Auth: &sdk.PushAuthInfo{Schemes: []string{"Bearer"}, Credentials: "cred"}})
	if err != nil || saved.ID == "" || saved.Token != "tok" {
		t.Fatalf("save: %+v, %v", saved, err)
	}
	if _, err := b.Save(ctx, task, &sdk.PushConfig{ID: "b", URL: "https://hooks.example.com/b"}); err != nil {
		t.Fatalf("b's save after a's (a seq conflict): %v", err)
	}
	if got, err := b.Get(ctx, task, saved.ID); err != nil || got.Token != "" || got.Auth.Credentials != "" || got.URL != saved.URL {
		t.Fatalf("b's view of a's config: %+v, %v", got, err)
	}
	if w, _, _ := b.Withheld(task, saved.ID); !w {
		t.Fatal("b would post a's config without its secrets")
	}
	if w, _, _ := a.Withheld(task, saved.ID); w {
		t.Fatal("a withholds the config it was given")
	}
	if got, _ := a.List(ctx, task); len(got) != 1 {
		t.Fatalf("a lists %d configs within pushRefresh, want its fold (1)", len(got))
	}
	now = now.Add(pushRefresh)
	if got, _ := a.List(ctx, task); len(got) != 2 {
		t.Fatalf("a lists %d configs after pushRefresh, want 2", len(got))
	}
	if got, _ := a.Get(ctx, task, saved.ID); got.Token != "tok" || got.Auth.Credentials != "cred" {
		t.Fatalf("a lost the secrets it keeps: %+v", got)
	}
	if err := b.Delete(ctx, task, saved.ID); err != nil {
		t.Fatal(err)
	}
	now = now.Add(pushRefresh)
	if got, _ := a.List(ctx, task); len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("a after b's delete: %+v", got)
	}
	if err := a.DeleteAll(ctx, task); err != nil {
		t.Fatal(err)
	}
	if got, _ := NewPushStore(log, nil, nil).List(ctx, task); len(got) != 0 {
		t.Fatalf("a new store after DeleteAll: %+v", got)
	}
}

// With a sealer, a config's secrets are in the log sealed: a store over the same
// log with the same key (a restart, another node) has them and posts with them; a
// store with another key, or none, lists the config without them, fails its Get
// with ErrUndecryptable, and withholds its notifications. No event holds a secret
// in plain text, and a sealed value does not open for another config.
func TestPushStoreSealsSecretsWithTheNodeKey(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	keyA, keyB := bytes.Repeat([]byte{1}, SecretKeySize), bytes.Repeat([]byte{2}, SecretKeySize)
	sealer := func(k []byte) *PushSealer { return NewPushSealer(func() ([]byte, error) { return k, nil }) }
	const task = sdk.TaskID("s1~0123456789abcdef0123456789abcdef")

	a := NewPushStore(log, sealer(keyA), nil)
	if _, err := a.Save(ctx, task, &sdk.PushConfig{ID: "c", URL: "https://hooks.example.com/x", Token: "tok-plain",
		Auth: &sdk.PushAuthInfo{Schemes: []string{"Bearer"}, Credentials: "cred-plain"}}); err != nil {
		t.Fatal(err)
	}
	events, err := log.Read(ctx, PushStreamFor(task), 1)
	if err != nil || len(events) != 1 {
		t.Fatalf("the stream: %d events, %v", len(events), err)
	}
	for _, e := range events {
		b, _ := json.Marshal(e)
		if bytes.Contains(b, []byte("tok-plain")) || bytes.Contains(b, []byte("cred-plain")) {
			t.Fatalf("a secret in plain text in the log: %s", b)
		}
	}

	again := NewPushStore(log, sealer(keyA), nil)
	if got, err := again.Get(ctx, task, "c"); err != nil || got.Token != "tok-plain" || got.Auth.Credentials != "cred-plain" {
		t.Fatalf("a store with the same key: %+v, %v", got, err)
	}
	if w, _, _ := again.Withheld(task, "c"); w {
		t.Fatal("a store with the same key withholds the config")
	}

	for name, s := range map[string]*PushStore{"another key": NewPushStore(log, sealer(keyB), nil), "no key": NewPushStore(log, nil, nil)} {
		list, err := s.List(ctx, task)
		if err != nil || len(list) != 1 || list[0].Token != "" || list[0].Auth.Credentials != "" {
			t.Fatalf("%s: list %+v, %v", name, list, err)
		}
		if _, err := s.Get(ctx, task, "c"); !errors.Is(err, ErrUndecryptable) || strings.Contains(err.Error(), "plain") {
			t.Fatalf("%s: get: %v", name, err)
		}
		if w, first, why := s.Withheld(task, "c"); !w || !first || !errors.Is(why, ErrUndecryptable) {
			t.Fatalf("%s: withheld %v, %v, %v", name, w, first, why)
		}
	}

	// The sealed value moved to another config does not open.
	var set messages.A2APushSet
	if err := json.Unmarshal(events[0].Payload, &set); err != nil {
		t.Fatal(err)
	}
	if _, err := sealer(keyA).open(task, "other", set.Sealed); !errors.Is(err, ErrUndecryptable) {
		t.Fatalf("a sealed value opened for another config: %v", err)
	}
}

// The configs of a task that ended are no trouble: secrets of theirs that do not
// open are logged at info level, not as an error (a running task's still are),
// and Prune deletes their stream from the log, leaving a running task's however
// old.
func TestPushStoreEndedTasks(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	sealer := func(b byte) *PushSealer {
		k := bytes.Repeat([]byte{b}, SecretKeySize)
		return NewPushSealer(func() ([]byte, error) { return k, nil })
	}
	const ended, running = sdk.TaskID("s1~0123456789abcdef0123456789abcdef"), sdk.TaskID("s2~0123456789abcdef0123456789abcdef")
	a := NewPushStore(log, sealer(1), nil)
	for _, task := range []sdk.TaskID{ended, running} {
		if _, err := a.Save(ctx, task, &sdk.PushConfig{ID: "c", URL: "https://hooks.example.com/x", Token: "tok"}); err != nil {
			t.Fatal(err)
		}
	}

	var logs bytes.Buffer
	b := NewPushStore(log, sealer(2), slog.New(slog.NewTextHandler(&logs, nil)))
	b.SetEnded(&taskEnds{ended: func(id sdk.TaskID) bool { return id == ended }})
	if got, err := b.List(ctx, ended); err != nil || len(got) != 1 {
		t.Fatalf("the ended task's configs: %+v, %v", got, err)
	}
	if l := logs.String(); strings.Contains(l, "level=ERROR") || !strings.Contains(l, "level=INFO") {
		t.Fatalf("the ended task's config whose secrets do not open was logged:\n%s", l)
	}
	logs.Reset()
	if _, err := b.List(ctx, running); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") {
		t.Fatalf("the running task's config whose secrets do not open was not logged as an error:\n%s", l)
	}

	if n, err := b.Prune(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("Prune of the configs older than an hour: %d, %v; want none (they are new)", n, err)
	}
	// Its end was never posted (no A2APushFinal): its configs are kept
	// PushUnpostedRetention longer.
	if n, err := b.Prune(ctx, time.Now().Add(PushUnpostedRetention+time.Second)); err != nil || n != 1 {
		t.Fatalf("Prune: %d, %v; want the ended task's configs", n, err)
	}
	for task, want := range map[sdk.TaskID]int{ended: 0, running: 1} {
		events, err := log.Read(ctx, PushStreamFor(task), 1)
		if err != nil || len(events) != want {
			t.Errorf("the configs' stream of task %s: %d events, %v; want %d", task, len(events), err, want)
		}
		if got, err := b.List(ctx, task); err != nil || len(got) != want {
			t.Errorf("the configs of task %s after Prune: %+v, %v", task, got, err)
		}
	}
}

// taskEnds is a TaskEnds that tells which tasks ended with a function, and counts
// the questions: Ended's, and the tasks of each EndedAmong call.
type taskEnds struct {
	ended   func(sdk.TaskID) bool
	mu      sync.Mutex
	singles int
	among   []int
}

func (e *taskEnds) Ended(_ context.Context, id sdk.TaskID) bool {
	e.mu.Lock()
	e.singles++
	e.mu.Unlock()
	return e.ended(id)
}

func (e *taskEnds) EndedAmong(_ context.Context, ids []sdk.TaskID) (map[sdk.TaskID]bool, error) {
	e.mu.Lock()
	e.among = append(e.among, len(ids))
	e.mu.Unlock()
	out := map[sdk.TaskID]bool{}
	for _, id := range ids {
		out[id] = e.ended(id)
	}
	return out, nil
}

// countingPruner is a log that counts its prunes: the calls and the streams listed.
type countingPruner struct {
	*sqlite.Log
	mu      sync.Mutex
	listed  []int // the streams of each PruneListed call
	streams int   // PruneStreams calls
}

func (c *countingPruner) PruneStreams(ctx context.Context, prefix string, beforeUS int64, limit int) (int, error) {
	c.mu.Lock()
	c.streams++
	c.mu.Unlock()
	return c.Log.PruneStreams(ctx, prefix, beforeUS, limit)
}

func (c *countingPruner) PruneListed(ctx context.Context, streams []eventlog.StreamBound) (int, error) {
	c.mu.Lock()
	c.listed = append(c.listed, len(streams))
	c.mu.Unlock()
	return c.Log.PruneListed(ctx, streams)
}

// The configs of many ended tasks go in one deletion per batch, not one per
// task (on ClickHouse each is a mutation of every table); a task whose config
// was set after Prune listed the streams keeps them, as does a running task.
func TestPushStorePrunesEndedTasksInBatches(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	log := &countingPruner{Log: l}
	var (
		clock   sync.Mutex
		now     = time.Unix(1_800_000_000, 0)
		running = sdk.TaskID("running")
		changed = sdk.TaskID("ended-changed")
	)
	s := NewPushStore(log, nil, nil)
	s.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	save := func(task sdk.TaskID) {
		t.Helper()
		if _, err := s.Save(ctx, task, &sdk.PushConfig{ID: "c", URL: "https://hooks.example.com/x"}); err != nil {
			t.Fatal(err)
		}
	}
	ends := &taskEnds{ended: func(id sdk.TaskID) bool {
		if id == changed { // set again after the listing, before the deletion
			clock.Lock()
			now = now.Add(time.Second)
			clock.Unlock()
			save(changed)
		}
		return id != running
	}}
	s.SetEnded(ends)
	streamEvents := func(task sdk.TaskID) int {
		t.Helper()
		events, err := l.Read(ctx, PushStreamFor(task), 1)
		if err != nil {
			t.Fatal(err)
		}
		return len(events)
	}

	const n = 7
	var ended []sdk.TaskID
	for i := range n {
		ended = append(ended, sdk.TaskID(fmt.Sprintf("ended-%d", i)))
	}
	for _, task := range append(slices.Clone(ended), running, changed) {
		save(task)
	}
	// Their ends were never posted (no A2APushFinal): their configs are kept
	// PushUnpostedRetention longer.
	got, err := s.Prune(ctx, now.Add(PushUnpostedRetention+time.Hour))
	if err != nil || got != n {
		t.Fatalf("Prune = %d, %v; want the %d ended tasks' configs", got, err, n)
	}
	if log.streams != 0 || !slices.Equal(log.listed, []int{n + 1}) {
		t.Errorf("Prune made %d PruneStreams calls and PruneListed calls of %v streams; want one PruneListed call of the %d ended tasks' streams",
			log.streams, log.listed, n+1)
	}
	// Which tasks ended is asked once for them all, not once a task.
	if ends.singles != 0 || !slices.Equal(ends.among, []int{n + 2}) {
		t.Errorf("Prune asked %d times whether a task ended, and EndedAmong of %v tasks; want one EndedAmong of the %d tasks", ends.singles, ends.among, n+2)
	}
	for _, task := range ended {
		if k := streamEvents(task); k != 0 {
			t.Errorf("the stream of ended task %s holds %d events after Prune", task, k)
		}
	}
	if k := streamEvents(running); k != 1 {
		t.Errorf("the running task's stream holds %d events after Prune, want its config", k)
	}
	if k := streamEvents(changed); k != 2 {
		t.Errorf("the stream of the task set again during Prune holds %d events, want both", k)
	}

	// Past a batch, the next batch is another deletion (the task set again during
	// Prune is listed, and set again, once more).
	log.listed, ends.among = nil, nil
	s.pruneBatch = 3
	for _, task := range ended {
		save(task)
	}
	clock.Lock()
	now = now.Add(2 * time.Hour)
	clock.Unlock()
	got, err = s.Prune(ctx, now.Add(PushUnpostedRetention+time.Hour))
	if err != nil || got != n {
		t.Fatalf("Prune in batches of 3 = %d, %v; want the %d ended tasks' configs", got, err, n)
	}
	if !slices.Equal(log.listed, []int{3, 3, 2}) || log.streams != 0 {
		t.Errorf("Prune in batches of 3 made PruneListed calls of %v streams (and %d PruneStreams calls); want [3 3 2]", log.listed, log.streams)
	}
	if ends.singles != 0 || !slices.Equal(ends.among, []int{3, 3, 3}) {
		t.Errorf("Prune in batches of 3 asked %d times whether a task ended, and EndedAmong of %v tasks; want [3 3 3]", ends.singles, ends.among)
	}
}

// A task has at most maxPushConfigs push configs: one more is refused as invalid
// params, saying so, and nothing is recorded; a config set again (its ID) and a
// new one after a delete are taken. (Each was taken: a client could set
// thousands on one task, each an event of the log and a POST at every update.)
func TestPushStoreBoundsATasksConfigs(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	s := NewPushStore(log, nil, nil)
	const task = sdk.TaskID("s1~0123456789abcdef0123456789abcdef")
	cfg := func(i int) *sdk.PushConfig {
		return &sdk.PushConfig{ID: fmt.Sprintf("c%d", i), URL: fmt.Sprintf("https://hooks.example.com/%d", i)}
	}
	for i := range maxPushConfigs {
		if _, err := s.Save(ctx, task, cfg(i)); err != nil {
			t.Fatalf("config %d: %v", i, err)
		}
	}
	_, err = s.Save(ctx, task, cfg(maxPushConfigs))
	if !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), fmt.Sprintf("%d push configs", maxPushConfigs)) {
		t.Fatalf("one config too many: %v", err)
	}
	events, err := log.Read(ctx, PushStreamFor(task), 1)
	if err != nil || len(events) != maxPushConfigs {
		t.Fatalf("%d events recorded, want %d: %v", len(events), maxPushConfigs, err)
	}
	if _, err := s.Save(ctx, task, &sdk.PushConfig{ID: "c0", URL: "https://hooks.example.com/again"}); err != nil {
		t.Fatalf("a config set again: %v", err)
	}
	if err := s.Delete(ctx, task, "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, task, cfg(maxPushConfigs)); err != nil {
		t.Fatalf("a config after a delete: %v", err)
	}
	if got, err := s.List(ctx, task); err != nil || len(got) != maxPushConfigs {
		t.Fatalf("%d configs listed, want %d: %v", len(got), maxPushConfigs, err)
	}
}

// A push URL's credentials (a webhook's ?token=, a password) are secrets like the
// config's token: the log has the URL without them, sealed whole beside it; a store
// with the key posts to the URL as given, one without it withholds the config, and
// a store with no sealer keeps the URL it was given in memory only.
func TestPushStoreSealsTheURLsCredentials(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	key := bytes.Repeat([]byte{1}, SecretKeySize)
	sealer := NewPushSealer(func() ([]byte, error) { return key, nil })
	const task = sdk.TaskID("s1~0123456789abcdef0123456789abcdef")
	const hook = "https://me:pw-plain@hooks.example.com/x?token=urltok-plain&team=a"

	a := NewPushStore(log, sealer, nil)
	if _, err := a.Save(ctx, task, &sdk.PushConfig{ID: "c", URL: hook}); err != nil {
		t.Fatal(err)
	}
	unsealed := NewPushStore(log, nil, nil)
	if _, err := unsealed.Save(ctx, task, &sdk.PushConfig{ID: "d", URL: hook}); err != nil {
		t.Fatal(err)
	}
	events, err := log.Read(ctx, PushStreamFor(task), 1)
	if err != nil || len(events) != 2 {
		t.Fatalf("the stream: %d events, %v", len(events), err)
	}
	for _, e := range events {
		b, _ := json.Marshal(e)
		if bytes.Contains(b, []byte("urltok-plain")) || bytes.Contains(b, []byte("pw-plain")) {
			t.Fatalf("the URL's credentials in plain text in the log: %s", b)
		}
	}
	if got, err := NewPushStore(log, sealer, nil).Get(ctx, task, "c"); err != nil || got.URL != hook {
		t.Fatalf("a store with the key: %+v, %v", got, err)
	}
	if got, err := unsealed.Get(ctx, task, "d"); err != nil || got.URL != hook {
		t.Fatalf("the store that was given the URL: %+v, %v", got, err)
	}
	other := NewPushStore(log, nil, nil)
	list, err := other.List(ctx, task)
	if err != nil || len(list) != 2 || list[0].URL != "https://me:[REDACTED]@hooks.example.com/x?token=[REDACTED]&team=a" {
		t.Fatalf("a store without the key: %+v, %v", list, err)
	}
	for _, id := range []string{"c", "d"} {
		if w, _, _ := other.Withheld(task, id); !w {
			t.Fatalf("a store without the URL's credentials would post config %s to the redacted URL", id)
		}
	}
}

// A notification that cannot be delivered is logged without the URL's credentials,
// which the HTTP client's error names too.
func TestPushSenderLogsNoURLCredentials(t *testing.T) {
	var buf bytes.Buffer
	s, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.attempts = 1
	cfg := &sdk.PushConfig{ID: "c", URL: "http://me:pw-plain-123@127.0.0.1:1/hook?token=urltok-plain-456"}
	s.send(context.Background(), pushItem{cfg: cfg, body: []byte(`{}`)}, "t1", nil)
	out := buf.String()
	if !strings.Contains(out, "not delivered") || !strings.Contains(out, "token=[REDACTED]") {
		t.Fatalf("the failure should be logged with the URL redacted:\n%s", out)
	}
	if strings.Contains(out, "urltok-plain-456") || strings.Contains(out, "pw-plain-123") {
		t.Fatalf("the log holds the URL's credentials:\n%s", out)
	}
}

// A push URL's credentials shorter than redact.MinSecretLen are redacted in the
// log as in the event (redact.URL): in the URL logged and in the error, which names
// the URL as Go's HTTP client prints it.
func TestPushSenderLogsNoShortURLCredentials(t *testing.T) {
	var buf bytes.Buffer
	s, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.attempts = 1
	cfg := &sdk.PushConfig{ID: "c", URL: "http://me:Pw9Z@127.0.0.1:1/hook?token=Tk7Q&sig=Sg3X&x=1"}
	s.send(context.Background(), pushItem{cfg: cfg, body: []byte(`{}`)}, "t1", nil)
	out := buf.String()
	if !strings.Contains(out, "not delivered") || !strings.Contains(out, "127.0.0.1:1/hook?token=[REDACTED]&sig=[REDACTED]&x=1") {
		t.Fatalf("the failure should be logged with the URL redacted, as the event has it:\n%s", out)
	}
	for _, v := range []string{"Pw9Z", "Tk7Q", "Sg3X"} {
		if strings.Contains(out, v) {
			t.Errorf("the log holds %s:\n%s", v, out)
		}
	}
}

// The configs of a task whose end was not posted to one of them (no
// A2APushFinal: the node posting it closed meanwhile) are kept
// PushUnpostedRetention longer than those of a task whose end was posted, so
// that a node over the log posts it (Server.PrunePushes); before, Prune deleted
// them after PushRetention, and the end was lost for good.
func TestPushStorePruneKeepsAnUnpostedEnd(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	s := NewPushStore(l, nil, nil)
	s.SetEnded(&taskEnds{ended: func(sdk.TaskID) bool { return true }})
	const posted, unposted = sdk.TaskID("s1~0123456789abcdef0123456789abcdef"), sdk.TaskID("s2~0123456789abcdef0123456789abcdef")
	for _, task := range []sdk.TaskID{posted, unposted} {
		for _, id := range []string{"c1", "c2"} {
			if _, err := s.Save(ctx, task, &sdk.PushConfig{ID: id, URL: "https://hooks.example.com/x"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Final(ctx, task, "c1", sdk.TaskStateCompleted, 200); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Final(ctx, posted, "c2", sdk.TaskStateCompleted, 200); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want the configs of the task whose end was posted", n, err)
	}
	u, err := NewPushStore(l, nil, nil).Unfinished(ctx, unposted)
	if err != nil || len(u) != 1 || u[0].ID != "c2" {
		t.Fatalf("the configs the end was not posted to after Prune: %v, %v; want c2", u, err)
	}
	if n, err := s.Prune(ctx, time.Now().Add(PushUnpostedRetention+time.Hour)); err != nil || n != 1 {
		t.Fatalf("Prune past PushUnpostedRetention = %d, %v; want the configs of the task whose end was not posted", n, err)
	}
}
