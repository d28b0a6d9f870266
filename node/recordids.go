package node

import (
	"context"
	"fmt"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// legacyRecordSkew bounds how far the timestamp of a record may be after the time
// the node that recorded its task under its coordinates' ID stamped it, for the two
// to be one record read twice: the producer's (or broker's) clock may run ahead of
// the node's. A record that a topic created again holds at the same offset was
// written after the earlier one was read, and so after that time.
const legacyRecordSkew = time.Minute

// recordedUnderCoordinates reports whether the task env, read from a record without
// a UUID header (its ID is the record's, messages.RecordID), was recorded by an
// earlier version of the node under the record's coordinates alone
// (messages.CoordinatesID), the ID those versions gave it: a record read, then read
// again after an upgrade (its offset not committed yet, or the group's offsets
// reset) must not run twice. The task recorded under that ID is this record only if
// its input is the same and it was stamped no earlier than the record's timestamp
// (less legacyRecordSkew): else it is the task of another record at the same
// coordinates (a topic deleted and created again starts its offsets at 0), and this
// one is a new task. It returns the session the task was found in and its ID. A
// record written after the node started (less legacyRecordSkew) is not looked up:
// the lookup reads the whole session.
func (n *Node) recordedUnderCoordinates(ctx context.Context, msgID string, env messages.Envelope) (session, coords string, found bool, err error) {
	coords, ts, ok := messages.SplitRecordID(msgID)
	if !ok || env.ID != msgID {
		return "", "", false, nil // a named task, an envelope of its own ID, or a record without a timestamp
	}
	if ts.After(n.started.Add(legacyRecordSkew)) {
		// Written after this node started: not read by this node's earlier version
		// (on another node, in a rolling upgrade, it may have been: see the README).
		// Most records are such, and their session is not read.
		return "", "", false, nil
	}
	session = env.SessionID
	if session == n.ingress.messageSession(msgID) {
		// A task with neither session nor key: its session is named after its ID,
		// as it was after the coordinates' ID.
		session = n.ingress.messageSession(coords)
	}
	events, err := n.log.Read(ctx, session, 1)
	if err != nil {
		return "", "", false, fmt.Errorf("task %s: read session %s for its task under the ID %s: %w", msgID, session, coords, err)
	}
	for _, e := range events {
		if e.ID != coords || e.Type != messages.TypeTaskSubmitted {
			continue
		}
		if ts.Add(-legacyRecordSkew).UnixMicro() > e.TS {
			return "", "", false, nil // recorded before this record was written
		}
		stored, err1 := e.Decode()
		this, err2 := env.Decode()
		if err1 != nil || err2 != nil {
			return "", "", false, nil
		}
		s, ok1 := stored.(*messages.TaskSubmitted)
		t, ok2 := this.(*messages.TaskSubmitted)
		if !ok1 || !ok2 || s.Input != t.Input {
			return "", "", false, nil
		}
		return session, coords, true, nil
	}
	return "", "", false, nil
}
