package eventlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/messages"
)

// Log is the append-only event log seam. Implementations are safe for concurrent use.
type Log interface {
	// Append writes a batch atomically: all events become visible, or none do.
	// Every event must have an ID, a SessionID, a Seq > 0, a Type and a payload that
	// is valid JSON; otherwise Append fails with ErrInvalidEvent and writes nothing.
	// Appending an event whose ID is already stored at the same (session, seq) is a
	// no-op (at-least-once safe), also when it comes inside a batch of new events.
	// Appending a different event at a (session, seq) that is taken, or an ID that is
	// stored at another (session, seq), fails with ErrSeqConflict and writes nothing.
	// An empty batch is a no-op.
	//
	// When ctx ends while Append waits, Append returns an error wrapping ctx.Err()
	// and the batch may or may not have been written; retrying it is safe because
	// Append is idempotent.
	Append(ctx context.Context, events []messages.Envelope) error
	// Read returns the events of a session with Seq >= fromSeq, in Seq order, exactly
	// as appended (payload bytes included). An unknown session returns no events and
	// no error. A stored event that cannot be decoded is returned as an error wrapping
	// messages.ErrCorrupt that names the session and seq; it is never skipped.
	Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error)
	// Sessions lists sessions, most recently started first (ties by ascending ID).
	Sessions(ctx context.Context, f Filter) ([]SessionInfo, error)
	// Close releases the log. It is idempotent; after it, the other methods fail
	// with an error wrapping ErrClosed.
	Close() error
}

// Fencing is the optional capability of a Log that the nodes of a cluster share: it
// fences stale partition owners. Kafka gives each partition of troupe.tasks, and so
// each session keyed to it, one owner at a time, but a node that hangs (a long GC
// pause, SIGSTOP, a VM freeze) past its consumer group's session timeout is evicted
// while it still believes it owns its partitions: when it wakes, it may append to
// sessions whose new owner already wrote past the same seqs. Both backends
// implement Fencing; find it with a type assertion.
//
// A node assigned partitions calls Own first, which records a new ownership epoch,
// then folds their sessions, and appends their events with AppendLeased under that
// epoch. Each AppendLeased checks, before it writes, that the lease's epoch is still
// its partition's current one (the highest recorded), and fails with ErrFenced,
// writing nothing, when a later Own took the partition; every event it writes is
// stored with the epoch. The session actor stops on ErrFenced instead of retrying.
//
// Where the check and the write are not one atomic step (ClickHouse has no
// transactions), a stale owner's batch whose check passed just before the new owner
// took the partition may still land after it, even after the new owner read the
// session and wrote the same seqs. Read makes such a write harmless: at each seq it
// returns only the event of the highest epoch that wrote there, and it hides every
// event whose epoch is lower than that of an event at a lower seq (see Superseded),
// since the new owner folded the session before it wrote and so never saw what came
// after. A newer owner may append at a seq that holds only such events: they do not
// conflict with it. The stale writer is not told nil: the lease is checked again
// after the write, and AppendLeased returns nil only when it was still current, so
// that the next owner (which takes the partition before it reads) folds the batch.
// Epoch 0 is that of Append (no lease): it is never fenced nor hidden, so that logs
// written before fencing, and embedded nodes, read as before.
type Fencing interface {
	// Own records node as the owner of partitions from now on and returns their
	// new epoch: greater than every epoch recorded before, of any partition, so that
	// epochs also order owners across partitions. From then on AppendLeased with an
	// older lease of any of these partitions fails with ErrFenced. Partitions must be
	// non-negative and node non-empty.
	Own(ctx context.Context, node string, partitions []int) (epoch uint64, err error)
	// AppendLeased is Append by the holder of lease, for sessions of its partition:
	// it fails with an error wrapping ErrFenced, and writes nothing, unless
	// lease.Epoch is still the partition's current epoch, or if an event of a higher
	// epoch is stored at one of the batch's positions. Otherwise it behaves like
	// Append, with the events stamped with lease.Epoch, and events of lower epochs
	// at the batch's positions (a stale owner's) do not conflict with it. It
	// returns nil only if the lease was still current once the batch was written;
	// if the partition was taken meanwhile, it fails with ErrFenced although the
	// batch is stored: the new owner folds it if it read the session after the
	// batch landed, and Read hides it otherwise.
	AppendLeased(ctx context.Context, lease Lease, events []messages.Envelope) error
}

