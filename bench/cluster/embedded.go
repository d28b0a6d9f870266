package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// runEmbedded measures one node on the embedded bus: each task is submitted with
// node.Submit (which returns once the session recorded it) and is over when its
// task.completed event reaches a node.Watch feed.
func runEmbedded(ctx context.Context, o options, round int) (result, error) {
	dir, err := os.MkdirTemp("", "troupe-bench-embedded-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	cfg, err := nodeConfig()
	if err != nil {
		return result{}, err
	}
	cfg.DataDir = dir
	asPart(ctx, "node")
	defer asPart(ctx, "bench")
	n, err := node.New(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	stop, err := n.Start(ctx)
	if err != nil {
		_ = n.Close()
		return result{}, err
	}
	defer stop()
	asPart(ctx, "client") // Submit runs part of the node's work in the client's goroutines

	run := func(ctx context.Context, id string) (time.Duration, error) {
		live, cancel := n.Watch(id)
		defer cancel()
		start := time.Now()
		if _, err := n.Submit(ctx, node.Task{Input: taskInput, SessionID: id}); err != nil {
			return 0, fmt.Errorf("session %s: submit: %w", id, err)
		}
		for {
			select {
			case e, ok := <-live:
				if !ok {
					return 0, fmt.Errorf("session %s: the live feed closed before the task ended (watcher fell behind)", id)
				}
				switch e.Type {
				case messages.TypeTaskCompleted:
					d := time.Since(start)
					var p messages.TaskCompleted
					if err := json.Unmarshal(e.Payload, &p); err != nil {
						return 0, fmt.Errorf("session %s: task.completed payload: %w", id, err)
					}
					if p.Output != taskOutput {
						return 0, fmt.Errorf("session %s: completed with output %q, want %q", id, p.Output, taskOutput)
					}
					return d, nil
				case messages.TypeTaskFailed:
					return 0, fmt.Errorf("session %s: task failed: %s", id, e.Payload)
				}
			case <-ctx.Done():
				return 0, fmt.Errorf("session %s: no end of task: %w", id, ctx.Err())
			}
		}
	}
	r, err := measure(ctx, o, fmt.Sprintf("embedded-r%d", round), run, fmt.Sprintf("embedded-r%d", round))
	if err != nil {
		return r, err
	}
	summary, err := checkLog(ctx, n.Log(), o.warmup+o.tasks)
	r.notes = append(r.notes, summary, "node: "+handlerStats(n))
	return r, err
}
