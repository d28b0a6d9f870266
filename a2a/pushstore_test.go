package a2a

import (
	"context"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/eventlog/sqlite"
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
	a, b := NewPushStore(log), NewPushStore(log)
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
	if w, _ := b.Withheld(task, saved.ID); !w {
		t.Fatal("b would post a's config without its secrets")
	}
	if w, _ := a.Withheld(task, saved.ID); w {
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
	if got, _ := NewPushStore(log).List(ctx, task); len(got) != 0 {
		t.Fatalf("a new store after DeleteAll: %+v", got)
	}
}
