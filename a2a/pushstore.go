package a2a

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/push"
	"github.com/google/uuid"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// PushStreamFor is the stream of the log that holds task id's push-notification
// configs.
func PushStreamFor(id sdk.TaskID) string {
	return eventlog.A2APushStreamPrefix + string(id)
}

// PushStatus is the status a session listing gives a task's push-config stream: it
// is a stream of the log, not a session (eventlog.IsSession), and no task runs there.
const PushStatus = "a2a-push"

// IsPushStream reports whether a stream of the log holds a task's push configs.
func IsPushStream(id string) bool { return strings.HasPrefix(id, eventlog.A2APushStreamPrefix) }

// pushRefresh is how long a task's configs, as a PushStore folded them, are used
// before the store reads what was appended to their stream since (by another node
// over the same log).
const pushRefresh = time.Second

// maxPushConfigs bounds the push configs of a task: each is an event of its stream
// and a POST at every update of the task.
const maxPushConfigs = 32

// pushAppendAttempts bounds the appends of one change that find their seq taken by
// another writer.
const pushAppendAttempts = 5

// PushStore is the a2asrv.PushConfigStore of a node's A2A tasks: a task's configs are
// events of a stream of their own in the log (PushStreamFor: messages.A2APushSet,
// messages.A2APushDeleted), so that they outlive the process, and every node over
// the same log has them. A config's secrets (its token, its authentication
// credentials) are never written to the log in plain text: with a sealer they are
// written sealed with the node's secret key (PushSealer), and every node with the
// same key reads them back, after a restart too. A config whose secrets cannot be
// read back (recorded without a sealer, or sealed with another key) is listed
// without them, its Get fails with ErrUndecryptable when they were sealed, and no
// notification is posted to it (Withheld): give the node the right key, or set the
// config again.
type PushStore struct {
	log    eventlog.Log
	sealer *PushSealer // nil: secrets are kept in memory only
	logger *slog.Logger
	now    func() time.Time
	// ended, when set, tells which tasks ended (no notification follows): a
	// config of such a task whose secrets do not open is no trouble, and Prune
	// deletes their configs.
	ended TaskEnds
	// pruneBatch bounds the streams of one deletion of Prune: pushPruneBatch.
	pruneBatch int
	// node names this store as the holder of the leases it takes (lease).
	node string
	// alone says that no other store posts the notifications of the log's tasks
	// (ServerConfig.PushAlone): they take no lease.
	alone bool
	mu    sync.Mutex
	// tasks are the tasks' configs as folded, by task.
	tasks map[sdk.TaskID]*taskPushes
}

var _ a2asrv.PushConfigStore = (*PushStore)(nil)

// taskPushes are a task's configs: its stream folded up to seq.
type taskPushes struct {
	seq     uint64
	read    time.Time // when the stream was last read
	used    time.Time
	configs map[string]*sdk.PushConfig
	// withheld are the configs read from the log whose secrets this process does
	// not know; warned, those whose notification not sent was logged.
	withheld, warned map[string]bool
	// sealedErr are the configs whose sealed secrets did not open, with why
	// (wrapping ErrUndecryptable).
	sealedErr map[string]error
	// v1 are the configs set by an A2A 1.0 request: their notifications are 1.0's.
	v1 map[string]bool
	// final are the configs the task's end was posted to (messages.A2APushFinal).
	final map[string]bool
	// holder is the store that holds the lease of the task's notifications, until
	// untilUS (see lease); empty: none took one.
	holder  string
	untilUS int64
	// leaseFailed are the asks for the lease that failed in a row, the log
	// failing (see PushStore.leaseAsked).
	leaseFailed leaseFailures
}

// leaseFailures are the asks for the lease of a task's notifications that failed
// in a row: n of them since the first, the last warned of at warned.
type leaseFailures struct {
	n             int
	since, warned time.Time
}

// NewPushStore returns a store of push configs in log. With sealer, configs'
// secrets are recorded sealed; without, they are kept in this process's memory
// only. Problems are logged to logger (nil: none).
func NewPushStore(log eventlog.Log, sealer *PushSealer, logger *slog.Logger) *PushStore {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var node [12]byte
	_, _ = rand.Read(node[:])
	return &PushStore{log: log, sealer: sealer, logger: logger, now: time.Now, pruneBatch: pushPruneBatch,
		node: hex.EncodeToString(node[:]), tasks: map[sdk.TaskID]*taskPushes{}}
}