// EpochReading is the optional capability of a Fencing log to read a partition's
// current ownership epoch, the one AppendLeased checks a lease against: in one
// small query, so that a node can check, as a session actor starts on it (once per
// activation, not per step), that no other node took the session's partition
// since its lease: a node evicted from the group while it hung folds, when it
// wakes, a history whose new owner has effects in flight, and must not perform
// them again. Both backends implement it; find it with a type assertion.
type EpochReading interface {
	// CurrentEpoch returns partition's current epoch: the highest Fencing.Own
	// recorded for it, 0 if none did. Partition must be non-negative.
	CurrentEpoch(ctx context.Context, partition int) (uint64, error)
}

// SeqRaces is the optional capability of a Log that several processes may write
// at once without refusing, atomically, two different events at one (session,
// seq): two writers of one stream may both be told that their Append succeeded
// while Read returns one of the events (ClickHouse, which has no transactions: its
// conflict check and its write are two steps). Such a log needs one writer per
// stream, which fencing gives (Fencing): in a cluster, each partition's owner
// appends under its lease; a node without a shared bus owns the whole log, so
// that a second one started on it fences the first instead of writing beside it.
// A log whose writes refuse such a race (SQLite, in one transaction) does not
// implement it, or reports false.
type SeqRaces interface {
	// SeqRacesUndetected reports whether racing writers of one stream may lose
	// acknowledged events.
	SeqRacesUndetected() bool
}

// Releasing is the optional capability of a Fencing log to record that a
// partition's owner gave it up cleanly: every event it appended for the
// partition's sessions is on the bus already; and, while it holds the partition,
// up to when it has published them (MarkPublished). A node assigned partitions
// takes them with TakeOver, which returns the owner records its new epoch
// superseded: a partition its previous owner released needs nothing of its ended
// sessions published again, while one whose owner was killed, or fenced, before
// it released may hold events appended and never published. Both backends
// implement Releasing; find it with a type assertion. A log without it is read as
// if no partition were ever released.
//
// The decision must rest on the records TakeOver returns, not on an Owners read
// before Fencing.Own: between the two another node that believes it owns a
// partition (an evicted member still running, a takeover racing a rebalance) may
// take it, end sessions, and die without releasing it; the earlier read would
// then promise that nothing is owed, and those sessions' results would never
// reach the bus.
type Releasing interface {
	// Release records that node, owner of partitions under epoch (Fencing.Own),
	// released them cleanly at atUS (Unix microseconds, > 0). A partition whose
	// current epoch is no longer epoch (a later owner took it), or whose owner at
	// epoch is not node, is left as it is; so is a partition nobody owns. The
	// arguments are checked as CheckRelease does. Releasing twice is harmless.
	Release(ctx context.Context, node string, epoch uint64, partitions []int, atUS int64) error
	// MarkPublished records that node, owner of partitions under epoch, has
	// published on the bus every event of their sessions it appended (and every one
	// it published again when it took them) whose TS is before throughUS (Unix
	// microseconds, > 0, on the clock of node, which stamped the events): a next
	// owner taking them from a node that died before it released them publishes
	// again only the sessions that ended at or after it. An owner marks
	// periodically while it holds partitions; Owners reads the greatest mark of
	// the owner record. A partition whose current epoch is no longer epoch, or
	// whose owner at epoch is not node, is left as it is, as by Release. The
	// arguments are checked as CheckMark does.
	MarkPublished(ctx context.Context, node string, epoch uint64, partitions []int, throughUS int64) error
	// Owners returns the latest owner record (the highest epoch) of each of
	// partitions that has one; a partition nobody ever owned is not in the map.
	// Partitions must be non-negative; an empty list returns an empty map.
	Owners(ctx context.Context, partitions []int) (map[int]Ownership, error)
	// TakeOver is Fencing.Own that also returns, for each of partitions that had
	// one, the owner record the new epoch superseded: the partition's latest
	// record below epoch, with its release and mark, as Owners would have
	// returned it just before; a partition nobody owned before is not in the map.
	// Its arguments are checked as Own's are.
	//
	// Where Own and the read are one transaction (SQLite), the record is exactly
	// the one replaced. Where they cannot be (ClickHouse), the record is read
	// after the new epoch was recorded, as the latest below it: every Own that
	// returned before TakeOver began is seen (its epoch is lower, or TakeOver
	// would have taken a higher one); but the record may be that of an Own
	// attempt abandoned for a higher epoch (it reads as neither released nor
	// marked), and a Release or MarkPublished landing meanwhile may be missing.
	// Each of these only makes the caller publish more again, never less.
	TakeOver(ctx context.Context, node string, partitions []int) (epoch uint64, previous map[int]Ownership, err error)
}

