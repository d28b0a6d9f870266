package a2a

import (
	"context"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// Pushes after a restart. The SDK posts a task's notifications from the execution
// that runs it, in the process the client's message came to; a restart ends that
// execution, and the node resumes the task (a fold of its session) with no client
// connected, which is when a client relies on its webhook. So a node that starts
// follows each task that has push configs and has not ended (ResumePushes): it
// posts the task as its events tell it (taskOf) at each change of its state, from
// the state it is in, to its end. A notification may come twice (one from before
// the restart, or from an execution a client starts again, an approval): each is
// the whole task, as a retried one is. A task that ended before its end was posted
// to a config (the webhook took it, or refused it for good: messages.A2APushFinal)
// has it posted by the next node that starts (finishPushes), and by the nodes that
// run, within the hour (FinishPushes).

// resumePoll is how often a followed task's session is read again while its live
// events do not come (its watch ended: it fell behind, or the node closes).
const resumePoll = time.Second

// ResumePushes follows, until ctx ends, the tasks with push configs that had not
// ended when it was called, posting their updates to their configs (see Pushes
// after a restart above). It does nothing without ServerConfig.PushLog.
func (s *Server) ResumePushes(ctx context.Context) {
	if s.pushes == nil || s.pushes.ended == nil {
		return
	}
	var infos []eventlog.SessionInfo
	err := s.untilRead(ctx, "list the tasks with push configs", func() (err error) {
		infos, err = s.pushes.log.Sessions(ctx, eventlog.Filter{Prefix: eventlog.A2APushStreamPrefix})
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("a2a push: the tasks with push configs cannot be listed; those that run get no notification until a client sends them a message", "err", err)
		}
		return
	}
	ids := pushedTasks(infos)
	for len(ids) > 0 {
		batch := ids[:min(len(ids), pushPruneBatch)]
		ids = ids[len(batch):]
		var ended map[sdk.TaskID]bool
		err := s.untilRead(ctx, "tell which tasks with push configs ended", func() (err error) {
			ended, err = s.pushes.ended.EndedAmong(ctx, batch)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("a2a push: which tasks with push configs run cannot be told; they get no notification until a client sends them a message", "tasks", len(batch), "err", err)
			}
			continue
		}
		var done []sdk.TaskID
		for _, id := range batch {
			if !ended[id] {
				go s.followPushes(ctx, id)
			} else {
				done = append(done, id)
			}
		}
		if len(done) > 0 {
			go s.finishPushes(ctx, done, 0)
		}
	}
}

// untilRead runs read, a read of the log as the node starts following pushes, and
// retries a failure with backoff (capped at 5 s) while eventlog.ReadRetry says a
// retry may mend it (an outage, for as long as it lasts; an error of unknown kind,
// for eventlog.UnknownFailureBound), until it succeeds or ctx ends: before, a
// ClickHouse blip as the node started left the tasks with push configs
// unfollowed, their webhooks unaware of their ends. A permanent error (a closed
// log, a corrupt row, a ClickHouse schema or auth error) is returned at once.
func (s *Server) untilRead(ctx context.Context, what string, read func() error) error {
	_, err := eventlog.RetryRead(ctx, 100*time.Millisecond, nil, func(int) error { return read() }, func(attempt int, wait time.Duration, err error) {
		s.cfg.Logger.Warn("a2a push: the log cannot be read; retrying", "read", what, "attempt", attempt, "retry_in", wait, "err", err)
	})
	return err
}

// pushSettle is how long after a task's last event FinishPushes leaves its end to
// the sender that posts it as the task ends: the end's tries (pushEndTimeout),
// and a minute more.
const pushSettle = pushEndTimeout + time.Minute

// FinishPushes posts the end of each task that ended, its last event pushSettle
// ago or more, to those of its configs it was not posted to
// (PushStore.Unfinished), but not to a config this node's sender has a post of
// the task queued or in flight for: the node that was to post it closed
// meanwhile (Server.Close cuts a post in flight), and no node may start after it
// (ResumePushes). Each task with push configs is asked about: which ended (a few
// reads a batch), then the streams of those that did (a read a task). The
// pruning loop runs it (PrunePushes). A read that fails is logged, and tried
// again next time.
func (s *Server) FinishPushes(ctx context.Context) {
	if s.pushes == nil || s.pushes.ended == nil {
		return
	}
	infos, err := s.pushes.log.Sessions(ctx, eventlog.Filter{Prefix: eventlog.A2APushStreamPrefix})
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("a2a push: the tasks with push configs cannot be listed; the ends not posted are posted later", "err", err)
		}
		return
	}
	ids := pushedTasks(infos)
	for len(ids) > 0 && ctx.Err() == nil {
		batch := ids[:min(len(ids), pushPruneBatch)]
		ids = ids[len(batch):]
		ended, err := s.pushes.ended.EndedAmong(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("a2a push: which tasks with push configs ended cannot be told; the ends not posted are posted later", "tasks", len(batch), "err", err)
			}
			continue
		}
		var done []sdk.TaskID
		for _, id := range batch {
			if ended[id] {
				done = append(done, id)
			}
		}
		s.finishPushes(ctx, done, pushSettle)
	}
}

