package sqlite_test

import (
	"context"
	"fmt"
	"os"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "troupe-events-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	log, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer log.Close()

	// A session actor appends its events as it sequences them.
	var batch []messages.Envelope
	for seq, p := range []messages.Payload{
		&messages.TaskSubmitted{Input: "What is 12 * (7 + 5)?"},
		&messages.ModelRequested{Key: "s-1/m1", Model: "offline", Step: 1},
		&messages.TaskCompleted{Output: "144", Steps: 1},
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			panic(err)
		}
		e.ID = fmt.Sprintf("s-1/%d", seq+1)
		e.SessionID, e.Seq, e.TS, e.Actor = "s-1", uint64(seq+1), 1_767_225_600_000_000+int64(seq), "session"
		batch = append(batch, e)
	}
	if err := log.Append(ctx, batch); err != nil {
		panic(err)
	}
	// Delivered twice: nothing changes.
	if err := log.Append(ctx, batch[2:]); err != nil {
		panic(err)
	}

	events, err := log.Read(ctx, "s-1", 2)
	if err != nil {
		panic(err)
	}
	for _, e := range events {
		fmt.Println(e.Seq, e.Type, string(e.Payload))
	}
	sessions, err := log.Sessions(ctx, eventlog.Filter{Limit: 10})
	if err != nil {
		panic(err)
	}
	for _, s := range sessions {
		fmt.Printf("%s %s events=%d steps=%d last_seq=%d\n", s.ID, s.Status, s.Events, s.Steps, s.LastSeq)
	}
	// Output:
	// 2 model.requested {"key":"s-1/m1","model":"offline","step":1,"messages":0,"prompt_hash":""}
	// 3 task.completed {"output":"144","steps":1,"usage":{"prompt_tokens":0,"completion_tokens":0}}
	// s-1 completed events=3 steps=1 last_seq=3
}