// load returns task id's configs, reading what its stream has past them when they
// were read more than pushRefresh ago (force: always). The caller holds s.mu.
func (s *PushStore) load(ctx context.Context, id sdk.TaskID, force bool) (*taskPushes, error) {
	t := s.tasks[id]
	now := s.now()
	if t == nil {
		if len(s.tasks) >= maxLiveTasks {
			s.dropOldest()
		}
		t = newTaskPushes()
		s.tasks[id] = t
		force = true
	}
	t.used = now
	if !force && now.Sub(t.read) < pushRefresh {
		return t, nil
	}
	stream := PushStreamFor(id)
	events, err := s.log.Read(ctx, stream, t.seq+1)
	if err != nil {
		return nil, fmt.Errorf("a2a: push configs of task %s: %w", id, err)
	}
	for _, e := range events {
		failed, err := t.apply(e, s.sealer)
		if err != nil {
			return nil, err
		}
		switch {
		case failed == "":
		case s.ended != nil && s.ended.Ended(ctx, id):
			s.logger.Info("a2a push: a config's token and credentials cannot be decrypted; its task ended, so it needs them no more",
				"task", id, "config", failed, "err", t.sealedErr[failed])
		default:
			s.logger.Error("a2a push: a config's token and credentials cannot be decrypted: it gets no notification until the node has the key they were sealed with, or the config is set again",
				"task", id, "config", failed, "err", t.sealedErr[failed])
		}
	}
	t.read = now
	return t, nil
}

// PushRetention is how long the push configs of a task that ended are kept
// after their last change (PushStore.Prune).
const PushRetention = 24 * time.Hour

// pushPruneBatch bounds the streams of one deletion of PushStore.Prune (at most
// eventlog.MaxPruneListed): on ClickHouse each is one mutation per table, so
// that a node with thousands of ended tasks runs a few, not thousands.
const pushPruneBatch = 500

// PushUnpostedRetention is how much longer than the others the push configs of a
// task that ended are kept when its end was not posted to one of them (no
// messages.A2APushFinal: the node posting it closed, or the webhook kept failing):
// meanwhile, every node over the log posts the end again each hour
// (Server.PrunePushes); past it, the end is given up.
const PushUnpostedRetention = PushRetention