// finishPushes posts the end of each of the ended tasks ids to those of its configs
// it was not posted to (PushStore.Unfinished): the node that was to post it may
// have stopped after the task ended and before the webhook took it. With settled
// (0: none), a task whose last event is more recent than that is left to the
// sender posting it as it ends, and so is a config this node's sender has a post
// of the task queued or in flight for (PushSender.busy).
func (s *Server) finishPushes(ctx context.Context, ids []sdk.TaskID, settled time.Duration) {
	sender := s.sender
	// Settled, the task ended minutes ago: no node posts an update of it any
	// more, so its end needs no lease of the task's notifications (another
	// node posting it too posts it twice, as an end may be). And it must take
	// none: a webhook down for good has the end posted again every hour, and a
	// lease written each time would keep the task's push stream changed, so
	// that Prune never gave it up (PushUnpostedRetention).
	sender.unleased = settled > 0
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		configs, err := s.pushes.Unfinished(ctx, id)
		if err != nil {
			s.cfg.Logger.Warn("a2a push: the configs of an ended task cannot be read; its end is not posted again", "task", id, "err", err)
			continue
		}
		if len(configs) == 0 {
			continue
		}
		session, envID, ok := ParseTaskID(id)
		if !ok {
			continue
		}
		events, err := s.backend.Events(ctx, session, 1)
		if err != nil {
			s.cfg.Logger.Warn("a2a push: an ended task cannot be read; its end is not posted again", "task", id, "err", err)
			continue
		}
		task, _, err := taskOf(id, session, envID, events)
		if err != nil || !task.Status.State.Terminal() {
			continue // gone (its session was deleted), or not its end
		}
		if settled > 0 && len(events) > 0 && time.Since(time.UnixMicro(events[len(events)-1].TS)) < settled {
			continue // the sender that posts the end as the task ends may still be at it
		}
		for _, c := range configs {
			if settled > 0 && s.push.busy(id, c) {
				continue
			}
			if err := sender.SendPush(ctx, c, task); err != nil {
				s.cfg.Logger.Warn("a2a push: the task's end is not posted", "task", id, "config", c.ID, "err", err)
			}
		}
	}
}

// followPushes posts task id to its push configs at each change of its state,
// from the state it is in now to its end (or until ctx ends).
func (s *Server) followPushes(ctx context.Context, id sdk.TaskID) {
	session, envID, ok := ParseTaskID(id)
	if !ok {
		return
	}
	live, stop := s.backend.Watch(session)
	defer func() { stop() }()
	poll := time.NewTicker(resumePoll)
	defer poll.Stop()
	var posted sdk.TaskState
	from := uint64(1) // the task's task.submitted, once read: the events before are not its
	for {
		events, err := s.backend.Events(ctx, session, from)
		if err == nil {
			task, _, terr := taskOf(id, session, envID, events)
			if terr != nil {
				return // the task is gone (its session was deleted)
			}
			for _, e := range events {
				if e.Type == messages.TypeTaskSubmitted && e.ID == envID {
					from = e.Seq
					break
				}
			}
			if st := task.Status.State; st != posted {
				posted = st
				s.postPushes(ctx, task)
				if st.Terminal() {
					return
				}
			}
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-live:
				if !ok {
					live = nil
					break wait
				}
				if e.Type != messages.TypeModelDelta {
					break wait
				}
			case <-poll.C:
				if live == nil {
					stop()
					live, stop = s.backend.Watch(session)
				}
				break wait
			}
		}
	}
}

// postPushes posts task to each of its push configs that its end was not posted
// to, as the log has them now (PushStore.Unfinished): task, read before, may be
// stale, and another node, or this one before a restart, may have posted the end
// since (a running task posted after its end would run again for the webhook).
func (s *Server) postPushes(ctx context.Context, task *sdk.Task) {
	configs, err := s.pushes.Unfinished(ctx, task.ID)
	if err != nil {
		s.cfg.Logger.Warn("a2a push: the task's push configs cannot be read; its update is not posted", "task", task.ID, "state", task.Status.State, "err", err)
		return
	}
	for _, c := range configs {
		if err := s.sender.SendPush(ctx, c, task); err != nil {
			s.cfg.Logger.Warn("a2a push: the task's update is not posted", "task", task.ID, "config", c.ID, "err", err)
		}
	}
}

// pushedTasks returns the tasks whose push streams infos list.
func pushedTasks(infos []eventlog.SessionInfo) []sdk.TaskID {
	var ids []sdk.TaskID
	for _, info := range infos {
		if IsPushStream(info.ID) && info.ID != eventlog.A2APushStreamPrefix {
			ids = append(ids, taskOfStream(info.ID))
		}
	}
	return ids
}