// Ownership is a partition's latest owner record (Releasing.Owners).
type Ownership struct {
	Node  string
	Epoch uint64
	// ReleasedUS is when Node released the partition cleanly (Releasing.Release)
	// at Epoch: 0 if it did not (it still owns it, or it died or was fenced).
	ReleasedUS int64
	// PublishedUS is the greatest mark of Node at Epoch (Releasing.MarkPublished):
	// every event it appended for the partition's sessions with a TS before it is
	// on the bus. 0 if it marked none. A release supersedes it.
	PublishedUS int64
}

// CheckRelease validates the arguments of Releasing.Release: a node name, an
// epoch > 0, a time > 0, and at least one partition, none negative.
func CheckRelease(node string, epoch uint64, partitions []int, atUS int64) error {
	if err := CheckOwn(node, partitions); err != nil {
		return err
	}
	if epoch == 0 {
		return fmt.Errorf("node %s: epoch 0 is no lease", node)
	}
	if atUS <= 0 {
		return fmt.Errorf("node %s: release time %d, want a Unix-microsecond time > 0", node, atUS)
	}
	return nil
}

// CheckMark validates the arguments of Releasing.MarkPublished: a node name, an
// epoch > 0, a time > 0, and at least one partition, none negative.
func CheckMark(node string, epoch uint64, partitions []int, throughUS int64) error {
	if err := CheckOwn(node, partitions); err != nil {
		return err
	}
	if epoch == 0 {
		return fmt.Errorf("node %s: epoch 0 is no lease", node)
	}
	if throughUS <= 0 {
		return fmt.Errorf("node %s: published-through time %d, want a Unix-microsecond time > 0", node, throughUS)
	}
	return nil
}

// CheckPartitions validates the partitions of Releasing.Owners: none negative.
func CheckPartitions(partitions []int) error {
	for _, p := range partitions {
		if p < 0 {
			return fmt.Errorf("negative partition %d", p)
		}
	}
	return nil
}

// PageReader is implemented by logs that read a page of a session without
// reading the rest of it (a GET of its events in pages, an export): both the
// SQLite and the ClickHouse logs.
type PageReader interface {
	// ReadN is Read stopped after n events (n ≤ 0: all of them), or after the
	// event that brings the payload read to maxBytes bytes or more (maxBytes ≤
	// 0: no bound): the events of session from fromSeq on, at most n, in seq
	// order, with the events Read hides hidden before they are counted. A page
	// bounded by bytes holds at least one event, and is short in events only
	// when it holds maxBytes or more of payload, or ends the session: a page of
	// a session whose events vary from a few bytes to megabytes holds about
	// maxBytes, where a count of events guessed from the events before it can
	// hold all of the session.
	ReadN(ctx context.Context, sessionID string, fromSeq uint64, n, maxBytes int) ([]messages.Envelope, error)
}

// ReadPage reads at most n events of session from fromSeq on (n ≤ 0: all of
// them): through the log's ReadN when it is a PageReader, else Read, cut.
func ReadPage(ctx context.Context, l Log, sessionID string, fromSeq uint64, n int) ([]messages.Envelope, error) {
	if pr, ok := l.(PageReader); ok {
		return pr.ReadN(ctx, sessionID, fromSeq, n, 0)
	}
	events, err := l.Read(ctx, sessionID, fromSeq)
	if n > 0 && len(events) > n {
		events = events[:n]
	}
	return events, err
}

// EventFinding is the optional capability of a Log to find an event of a
// session by its ID without reading the session: the SQLite log, whose IDs are
// indexed (or derived from their position). Find it with a type assertion, or
// call FindEvent.
type EventFinding interface {
	// FindEvent returns the event of session sessionID whose ID is id, exactly
	// as Read returns it, and true; false and no error when Read returns no
	// event with that ID in that session (none is stored, another session holds
	// the ID, or Read hides it: a stale owner's, eventlog.Superseded).
	FindEvent(ctx context.Context, sessionID, id string) (messages.Envelope, bool, error)
}

// FindEvent finds the event of session sessionID whose ID is id, as Read
// returns it: through the log's FindEvent when it is an EventFinding, else
// reading the session page events at a time until it is found.
func FindEvent(ctx context.Context, l Log, sessionID, id string, page int) (messages.Envelope, bool, error) {
	if f, ok := l.(EventFinding); ok {
		return f.FindEvent(ctx, sessionID, id)
	}
	for from := uint64(1); ; {
		events, err := ReadPage(ctx, l, sessionID, from, page)
		if err != nil {
			return messages.Envelope{}, false, err
		}
		for _, e := range events {
			if e.ID == id {
				return e, true, nil
			}
		}
		if page <= 0 || len(events) < page {
			return messages.Envelope{}, false, nil
		}
		from = events[len(events)-1].Seq + 1
	}
}