// Prune deletes from the log the push configs of the tasks that ended (their
// stream), once their last change is older than before (older than before less
// PushUnpostedRetention when the task's end was not posted to one of them),
// and forgets them; it returns how many it deleted.
// A task's configs stay while it runs or waits, however old they are, and so do
// those of a task changed since the listing Prune starts from. The streams go
// pushPruneBatch at a time: which of their tasks ended is asked once per batch
// (TaskEnds.EndedAmong), and those are deleted in one deletion
// (eventlog.Pruner.PruneListed). It needs a log that prunes (eventlog.Pruner) and
// a store that knows which tasks ended (SetEnded); else it does nothing.
func (s *PushStore) Prune(ctx context.Context, before time.Time) (int, error) {
	p, ok := s.log.(eventlog.Pruner)
	if !ok || s.ended == nil {
		return 0, nil
	}
	infos, err := s.log.Sessions(ctx, eventlog.Filter{Prefix: eventlog.A2APushStreamPrefix})
	if err != nil {
		return 0, fmt.Errorf("a2a: list the push configs: %w", err)
	}
	pruned := 0
	unpostedBefore := before.Add(-PushUnpostedRetention).UnixMicro()
	// due are streams old enough, whose tasks are asked about a batch at a time;
	// batch those of ended tasks, deleted a batch at a time.
	due := make([]eventlog.StreamBound, 0, min(len(infos), s.pruneBatch))
	batch := make([]eventlog.StreamBound, 0, min(len(infos), s.pruneBatch))
	flush := func() error {
		n, err := p.PruneListed(ctx, batch)
		if err != nil {
			return fmt.Errorf("a2a: prune the push configs of %d ended tasks (of task %s on): %w", len(batch), taskOfStream(batch[0].ID), err)
		}
		pruned += n
		s.mu.Lock()
		for _, b := range batch {
			delete(s.tasks, taskOfStream(b.ID))
		}
		s.mu.Unlock()
		batch = batch[:0]
		return nil
	}
	ask := func() error {
		ids := make([]sdk.TaskID, len(due))
		for i, b := range due {
			ids[i] = taskOfStream(b.ID)
		}
		ended, err := s.ended.EndedAmong(ctx, ids)
		if err != nil {
			return fmt.Errorf("a2a: which of %d tasks with push configs ended (of task %s on): %w", len(ids), ids[0], err)
		}
		for _, b := range due {
			id := taskOfStream(b.ID)
			if !ended[id] {
				continue
			}
			if b.BeforeUS-1 >= unpostedBefore {
				// Recent enough to be kept if its end was not posted.
				unposted, err := s.unposted(ctx, id)
				if err != nil {
					return err
				}
				if unposted {
					continue
				}
			}
			if batch = append(batch, b); len(batch) == s.pruneBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		due = due[:0]
		return nil
	}
	for _, info := range infos {
		if info.UpdatedUS >= before.UnixMicro() || !IsPushStream(info.ID) || info.ID == eventlog.A2APushStreamPrefix {
			continue
		}
		// Only the events stamped up to the last one seen: a config set meanwhile
		// keeps the stream.
		if due = append(due, eventlog.StreamBound{ID: info.ID, BeforeUS: info.UpdatedUS + 1}); len(due) == s.pruneBatch {
			if err := ask(); err != nil {
				return pruned, err
			}
		}
	}
	if len(due) > 0 {
		if err := ask(); err != nil {
			return pruned, err
		}
	}
	if len(batch) > 0 {
		return pruned, flush()
	}
	return pruned, nil
}

// unposted reports whether task id has a config its end was not posted to
// (Final), as its stream in the log has them now. The stream is read apart from
// the configs the store holds: Prune reads many, none of them used again.
func (s *PushStore) unposted(ctx context.Context, id sdk.TaskID) (bool, error) {
	events, err := s.log.Read(ctx, PushStreamFor(id), 1)
	if err != nil {
		return false, fmt.Errorf("a2a: push configs of task %s: %w", id, err)
	}
	t := newTaskPushes()
	for _, e := range events {
		if _, err := t.apply(e, nil); err != nil {
			return false, err
		}
	}
	for cid := range t.configs {
		if !t.final[cid] {
			return true, nil
		}
	}
	return false, nil
}

// TaskEnds tells a PushStore which tasks ended: no notification follows, so a
// config of theirs whose secrets do not open is no trouble, and Prune deletes
// their configs. TaskStore is one.
type TaskEnds interface {
	// Ended reports whether task id ended; a task that does not exist did (none
	// is to be notified of).
	Ended(ctx context.Context, id sdk.TaskID) bool
	// EndedAmong tells, as Ended does, which of ids ended (true) and which did not
	// (false or absent), in a few reads however many they are, not one a task;
	// an error when it cannot tell.
	EndedAmong(ctx context.Context, ids []sdk.TaskID) (map[sdk.TaskID]bool, error)
}

// SetEnded tells the store how to know that a task ended (no notification
// follows): see TaskEnds.
func (s *PushStore) SetEnded(ended TaskEnds) { s.ended = ended }

// dropOldest forgets the half of the tasks used least recently (their stream still
// has their configs, not the secrets this process knew). The caller holds s.mu.
func (s *PushStore) dropOldest() {
	ids := make([]sdk.TaskID, 0, len(s.tasks))
	for id := range s.tasks {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return s.tasks[ids[i]].used.Before(s.tasks[ids[j]].used) })
	for _, id := range ids[:len(ids)/2] {
		delete(s.tasks, id)
	}
}

