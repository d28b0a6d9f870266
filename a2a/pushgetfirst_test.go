package a2a

import (
	"context"
	"errors"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/eventlog/sqlite"
)

// An A2A 0.3 tasks/pushNotificationConfig/get that names the task only (its
// pushNotificationConfigId is optional: the 0.3 Python SDK's
// get_task_callback(GetTaskPushNotificationConfigParams(id=task)) sends none)
// answers the task's first config, as the 0.3 SDKs' servers do; it was -32001
// "task ... has no push config \"\"". A task with no config is still not found.
func TestPushStoreGetWithoutAConfigIDAnswersTheFirst(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	s := NewPushStore(log, nil, nil)
	const task = sdk.TaskID("s1~0123456789abcdef0123456789abcdef")
	if _, err := s.Get(ctx, task, ""); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("get of a task without configs: %v, want task not found", err)
	}
	for _, id := range []string{"b", "a", "c"} {
		if _, err := s.Save(ctx, task, &sdk.PushConfig{ID: id, URL: "https://hooks.example.com/" + id}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Get(ctx, task, "")
	if err != nil || got.ID != "a" {
		t.Fatalf("get without a config id: %+v, %v; want config a, the first listed", got, err)
	}
}