// Claiming is the optional capability of a Log to append a session's first batch
// without reading the session first: a session actor starting for a task writes
// the task at seq 1 with what the agent decides after it, and the log refuses the
// batch if the session has any event already, so that a batch it accepts proves
// the session had none and the actor's state, folded from the batch alone, is the
// session's. Unlike Append, the claim of a session holding the very same events
// (a task delivered again, whose first run wrote them) is refused, not taken for a
// repeat: the caller must read what that run did and go on from there. Both
// backends implement Claiming; find it with a type assertion.
//
// A claim is as atomic as the backend's conflict checks: SQLite checks and writes
// in one transaction, so of concurrent claims of one session exactly one wins;
// ClickHouse checks in its writer, which serializes the claims of one Log, while
// writers of two processes claiming one session at once may both write, as two
// Appends at one free seq may (two writers of one session: fencing prevents it in
// a cluster).
type Claiming interface {
	// Claim appends events, the first batch of their session, if the log holds no
	// event of that session at all (of any ID, at any seq, of any epoch, hidden
	// from Read or not). Otherwise it fails with an error wrapping ErrSeqConflict
	// and writes nothing. The events must all be of one session (else
	// ErrInvalidEvent); otherwise Claim validates them as Append does. An empty
	// batch is a no-op.
	//
	// A claim retried after an attempt whose outcome was unknown (ctx ended, the
	// connection broke) may find that attempt's events and be refused: the caller
	// reads the session then and finds them there, as if another writer had
	// claimed it.
	Claim(ctx context.Context, events []messages.Envelope) error
	// ClaimLeased is Claim by the holder of lease (Fencing), checked and confirmed
	// as AppendLeased is: it fails with an error wrapping ErrFenced, writing
	// nothing, unless lease.Epoch is still the partition's current epoch, or if the
	// session holds an event of a higher epoch; it returns nil only if the lease was
	// still current once the batch was written; and it stamps the events with
	// lease.Epoch. Events of lower epochs in the session (a stale owner's, even
	// those Read hides, which would not conflict with AppendLeased) refuse the claim
	// with ErrSeqConflict like any other: the session is not new.
	ClaimLeased(ctx context.Context, lease Lease, events []messages.Envelope) error
}

// CheckClaim validates the batch of Claiming.Claim (CheckBatch, and one session).
func CheckClaim(events []messages.Envelope) ([]messages.Envelope, error) {
	batch, err := CheckBatch(events)
	if err != nil {
		return nil, err
	}
	for _, e := range batch {
		if e.SessionID != batch[0].SessionID {
			return nil, fmt.Errorf("%w: a claim's events are of one session: event %s is of session %s, event %s of session %s",
				ErrInvalidEvent, batch[0].ID, batch[0].SessionID, e.ID, e.SessionID)
		}
	}
	return batch, nil
}

// Lease is a writer's claim on a partition: the epoch Fencing.Own returned for it.
type Lease struct {
	Partition int
	Epoch     uint64
}

func (l Lease) String() string { return fmt.Sprintf("partition %d epoch %d", l.Partition, l.Epoch) }

// Superseded reports whether Read hides a stored event of the given epoch, when the
// highest epoch of the events Read returns before it (at lower seqs) is before: a
// fenced writer's event is hidden once an owner with a higher epoch wrote at a
// lower seq. Within one seq, the events of the highest epoch win. Events of epoch
// 0 (Append without a lease) are never hidden.
func Superseded(epoch, before uint64) bool { return epoch != 0 && epoch < before }

// CheckOwn validates the arguments of Fencing.Own: a node name, and at least one
// partition, none negative.
func CheckOwn(node string, partitions []int) error {
	if node == "" {
		return errors.New("missing node name")
	}
	if len(partitions) == 0 {
		return fmt.Errorf("node %s: no partitions", node)
	}
	for _, p := range partitions {
		if p < 0 {
			return fmt.Errorf("node %s: negative partition %d", node, p)
		}
	}
	return nil
}

// Filter narrows Sessions. The zero value lists every session.
type Filter struct {
	// SinceUS keeps sessions started at or after this Unix-microsecond time.
	SinceUS int64
	// Limit bounds the number of sessions; 0 means no bound. Negative is invalid.
	Limit int
	// Status keeps sessions with this status (messages.StatusRunning, StatusCompleted
	// or StatusFailed); empty keeps every session. Another value is an error.
	Status string
	// Prefix keeps sessions whose ID starts with it (byte for byte; no pattern
	// characters): "kb/" lists the knowledge bases' streams, "memory/" the memory
	// namespaces'. Empty keeps every session.
	Prefix string
	// UpdatedSinceUS keeps sessions whose latest event's TS (SessionInfo.UpdatedUS)
	// is at or after this Unix-microsecond time; 0 keeps every session.
	UpdatedSinceUS int64
	// SessionsOnly keeps the agents' sessions (IsSession), not the streams of
	// notes, memory namespaces, knowledge bases, A2A push configs and dashboard
	// sign-ins, which never run a task.
	SessionsOnly bool
	// Agent keeps the sessions whose first event is a task.submitted naming this
	// agent (messages.TaskSubmitted.Agent; DefaultAgent for one naming none), as
	// the node's session rows name a session's agent; empty keeps every session.
	// A session whose first event is no task.submitted has no agent to match.
	Agent string
}