// apply folds an event of the task's stream, opening the secrets it holds sealed
// with sealer (nil: none are opened); failed names the config it set whose sealed
// secrets did not open (t.sealedErr says why).
func (t *taskPushes) apply(e messages.Envelope, sealer *PushSealer) (failed string, err error) {
	p, err := e.Decode()
	if err != nil {
		return "", fmt.Errorf("a2a: push configs %s: %w", e.SessionID, err)
	}
	switch v := p.(type) {
	case *messages.A2APushSet:
		c := &sdk.PushConfig{ID: v.ConfigID, URL: v.URL}
		if len(v.Schemes) > 0 || v.HadCredentials {
			c.Auth = &sdk.PushAuthInfo{Schemes: slices.Clone(v.Schemes)}
		}
		t.configs[v.ConfigID] = c
		t.v1[v.ConfigID] = v.Version == V1ProtocolVersion
		t.withheld[v.ConfigID] = v.HadToken || v.HadCredentials || v.HadURLCredentials
		delete(t.sealedErr, v.ConfigID)
		delete(t.warned, v.ConfigID)
		delete(t.final, v.ConfigID)
		switch {
		case v.Sealed == "":
		case sealer == nil:
			t.sealedErr[v.ConfigID] = fmt.Errorf("%w: this node has no secret key", ErrUndecryptable)
			failed = v.ConfigID
		default:
			sec, err := sealer.open(taskOfStream(e.SessionID), v.ConfigID, v.Sealed)
			if err != nil {
				t.sealedErr[v.ConfigID] = err
				failed = v.ConfigID
				break
			}
			c.Token = sec.Token
			if v.HadURLCredentials && sec.URL != "" {
				c.URL = sec.URL
			}
			if c.Auth != nil {
				c.Auth.Credentials = sec.Credentials
			}
			t.withheld[v.ConfigID] = false
		}
	case *messages.A2APushDeleted:
		if v.ConfigID == "" {
			clear(t.configs)
			clear(t.withheld)
			clear(t.sealedErr)
			clear(t.v1)
			clear(t.final)
		} else {
			delete(t.configs, v.ConfigID)
			delete(t.withheld, v.ConfigID)
			delete(t.sealedErr, v.ConfigID)
			delete(t.v1, v.ConfigID)
			delete(t.final, v.ConfigID)
		}
	case *messages.A2APushFinal:
		if v.ConfigID == "" && v.Holder != "" {
			t.holder, t.untilUS = v.Holder, v.UntilUS
		} else if t.configs[v.ConfigID] != nil {
			t.final[v.ConfigID] = true
		}
	default:
		return "", fmt.Errorf("a2a: push configs %s seq %d: a %s event has no place there", e.SessionID, e.Seq, e.Type)
	}
	t.seq = e.Seq
	return failed, nil
}

// taskOfStream is the task whose push configs stream holds.
func taskOfStream(stream string) sdk.TaskID {
	return sdk.TaskID(strings.TrimPrefix(stream, eventlog.A2APushStreamPrefix))
}

// write appends the event change builds (nil: nothing to write) to task id's stream
// at the next seq, again after reading the stream when another writer took it, then
// folds it and runs after (which may restore what the log does not hold).
func (s *PushStore) write(ctx context.Context, id sdk.TaskID, change func(*taskPushes) messages.Payload, after func(*taskPushes)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range pushAppendAttempts {
		t, err := s.load(ctx, id, true)
		if err != nil {
			return err
		}
		p := change(t)
		if p == nil {
			return nil
		}
		e, err := messages.NewEnvelope(p)
		if err != nil {
			return err
		}
		var b [12]byte
		_, _ = rand.Read(b[:])
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = "a2apush-"+hex.EncodeToString(b[:]), PushStreamFor(id), t.seq+1, s.now().UnixMicro(), "a2a"
		err = s.log.Append(ctx, []messages.Envelope{e})
		if errors.Is(err, eventlog.ErrSeqConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("a2a: push configs of task %s: %w", id, err)
		}
		if _, err := t.apply(e, s.sealer); err != nil {
			return err
		}
		if after != nil {
			after(t)
		}
		return nil
	}
	return fmt.Errorf("a2a: push configs of task %s: %d appends in a row found their seq taken by another writer", id, pushAppendAttempts)
}

