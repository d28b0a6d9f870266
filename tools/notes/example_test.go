package notes_test

import (
	"context"
	"fmt"
	"os"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

// An agent's notes on an embedded event log: what a tool call adds is there for the
// next task, and the same call made again changes nothing.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "notes-example")
	defer os.RemoveAll(dir)
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer log.Close()
	n, _ := notes.New(notes.Config{Log: log, Agent: "planner"})
	box, _ := n.Toolbox()

	for _, call := range []tools.Call{
		{Key: "s-1/4", Arguments: `{"op":"add","args":{"type":"fact","tags":["paris"],"body":"The Louvre closes on Tuesdays."}}`},
		{Key: "s-1/4", Arguments: `{"op":"add","args":{"type":"fact","tags":["paris"],"body":"The Louvre closes on Tuesdays."}}`}, // re-issued
		{Key: "s-1/6", Arguments: `{"op":"add","args":{"type":"todo","body":"Book the train to Lyon."}}`},
	} {
		if _, err := box.Call(ctx, call); err != nil {
			panic(err)
		}
	}
	found, _ := n.Search(ctx, "is the museum open on tuesday?", notes.Filter{})
	for _, note := range found.Notes {
		fmt.Println(note.ID, note.Type, note.Tags, note.Body)
	}
	all, _ := n.List(ctx, notes.Filter{})
	fmt.Println(all.Matched, "notes in", n.Stream())
	// Output:
	// n1 fact [paris] The Louvre closes on Tuesdays.
	// 2 notes in notes/planner
}