// DefaultAgent is the agent of a session whose first task names none: the
// node's one agent when it runs no named ones.
const DefaultAgent = "default"

// SessionInfo summarises one session of the log.
type SessionInfo struct {
	ID string `json:"session_id"`
	// Status is messages.StatusRunning, StatusCompleted or StatusFailed; see
	// SessionStatus: running while a submitted task has not ended, else the status
	// of the session's latest (highest-seq) task.* event.
	Status string `json:"status"`
	// Events is the number of events; LastSeq the highest seq.
	Events  int    `json:"events"`
	LastSeq uint64 `json:"last_seq"`
	// Steps is the number of model calls requested (model.requested events).
	Steps int `json:"steps"`
	// StartedUS and UpdatedUS are the smallest and the largest TS of the session's
	// events: the first and the last event's TS, since a session's TS grows with seq.
	StartedUS int64 `json:"started_us"`
	UpdatedUS int64 `json:"updated_us"`
	// Parent is the session that delegated this one (a sub-agent's child session):
	// the parent named by its first event, a task.submitted whose payload has
	// parent.session_id (messages.ParentRef); "" for every other session.
	Parent string `json:"parent,omitempty"`
}

// Health is the optional capability of a Log that can tell whether its writes go
// through, for a node's health check: a node whose log cannot write (its disk is
// full) can only refuse new tasks, so a load balancer should stop sending it any,
// and send them again once it can write. The SQLite and ClickHouse logs implement
// it; find it with a type assertion.
type Health interface {
	// Writable returns nil when the log's last write went through, at the cost of
	// an atomic load: it writes nothing then. When the last write failed, Writable
	// finds out whether writes go through again, without waiting for a caller's
	// next write: it tries a small write of its own (at most one a second; in
	// between, and while one is under way, it returns the failure it knows), and
	// returns nil once one goes through, or why writes still fail: an error
	// wrapping ErrFull while the disk is full (SQLite), the server's error while
	// ClickHouse is down or refuses writes.
	Writable(ctx context.Context) error
}

// Errors of the event log.
var (
	// ErrSeqConflict means another event already holds that (session, seq): two writers;
	// or, for Claiming, that the claimed session has events already.
	ErrSeqConflict = errors.New("eventlog: seq already taken by a different event")
	// ErrInvalidEvent means an event lacks an ID, a session, a seq or a type, or its
	// payload is not valid JSON.
	ErrInvalidEvent = errors.New("eventlog: invalid event")
	// ErrLocked means another process holds the log's data directory.
	ErrLocked = errors.New("eventlog: data directory is locked by another process")
	// ErrClosed means the log was closed.
	ErrClosed = errors.New("eventlog: log is closed")
	// ErrFenced means a later owner took the partition of the lease an append was
	// made under (see Fencing): the writer is stale and must stop, not retry.
	ErrFenced = errors.New("eventlog: fenced: a later owner took the partition")
	// ErrFull means the log's storage has no room left (a full disk): the write
	// that failed with it wrote nothing. Retrying succeeds once space is freed.
	ErrFull = errors.New("eventlog: the log's disk is full")
)

// TaskStatus maps a task.* event type to the session status it sets: task.submitted
// to running, task.completed to completed and task.failed to failed. Other types do
// not change a session's status and report false.
func TaskStatus(t messages.Type) (string, bool) {
	switch t {
	case messages.TypeTaskSubmitted:
		return messages.StatusRunning, true
	case messages.TypeTaskCompleted:
		return messages.StatusCompleted, true
	case messages.TypeTaskFailed:
		return messages.StatusFailed, true
	}
	return "", false
}

// SessionStatus derives a session's status from its task.* events: latest is the
// status TaskStatus gives its highest-seq task.* event ("" when it has none),
// submitted the number of its task.submitted events and ended that of its
// task.completed and task.failed events (each event counted once). A session runs its
// tasks one at a time, in order, and a task submitted while another runs waits its
// turn: so the session is running while it has more tasks than ends, even when its
// highest-seq task.* event is the end of an earlier task; a node resumes it when it
// starts. Otherwise it has the status of its latest task.* event.
//
// Logs filter by status in their query language; each states this same rule there.
func SessionStatus(latest string, submitted, ended uint64) string {
	if latest == "" || submitted > ended {
		return messages.StatusRunning
	}
	return latest
}