// Save implements a2asrv.PushConfigStore: it records the config with its secrets
// sealed (PushSealer), or without them, which this process then keeps, when the
// store has no sealer. A secret that cannot be sealed (no key) fails the save. A
// config set by an A2A 1.0 request (isV1) is recorded as such: its notifications
// speak 1.0 (V1).
func (s *PushStore) Save(ctx context.Context, id sdk.TaskID, config *sdk.PushConfig) (*sdk.PushConfig, error) {
	if config == nil || config.URL == "" {
		return nil, fmt.Errorf("%w: a push config needs a url", sdk.ErrInvalidParams)
	}
	if _, err := url.ParseRequestURI(config.URL); err != nil {
		return nil, fmt.Errorf("%w: push config url: %v", sdk.ErrInvalidParams, err)
	}
	c := copyConfig(config)
	if c.ID == "" {
		c.ID = uuid.Must(uuid.NewV7()).String()
	}
	// A URL's credentials (https://hooks.example/x?token=...) are secrets like the
	// token: the event has the URL without them.
	set := &messages.A2APushSet{ConfigID: c.ID, URL: redact.URL(c.URL), HadToken: c.Token != ""}
	set.HadURLCredentials = set.URL != c.URL
	if isV1(ctx) {
		set.Version = V1ProtocolVersion
	}
	if c.Auth != nil {
		set.Schemes, set.HadCredentials = slices.Clone(c.Auth.Schemes), c.Auth.Credentials != ""
	}
	if s.sealer != nil && (set.HadToken || set.HadCredentials || set.HadURLCredentials) {
		sec := pushSecrets{Token: c.Token}
		if set.HadURLCredentials {
			sec.URL = c.URL
		}
		if c.Auth != nil {
			sec.Credentials = c.Auth.Credentials
		}
		sealed, err := s.sealer.seal(id, c.ID, sec)
		if err != nil {
			s.logger.Error("a2a push: a config's token and credentials cannot be sealed: the config is not set", "task", id, "config", c.ID, "err", err)
			return nil, fmt.Errorf("%w: the push config's token and credentials cannot be kept: %w", sdk.ErrInternalError, err)
		}
		set.Sealed = sealed
	}
	var full error
	err := s.write(ctx, id, func(t *taskPushes) messages.Payload {
		if _, again := t.configs[c.ID]; !again && len(t.configs) >= maxPushConfigs {
			full = fmt.Errorf("%w: task %s has %d push configs, the most a task has: delete one, or set one again by its id", sdk.ErrInvalidParams, id, maxPushConfigs)
			return nil
		}
		full = nil
		return set
	}, func(t *taskPushes) {
		t.configs[c.ID] = c
		t.withheld[c.ID] = false
	})
	if err == nil {
		err = full
	}
	if err != nil {
		return nil, err
	}
	return copyConfig(c), nil
}

// Get implements a2asrv.PushConfigStore: a config the task does not have is an
// error wrapping sdk.ErrTaskNotFound and push.ErrPushConfigNotFound. No configID
// (A2A 0.3's pushNotificationConfigId is optional) is the task's first config, as
// List orders them, as the 0.3 SDKs' servers answer with the task's first.
func (s *PushStore) Get(ctx context.Context, id sdk.TaskID, configID string) (*sdk.PushConfig, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.load(ctx, id, false)
	if err != nil {
		return nil, err
	}
	if configID == "" && len(t.configs) > 0 {
		configID = slices.Min(slices.Collect(maps.Keys(t.configs)))
	}
	c, ok := t.configs[configID]
	if !ok {
		// TaskNotFoundError (-32001) naming it, as the A2A SDKs' servers (Python,
		// JavaScript) answer: the SDK's own error is no A2A error, answered as
		// -32603 "internal error" without a word.
		return nil, fmt.Errorf("%w: task %s has no push config %q (%w)", sdk.ErrTaskNotFound, id, configID, push.ErrPushConfigNotFound)
	}
	if err := t.sealedErr[configID]; err != nil {
		return nil, fmt.Errorf("%w: push config %s of task %s: %w", sdk.ErrInternalError, configID, id, err)
	}
	return copyConfig(c), nil
}