// CheckBatch validates a batch before it is appended and resolves repeats inside it.
// It returns the batch without the second and later copies of an event (same ID at
// the same session and seq), in the order given: events itself when it has none. It fails with ErrInvalidEvent if an
// event is invalid (see Log.Append), and with ErrSeqConflict if two different events
// of the batch claim one (session, seq) or one ID appears at two positions.
// Implementations of Log call it first; it does not look at stored events.
func CheckBatch(events []messages.Envelope) ([]messages.Envelope, error) {
	for i, e := range events {
		if err := validate(e); err != nil {
			return nil, fmt.Errorf("%w: event %d of %d: %s", ErrInvalidEvent, i+1, len(events), err)
		}
	}
	// Batches are small (one agent step writes about four events): a linear scan
	// over the events kept so far beats building maps until a batch grows large.
	// A small batch with no two events sharing an ID or a position, nearly every
	// batch, is returned as it came.
	if len(events) <= 16 && distinct(events) {
		return events, nil
	}
	type position struct {
		session string
		seq     uint64
	}
	var (
		byID  map[string]position
		byPos map[position]string
		out   = make([]messages.Envelope, 0, len(events))
	)
	if len(events) > 16 {
		byID = make(map[string]position, len(events))
		byPos = make(map[position]string, len(events))
	}
	find := func(e messages.Envelope) (sameID, samePos *messages.Envelope) {
		if byID == nil {
			for i := range out {
				if out[i].ID == e.ID {
					sameID = &out[i]
				}
				if out[i].SessionID == e.SessionID && out[i].Seq == e.Seq {
					samePos = &out[i]
				}
			}
			return sameID, samePos
		}
		if p, ok := byID[e.ID]; ok {
			sameID = &messages.Envelope{ID: e.ID, SessionID: p.session, Seq: p.seq}
		}
		if id, ok := byPos[position{e.SessionID, e.Seq}]; ok {
			samePos = &messages.Envelope{ID: id, SessionID: e.SessionID, Seq: e.Seq}
		}
		return sameID, samePos
	}
	for _, e := range events {
		sameID, samePos := find(e)
		switch {
		case sameID != nil && (sameID.SessionID != e.SessionID || sameID.Seq != e.Seq):
			return nil, fmt.Errorf("%w: event %s appears at session %s seq %d and at session %s seq %d of one batch",
				ErrSeqConflict, e.ID, sameID.SessionID, sameID.Seq, e.SessionID, e.Seq)
		case sameID != nil:
			continue // a repeated copy of an event already in the batch
		case samePos != nil:
			return nil, fmt.Errorf("%w: session %s seq %d is claimed by events %s and %s of one batch",
				ErrSeqConflict, e.SessionID, e.Seq, samePos.ID, e.ID)
		}
		if byID != nil {
			byID[e.ID] = position{e.SessionID, e.Seq}
			byPos[position{e.SessionID, e.Seq}] = e.ID
		}
		out = append(out, e)
	}
	return out, nil
}

// distinct reports whether no two events share an ID or a (session, seq).
func distinct(events []messages.Envelope) bool {
	for i := range events {
		for j := range i {
			if events[j].ID == events[i].ID || (events[j].SessionID == events[i].SessionID && events[j].Seq == events[i].Seq) {
				return false
			}
		}
	}
	return true
}

func validate(e messages.Envelope) error {
	switch {
	case e.ID == "":
		return fmt.Errorf("session %q seq %d: missing id", e.SessionID, e.Seq)
	case e.SessionID == "":
		return fmt.Errorf("event %s: missing session_id", e.ID)
	case e.Seq == 0:
		return fmt.Errorf("event %s of session %s: seq 0 (not sequenced)", e.ID, e.SessionID)
	case e.Type == "":
		return fmt.Errorf("event %s (session %s seq %d): missing type", e.ID, e.SessionID, e.Seq)
	case !messages.ValidJSON(e.Payload): // json.Valid, in a third of its time
		return fmt.Errorf("event %s (session %s seq %d): payload is not valid JSON", e.ID, e.SessionID, e.Seq)
	}
	return nil
}

// Pruner is a log that deletes the streams that only carried a message too large
// for the bus (BusStreamPrefix, messages.BusStored) once no reference to them can
// still be read: the bus keeps a reference for its topics' retention, and the
// session that read one recorded what it held in its own events. It also deletes,
// for their owners, the other streams of PrunablePrefixes once they are of no
// use. Sessions and the other streams are never deleted.
type Pruner interface {
	// PruneBusStreams deletes the streams of BusStreamPrefix whose last event is
	// stamped before beforeUS (Unix microseconds), with their summaries, at most
	// limit of them (limit > 0), and returns how many it deleted: fewer than limit
	// when no more were due. Storing a pruned stream's ID again starts it anew. A
	// log may finish the deletion after PruneBusStreams returns (ClickHouse runs it
	// as a mutation); until then Read may still return the pruned events.
	PruneBusStreams(ctx context.Context, beforeUS int64, limit int) (int, error)
	// PruneStreams is PruneBusStreams for the streams of prefix, one of
	// PrunablePrefixes or a longer one that starts with one of them (a whole
	// stream ID: that stream; any other prefix is an error, and deletes nothing).
	PruneStreams(ctx context.Context, prefix string, beforeUS int64, limit int) (int, error)
	// PruneListed deletes, of the streams listed, each whose last event is
	// stamped before its own bound (StreamBound.BeforeUS), with their summaries,
	// all in one deletion (one transaction; on ClickHouse one mutation per table),
	// and returns how many it deleted. A stream written at or after its bound
	// (a caller that saw its last event at T passes T+1: one written since keeps
	// it), one not stored, and every stream not listed stay. Each ID must be a
	// whole stream ID that starts with one of PrunablePrefixes, listed once, and
	// at most MaxPruneListed of them (CheckPruneList); otherwise PruneListed
	// fails naming the first that is not, and deletes nothing. An empty list
	// deletes nothing. As for PruneStreams, a log may finish the deletion after
	// it returns.
	PruneListed(ctx context.Context, streams []StreamBound) (int, error)
}

// StreamBound is a stream for Pruner.PruneListed to delete if its last event is
// stamped before BeforeUS (Unix microseconds).
type StreamBound struct {
	ID       string
	BeforeUS int64
}

// MaxPruneListed bounds the streams one Pruner.PruneListed call names: on
// ClickHouse they are the IN list of each table's mutation.
const MaxPruneListed = 1000

// CheckPruneList returns an error unless streams are at most MaxPruneListed,
// each a stream ID CheckPrunable takes, longer than the prefix it starts with,
// and none listed twice.
func CheckPruneList(streams []StreamBound) error {
	if len(streams) > MaxPruneListed {
		return fmt.Errorf("%d streams listed to prune; at most %d a call", len(streams), MaxPruneListed)
	}
	seen := make(map[string]bool, len(streams))
	for i, s := range streams {
		if err := CheckPrunable(s.ID); err != nil {
			return fmt.Errorf("stream %d of %d: %w", i+1, len(streams), err)
		}
		if slices.Contains(PrunablePrefixes, s.ID) {
			return fmt.Errorf("stream %d of %d: %q is a prefix of streams, not a stream", i+1, len(streams), s.ID)
		}
		if seen[s.ID] {
			return fmt.Errorf("stream %d of %d: %q is listed twice", i+1, len(streams), s.ID)
		}
		seen[s.ID] = true
	}
	return nil
}

// PruneAll deletes, batch streams a call, every stream of prefix whose last event
// is stamped before beforeUS (Pruner.PruneStreams), until a call finds fewer due or
// ctx ends, and returns how many it deleted, with the error that stopped it.
func PruneAll(ctx context.Context, p Pruner, prefix string, beforeUS int64, batch int) (int, error) {
	total := 0
	for ctx.Err() == nil {
		k, err := p.PruneStreams(ctx, prefix, beforeUS, batch)
		total += k
		if err != nil {
			return total, err
		}
		if k < batch {
			break
		}
	}
	return total, nil
}

// PrunablePrefixes are the prefixes of the streams a Pruner deletes: the bus's
// stored messages, the MCP server's clients' sessions (package mcp prunes those
// that ended or expired), and the A2A tasks' push-notification configs (package
// a2a prunes those of tasks that ended).
var PrunablePrefixes = []string{BusStreamPrefix, MCPSessionStreamPrefix, A2APushStreamPrefix}

// PrefixRange returns the range of stream IDs that start with prefix, a prefix
// CheckPrunable takes: from prefix (included) to end (excluded), prefix with its
// last byte incremented ("bus/": "bus0").
func PrefixRange(prefix string) (from, end string) {
	return prefix, prefix[:len(prefix)-1] + string([]byte{prefix[len(prefix)-1] + 1})
}