// List implements a2asrv.PushConfigStore: the task's configs by ID (one whose
// secrets cannot be decrypted without them: Get says why).
func (s *PushStore) List(ctx context.Context, id sdk.TaskID) ([]*sdk.PushConfig, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.load(ctx, id, false)
	if err != nil {
		return nil, err
	}
	out := make([]*sdk.PushConfig, 0, len(t.configs))
	for _, c := range t.configs {
		out = append(out, copyConfig(c))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Delete implements a2asrv.PushConfigStore (a config the task does not have: nothing
// to do).
func (s *PushStore) Delete(ctx context.Context, id sdk.TaskID, configID string) error {
	return s.write(ctx, id, func(t *taskPushes) messages.Payload {
		if _, ok := t.configs[configID]; !ok || configID == "" {
			return nil
		}
		return &messages.A2APushDeleted{ConfigID: configID}
	}, nil)
}

// DeleteAll implements a2asrv.PushConfigStore.
func (s *PushStore) DeleteAll(ctx context.Context, id sdk.TaskID) error {
	return s.write(ctx, id, func(t *taskPushes) messages.Payload {
		if len(t.configs) == 0 {
			return nil
		}
		return &messages.A2APushDeleted{}
	}, nil)
}

// Withheld reports whether task id's config is one read from the log whose token or
// credentials this process does not know: a notification is not posted to it. first
// is true the first time it says so of the config; why wraps ErrUndecryptable when
// they were sealed and did not open.
func (s *PushStore) Withheld(id sdk.TaskID, configID string) (withheld, first bool, why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[id]
	if t == nil || !t.withheld[configID] {
		return false, false, nil
	}
	first = !t.warned[configID]
	t.warned[configID] = true
	return true, first, t.sealedErr[configID]
}

// V1 reports whether task id's config was set by an A2A 1.0 request: its
// notifications are 1.0's StreamResponse, not 0.3's task.
func (s *PushStore) V1(id sdk.TaskID, configID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[id]
	return t != nil && t.v1[configID]
}

// Final records that task id's end (state) was posted to its config configID, the
// webhook answering status (messages.A2APushFinal), unless that is recorded
// already or the config is no more.
func (s *PushStore) Final(ctx context.Context, id sdk.TaskID, configID string, state sdk.TaskState, status int) error {
	return s.write(ctx, id, func(t *taskPushes) messages.Payload {
		if t.configs[configID] == nil || t.final[configID] {
			return nil
		}
		return &messages.A2APushFinal{ConfigID: configID, State: string(state), Status: status}
	}, nil)
}

// EndPosted reports whether task id's end was posted to its config configID
// (Final), as the store last read the task's configs: no update of the running
// task may follow it (a stale one, read before the end).
func (s *PushStore) EndPosted(id sdk.TaskID, configID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[id]
	return t != nil && t.final[configID]
}

// Current reports whether cfg is still task id's config of its ID, with its URL
// and token, as the store read the task's configs within pushRefresh: one
// deleted, or set again with another, is not. A read that fails says it is.
func (s *PushStore) Current(ctx context.Context, id sdk.TaskID, cfg *sdk.PushConfig) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.load(ctx, id, false)
	if err != nil {
		return true
	}
	c := t.configs[cfg.ID]
	return c != nil && c.URL == cfg.URL && c.Token == cfg.Token
}

// Unfinished returns task id's configs its end was not posted to (Final), sorted
// by ID.
func (s *PushStore) Unfinished(ctx context.Context, id sdk.TaskID) ([]*sdk.PushConfig, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.load(ctx, id, true)
	if err != nil {
		return nil, err
	}
	var out []*sdk.PushConfig
	for cid, c := range t.configs {
		if !t.final[cid] {
			out = append(out, copyConfig(c))
		}
	}
	slices.SortFunc(out, func(a, b *sdk.PushConfig) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// copyConfig is a deep copy of c.
func copyConfig(c *sdk.PushConfig) *sdk.PushConfig {
	out := *c
	if c.Auth != nil {
		a := *c.Auth
		a.Schemes = slices.Clone(c.Auth.Schemes)
		out.Auth = &a
	}
	return &out
}

// storeSender is the push sender of one agent's tasks: PushSender's, but a config
// whose secrets its store does not know (PushStore.Withheld) gets no notification,
// nor an update of a running task once its end was posted to the config
// (PushStore.EndPosted: by this process before a restart, or by another node): a
// stale update would tell the webhook that a task that ended runs again. A config
// deleted (or changed) while a notification of its is tried again gets no more
// tries (PushStore.Current). Another node over the same log may post the task's
// notifications too: a notification is posted only while this node holds the
// task's lease (see The lease of a task's notifications), so that none lands
// after another node's end.
type storeSender struct {
	*PushSender
	store *PushStore
	// unleased posts without the lease: the ends FinishPushes posts again,
	// minutes after the task's last event (pushSettle), when no update of the
	// task is posted any more.
	unleased bool
}

// SendPush implements a2asrv.PushSender.
func (s storeSender) SendPush(ctx context.Context, cfg *sdk.PushConfig, task *sdk.Task) error {
	if withheld, first, why := s.store.Withheld(task.ID, cfg.ID); withheld {
		switch {
		case !first:
		case why != nil:
			s.logger.Error("a2a push: not sent: the config's token and credentials cannot be decrypted", "task", task.ID, "config", cfg.ID, "err", why)
		default:
			s.logger.Warn("a2a push: not sent: the config's token or credentials were kept by the node that was given them only (it had no secret key); set the config again",
				"task", task.ID, "config", cfg.ID)
		}
		return nil
	}
	if !task.Status.State.Terminal() && s.store.EndPosted(task.ID, cfg.ID) {
		return nil
	}
	lease := s.store.lease
	if s.unleased {
		lease = nil
	}
	return s.PushSender.push(ctx, cfg, task, s.store.V1(task.ID, cfg.ID), s.store.Current, lease)
}

// The lease of a task's notifications. Each post is the whole task, and a webhook
// must never hear a task run again after its end: with several nodes over one log
// posting a task's notifications (the one its client's message came to, those
// that follow it since they started: Server.ResumePushes, those that post its
// end late: Server.FinishPushes), a node could post a stale update of the running
// task as, or after, another posted its end, whatever it read of the log before
// (the end is recorded only once the webhook took it). So a node posts a task's
// notification only while it holds the task's lease, an event of the task's
// push stream (messages.A2APushFinal with a Holder) appended at the seq after
// the last it read: of two nodes taking it at once, one append fails. A node
// holding it starts a post only when the lease lasts long enough for the post's
// attempt, the recording of an end posted, and a skew of the nodes' clocks
// (pushLeaseMargin); another takes it only once it expired. So two nodes' posts
// never overlap, and the node that takes the lease after an end was posted reads
// that it was (A2APushFinal, recorded within the margin). A node not holding it
// skips updates of the running task (a later post, or the end, holds what they
// say) and waits with an end, or an update of a task waiting for its client
// (which may be the last post for long: awaited), until it may take the lease;
// an end stops waiting once it reads (each ask reads the stream again) that the
// holder posted the end to the config: the webhook must not take it twice.
// A node posting takes the lease, or renews it, once per pushLeaseTerm at most
// less the margin: one write to the log per period, and no read, while it holds.
const (
	pushLeaseTerm   = 90 * time.Second
	pushLeaseSkew   = 5 * time.Second
	pushLeaseMargin = pushAttemptTimeout + pushFinalTimeout + pushLeaseSkew
	// pushLeasePoll bounds the wait of an end (or of a task waiting for its
	// client) for the lease before the node asks again (the holder may have
	// posted it meanwhile).
	pushLeasePoll = time.Second
)

// Release gives up the leases of the tasks' notifications this store holds (see
// The lease of a task's notifications), so that the node that follows a task
// next posts at once, not once they expire. Call it once this node posts no more
// (PushSender.Close), before the log closes.
func (s *PushStore) Release(ctx context.Context) error {
	s.mu.Lock()
	var held []sdk.TaskID
	now := s.now().UnixMicro()
	for id, t := range s.tasks {
		if t.holder == s.node && t.untilUS >= now {
			held = append(held, id)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, id := range held {
		errs = append(errs, s.write(ctx, id, func(t *taskPushes) messages.Payload {
			if t.holder != s.node || t.untilUS < s.now().UnixMicro() {
				return nil
			}
			return &messages.A2APushFinal{Holder: s.node, UntilUS: 1}
		}, nil))
	}
	return errors.Join(errs...)
}

// lease reports whether this store's node may post now to config configID a
// notification of task id (end: of its end) and takes or renews the task's lease
// to do so (see The lease of a task's notifications); when not, wait (0: never)
// is how long the notification waits before it asks again: one another node
// holds the lease for waits when await (its end, a task waiting for its client:
// awaited), else it is left to that node. An end whose post to the config is
// recorded (Final) under another node's lease, held or expired, is not posted:
// that node posted it (a wait for its lease reads the stream again at each
// ask, so an end that waited stops once the end is recorded).
func (s *PushStore) lease(ctx context.Context, id sdk.TaskID, configID string, end, await bool) (ok bool, wait time.Duration) {
	if s.alone {
		return true, 0
	}
	// decide is the answer t, the task's configs as read, gives, with take when
	// the lease is to be taken.
	decide := func(t *taskPushes) (ok, take bool, wait time.Duration) {
		now := s.now()
		switch {
		case t.final[configID] && !end:
			return false, false, 0 // the end was posted: no update follows (the end may come again)
		case t.final[configID] && t.holder != "" && t.holder != s.node:
			// Another node posted the end under its lease (recorded while this
			// node waited for it, or before): not posted again.
			return false, false, 0
		case t.holder == s.node && now.Add(pushLeaseMargin).UnixMicro() <= t.untilUS:
			return true, false, 0
		case t.holder != "" && t.holder != s.node && now.UnixMicro() <= t.untilUS:
			if !await {
				return false, false, 0
			}
			return false, false, min(time.Duration(t.untilUS-now.UnixMicro()+1)*time.Microsecond, pushLeasePoll)
		}
		return false, true, 0
	}
	s.mu.Lock()
	if t := s.tasks[id]; t != nil && t.holder == s.node {
		// Held: no other node writes a lease nor posts an end before it expires,
		// so what this store read and wrote since is all there is to read.
		if ok, take, wait := decide(t); !take {
			t.used = s.now()
			s.mu.Unlock()
			return ok, wait
		}
	}
	t, err := s.load(ctx, id, false)
	take := false
	if err == nil {
		ok, take, wait = decide(t)
	}
	s.mu.Unlock()
	if take {
		err = s.write(ctx, id, func(t *taskPushes) messages.Payload {
			var take bool
			if ok, take, wait = decide(t); !take {
				return nil
			}
			ok = true
			return &messages.A2APushFinal{Holder: s.node, UntilUS: s.now().Add(pushLeaseTerm).UnixMicro()}
		}, nil)
	}
	s.leaseAsked(id, configID, err)
	if err != nil {
		if await {
			return false, pushLeasePoll
		}
		return false, 0
	}
	return ok, wait
}

// pushLeaseWarnEvery bounds the warnings of the asks for a task's lease that
// fail in a row, the log failing: an end asks once per pushLeasePoll for up to
// pushEndTimeout, and each failure warned of was 600 lines of a log down for
// ten minutes. The first is warned of, then one a minute at most, with how many
// failed; the first ask that works again says so.
const pushLeaseWarnEvery = time.Minute

// leaseAsked notes how an ask for task id's lease, for config configID, went
// (err: the log failed) and warns of its failure as pushLeaseWarnEvery says.
func (s *PushStore) leaseAsked(id sdk.TaskID, configID string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var f *leaseFailures
	if t := s.tasks[id]; t != nil {
		f = &t.leaseFailed
	} else {
		f = &leaseFailures{} // forgotten meanwhile (dropOldest, Prune): a first failure
	}
	now := s.now()
	switch {
	case err == nil:
		if f.n > 0 {
			s.logger.Info("a2a push: the lease of the task's notifications can be asked for again", "task", id, "config", configID,
				"failed", f.n, "for", now.Sub(f.since))
		}
		*f = leaseFailures{}
	case f.n == 0:
		*f = leaseFailures{n: 1, since: now, warned: now}
		s.logger.Warn("a2a push: the lease of the task's notifications cannot be taken; not posted now (while it fails, warned of once a minute)",
			"task", id, "config", configID, "err", err)
	default:
		f.n++
		if now.Sub(f.warned) >= pushLeaseWarnEvery {
			f.warned = now
			s.logger.Warn("a2a push: the lease of the task's notifications still cannot be taken; not posted now", "task", id, "config", configID,
				"attempts", f.n, "for", now.Sub(f.since), "err", err)
		}
	}
}

// newTaskPushes returns the empty state of a task's push configs.
func newTaskPushes() *taskPushes {
	return &taskPushes{configs: map[string]*sdk.PushConfig{}, withheld: map[string]bool{}, warned: map[string]bool{},
		sealedErr: map[string]error{}, v1: map[string]bool{}, final: map[string]bool{}}
}