// CheckPrunable returns an error unless prefix starts with one of
// PrunablePrefixes and does not end with the byte 0xff.
func CheckPrunable(prefix string) error {
	for _, p := range PrunablePrefixes {
		if strings.HasPrefix(prefix, p) && prefix[len(prefix)-1] != 0xff {
			return nil
		}
	}
	return fmt.Errorf("the streams of prefix %q are not pruned (only those of %q)", prefix, PrunablePrefixes)
}

// Compacting is the optional capability of a Log to delete chosen events of the
// streams of CompactablePrefixes: an entity whose state depends on the latest
// event of each of its items (a knowledge base's document) deletes the events a
// later one superseded, so that its stream, and the cost of folding it, stays
// bounded by its live content however often the items change. Sessions and the
// other streams are never compacted. Both logs implement it; find it with a
// type assertion.
//
// A log may not delete the events together for its readers: ClickHouse deletes
// them with a mutation, which rewrites the data parts that hold them one part
// after the other, so that a Read while it runs may return any subset of them
// (never an event not listed, nor fewer of the others). A caller lists only
// events whose deletion, in part or in whole, leaves what a fold of the stream
// finds unchanged (see knowledge's compaction).
//
// Deleting leaves holes in the stream's seqs, which a writer that folded before
// the deletion must not fill: Append refuses, with ErrSeqConflict, an event of
// such a stream at a free seq below the highest it holds (an event stored
// already at its position is a repeat as before). The writer then folds what it
// lacked and appends after it, as on any other conflict.
type Compacting interface {
	// DeleteEvents deletes the events of stream at seqs, in one deletion (one
	// transaction on SQLite, where a reader sees all of them or none; one
	// mutation per table on ClickHouse, see above), and returns once they are
	// gone. It never deletes the
	// stream's highest seq (skipped if listed), so that the next seq to append
	// stays where it was; seqs not stored are skipped. It returns how many
	// events it deleted. A stream CheckCompactable refuses, or a seq 0, is an
	// error, and deletes nothing.
	DeleteEvents(ctx context.Context, stream string, seqs []uint64) (int, error)
}

// CompactingCost is the optional capability of a Compacting log whose
// deletions cost what the data stored beside the events weighs, not what they
// delete (ClickHouse rewrites the data parts that hold them): a compaction
// there should wait until it deletes at least CompactMin events.
type CompactingCost interface {
	// CompactMin returns the fewest events a compaction should delete at once.
	CompactMin() int
}

// CompactablePrefixes are the prefixes of the streams Compacting deletes events
// of: the knowledge bases'.
var CompactablePrefixes = []string{KnowledgeStreamPrefix}

// Compactable reports whether stream is one of CompactablePrefixes' (a whole
// stream ID, longer than the prefix).
func Compactable(stream string) bool {
	for _, p := range CompactablePrefixes {
		if len(stream) > len(p) && strings.HasPrefix(stream, p) {
			return true
		}
	}
	return false
}

// CheckCompactable returns an error unless stream is Compactable and seqs hold
// no 0.
func CheckCompactable(stream string, seqs []uint64) error {
	if !Compactable(stream) {
		return fmt.Errorf("the events of stream %q are not deleted (only those of the streams of %q)", stream, CompactablePrefixes)
	}
	if slices.Contains(seqs, 0) {
		return fmt.Errorf("stream %s: seq 0 is no event's", stream)
	}
	return nil
}

// FoldSnapshot is a session's folded state at Seq, encoded by the session actor
// (actors): a derived cache, never a source of truth. A session actor uses it only
// when its key (Rules, Codec, Agents) is its own, its checksum (Sum, of State)
// holds, and the log's event at Seq is still the one it was folded from (EventID,
// EventSum); otherwise it folds the session from its first event. Replay,
// verify and fork never read one.
type FoldSnapshot struct {
	SessionID string
	Seq       uint64
	EventID   string // the ID of the session's event at Seq
	EventSum  string // a digest of that event (actors)
	Rules     int    // the decision rules of the build that folded it
	Codec     string // the state's encoding and layout
	Agents    string // a digest of the agents the state was folded with
	State     []byte
	Sum       string // the checksum of State
}

// Snapshots is the optional capability of a Log to keep one fold snapshot per
// session (the SQLite and ClickHouse logs): a store without it has session
// actors fold their sessions from the start. Find it with a type assertion.
type Snapshots interface {
	// SaveSnapshot keeps s as its session's snapshot, in place of the one kept
	// (whatever its Seq: one that no longer holds, beyond the log, must not stay
	// for good), in one transaction.
	SaveSnapshot(ctx context.Context, s FoldSnapshot) error
	// LoadSnapshot returns the session's snapshot; ok is false when it has none.
	LoadSnapshot(ctx context.Context, sessionID string) (s FoldSnapshot, ok bool, err error)
}
